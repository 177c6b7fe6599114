"""A whole (`stream: false`) answer read as the stream it stands for, so one decoder records both.

The dialect seam decodes live streams only; a non-streamed reply is turned into the events a
stream of the same answer would have sent, per dialect. A dialect with no entry here is forwarded
but not recorded (the recorder says so).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from mockllm.sse_reader import Event

_encode = msgspec.json.encode


def _chat(reply: dict[str, Any]) -> list[Event]:
    events: list[Event] = []
    for choice in reply.get("choices") or ():
        message = dict(choice.get("message") or {})
        # A stream's tool-call fragments carry their index; a whole message's calls are in order.
        message["tool_calls"] = [{**call, "index": k} for k, call in enumerate(message.get("tool_calls") or ())]
        events.append((None, _encode({"choices": [{"index": choice.get("index", 0), "delta": message,
                                                    "finish_reason": choice.get("finish_reason")}]})))
    if isinstance(reply.get("usage"), dict):
        events.append((None, _encode({"choices": [], "usage": reply["usage"]})))
    return events


def _responses(reply: dict[str, Any]) -> list[Event]:
    events: list[Event] = []
    for k, item in enumerate(reply.get("output") or ()):
        for kind in ("response.output_item.added", "response.output_item.done"):
            events.append((kind, _encode({"type": kind, "output_index": k, "item": item})))
    events.append(("response.completed", _encode({"type": "response.completed", "response": reply})))
    return events


def _anthropic(reply: dict[str, Any]) -> list[Event]:
    # A block's whole content in its `content_block_start` is read as its one delta.
    events: list[Event] = [("message_start", _encode({"type": "message_start", "message": {**reply, "content": []}}))]
    for k, block in enumerate(reply.get("content") or ()):
        events.append(("content_block_start", _encode({"type": "content_block_start", "index": k,
                                                       "content_block": block})))
        events.append(("content_block_stop", _encode({"type": "content_block_stop", "index": k})))
    end = {"type": "message_delta", "delta": {"stop_reason": reply.get("stop_reason")},
           "usage": reply.get("usage") or {}}
    events.append(("message_delta", _encode(end)))
    return events


REPLY_EVENTS: dict[str, Callable[[dict[str, Any]], list[Event]]] = {
    "chat": _chat, "responses": _responses, "anthropic": _anthropic}


def reply_events(dialect: str, body: bytes) -> list[Event] | None:
    """The stream events of a whole reply, or None when this dialect's replies cannot be read."""
    synthesize = REPLY_EVENTS.get(dialect)
    if synthesize is None:
        return None
    try:
        reply = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None
    return synthesize(reply) if isinstance(reply, dict) else None
