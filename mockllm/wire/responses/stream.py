"""A live OpenAI Responses stream decoded back into StreamChunks, the way dsh's adapter records.

Each output item is a block on first sight (`response.output_item.added`: reasoning, message text,
each function call), every delta event becomes one chunk (fragment boundaries are data), and the
call ends with each block's `block-end` in block order, then `usage`, then `finish`. The wire has
no finish reason: a completed response is `tool-calls` when it made a function call, else `stop`;
`incomplete` for `max_output_tokens` is `max-tokens`; anything else that ends a response
(`incomplete` otherwise, `response.failed`, an `error` event) is an error finish with its code,
uppercased. The wire always carries `cached_tokens` and `reasoning_tokens` (0 when nothing was
counted): they are recorded as sent; a `cache_write_tokens` of 0 says nothing and is left out.
"""

from __future__ import annotations

from typing import Any

import msgspec

from mockllm.dsh.chunks import (
    BlockStart,
    Failure,
    FinishReason,
    StreamChunk,
    TokenUsage,
)
from mockllm.wire.dialect import OpenBlock, SSEEvent, StreamDecoder, closing_chunks

_encode = msgspec.json.encode

_BLOCK_TYPES = {"reasoning": "reasoning", "message": "text", "function_call": "tool-call"}
# The events that carry the whole response object (its id among them).
_ENVELOPES = ("response.created", "response.in_progress", "response.completed", "response.incomplete",
              "response.failed")
_DELTAS = ("response.output_text.delta", "response.reasoning_summary_text.delta",
           "response.function_call_arguments.delta")


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _output_index(payload: dict[str, Any]) -> int:
    return int(payload.get("output_index") or 0)


def usage_from_wire(usage: dict[str, Any]) -> TokenUsage:
    """A Responses usage object -> dsh's disjoint counts: cache reads and writes leave the input."""
    details = usage.get("input_tokens_details") or {}
    cached = details.get("cached_tokens")
    written = details.get("cache_write_tokens") or None
    reasoning = (usage.get("output_tokens_details") or {}).get("reasoning_tokens")
    prompt = int(usage.get("input_tokens") or 0)
    return TokenUsage(prompt - int(cached or 0) - int(written or 0), int(usage.get("output_tokens") or 0),
                      cacheReadTokens=cached, cacheWriteTokens=written, reasoningTokens=reasoning)


def _item_text(item: dict[str, Any]) -> str | None:
    """The assembled content of a done item: its summary, message text or arguments."""
    kind = item.get("type")
    if kind == "function_call":
        arguments = item.get("arguments")
        return arguments if isinstance(arguments, str) else None
    parts = item.get("summary") if kind == "reasoning" else item.get("content")
    if not isinstance(parts, list):
        return None
    return "".join(p.get("text") or "" for p in parts if isinstance(p, dict))


class ResponsesStreamDecoder(StreamDecoder):
    chains = True  # a later request may continue an answer by its id (previous_response_id)

    def __init__(self) -> None:
        self._blocks: list[OpenBlock] = []
        self._by_output: dict[int, OpenBlock] = {}  # output_index -> block
        self._usage: TokenUsage | None = None
        self._finish: FinishReason | None = None

    def feed(self, event: str | None, data: bytes) -> list[StreamChunk]:
        payload = msgspec.json.decode(data)
        if not isinstance(payload, dict):
            return []
        kind = payload.get("type") or event
        if kind in _ENVELOPES:
            reply_id = _mapping(payload.get("response")).get("id")
            if isinstance(reply_id, str):
                self.reply_id = reply_id
        if kind == "response.output_item.added":
            return self._added(payload)
        if kind in _DELTAS:
            return self._delta(payload)
        if kind == "response.output_item.done":
            block = self._by_output.get(_output_index(payload))
            if block is not None:
                block.whole = _item_text(_mapping(payload.get("item")))
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            self._end(_mapping(payload.get("response")))
            self.ended = True
        elif kind == "error":
            # OpenAI nests the fields under `error` at run time; its reference puts them at the top.
            error = _mapping(payload.get("error")) or payload
            self._finish = FinishReason("error", failure=Failure(message=error.get("message"),
                                                                  code=error.get("code") or error.get("type")))
            self.ended = True
        return []

    def _added(self, payload: dict[str, Any]) -> list[StreamChunk]:
        item = _mapping(payload.get("item"))
        block_type = _BLOCK_TYPES.get(str(item.get("type")))
        if block_type is None:  # an item kind with no StreamChunk (web search, ...): not recorded
            return []
        block = self._by_output[_output_index(payload)] = OpenBlock(len(self._blocks), block_type,
                                                                   item.get("call_id"), item.get("name"))
        self._blocks.append(block)
        return [BlockStart(block.index, block_type)]

    def _delta(self, payload: dict[str, Any]) -> list[StreamChunk]:
        block = self._by_output.get(_output_index(payload))
        delta = payload.get("delta")
        if block is None or not isinstance(delta, str):
            return []
        return [block.delta(delta)]

    def _end(self, response: dict[str, Any]) -> None:
        if isinstance(response.get("usage"), dict):
            self._usage = usage_from_wire(response["usage"])
        status = response.get("status")
        if status == "completed":
            tools = any(b.kind == "tool-call" for b in self._blocks)
            self._finish = FinishReason("tool-calls" if tools else "stop")
            return
        reason = _mapping(response.get("incomplete_details")).get("reason")
        if status == "incomplete" and reason == "max_output_tokens":
            self._finish = FinishReason("max-tokens")
            return
        error = _mapping(response.get("error"))
        code = str(error.get("code") or reason or status or "error").upper()
        message = error.get("message") or f"the response ended {status}" + (f" ({reason})" if reason else "")
        self._finish = FinishReason("error", failure=Failure(message=message, code=code))

    def close(self) -> list[StreamChunk]:
        return closing_chunks(self._blocks, self._usage, self._finish, "response.completed")


def body_events(reply: dict[str, Any]) -> list[SSEEvent]:
    """A whole Response as the item events a stream of it would have sent."""
    events: list[SSEEvent] = []
    for k, item in enumerate(reply.get("output") or ()):
        for kind in ("response.output_item.added", "response.output_item.done"):
            events.append((kind, _encode({"type": kind, "output_index": k, "item": item})))
    events.append(("response.completed", _encode({"type": "response.completed", "response": reply})))
    return events
