"""A live Anthropic Messages stream decoded back into StreamChunks, the way dsh's adapter records.

Blocks are allocated on first sight (each `content_block_start`, in wire order: thinking as
reasoning, text as text, tool_use as a tool call), every delta becomes one chunk (fragment
boundaries are data; a tool call's id and name ride on each of its fragments, as dsh records them),
and the call ends with each block's `block-end` in block order, then `usage`, then `finish`.
`signature_delta`s carry nothing dsh records; blocks of other types (redacted thinking, server
tools) are skipped. Usage is read from `message_start` and overwritten by `message_delta`, whose
counts are cumulative; an `event: error` ends the call with an error finish.
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

_FINISH_KINDS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool-calls", "max_tokens": "max-tokens"}
# Stop reasons dsh's adapter records as errors, with the code the renderer maps back to them.
_ERROR_CODES = {"refusal": "CONTENT_FILTER"}
_BLOCK_KINDS = {"text": "text", "thinking": "reasoning", "tool_use": "tool-call"}
_USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def finish_from_wire(reason: str) -> FinishReason:
    """An Anthropic `stop_reason` as the recorded finish kind; others are errors naming it."""
    kind = _FINISH_KINDS.get(reason)
    if kind is not None:
        return FinishReason(kind)
    return FinishReason("error", failure=Failure(message=f"stop_reason {reason}",
                                                 code=_ERROR_CODES.get(reason, reason.upper())))


def usage_from_wire(usage: dict[str, Any]) -> TokenUsage:
    """Anthropic's disjoint counts -> dsh's, one to one; optional counts stay absent when not sent."""
    details = usage.get("output_tokens_details") or {}
    return TokenUsage(int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0),
                      cacheReadTokens=usage.get("cache_read_input_tokens"),
                      cacheWriteTokens=usage.get("cache_creation_input_tokens"),
                      reasoningTokens=details.get("thinking_tokens") if isinstance(details, dict) else None)


class AnthropicStreamDecoder(StreamDecoder):
    def __init__(self) -> None:
        self._blocks: list[OpenBlock] = []
        self._by_wire: dict[int, OpenBlock | None] = {}  # wire index -> block (None: a skipped type)
        self._usage: dict[str, Any] = {}
        self._finish: FinishReason | None = None

    def feed(self, event: str | None, data: bytes) -> list[StreamChunk]:
        payload = msgspec.json.decode(data)
        if not isinstance(payload, dict):
            return []
        kind = payload.get("type") or event
        out: list[StreamChunk] = []
        if kind == "message_start":
            self._add_usage((payload.get("message") or {}).get("usage"))
        elif kind == "content_block_start":
            self._start(int(payload.get("index") or 0), payload.get("content_block") or {}, out)
        elif kind == "content_block_delta":
            block = self._by_wire.get(int(payload.get("index") or 0))
            text = _delta_text(payload.get("delta") or {})
            if block is not None and text is not None:
                out.append(block.delta(text))
        elif kind == "message_delta":
            self._add_usage(payload.get("usage"))
            reason = (payload.get("delta") or {}).get("stop_reason")
            if isinstance(reason, str):
                self._finish = finish_from_wire(reason)
        elif kind == "message_stop":
            self.ended = True
        elif kind == "error":
            error = payload.get("error") or {}
            self._finish = FinishReason("error", failure=Failure(message=error.get("message"),
                                                                  code=error.get("code") or error.get("type")))
            self.ended = True
        return out

    def _start(self, wire: int, content: dict[str, Any], out: list[StreamChunk]) -> None:
        kind = _BLOCK_KINDS.get(content.get("type", ""))
        if kind is None:
            self._by_wire[wire] = None
            return
        block = OpenBlock(len(self._blocks), kind, content.get("id"), content.get("name"))
        self._blocks.append(block)
        self._by_wire[wire] = block
        out.append(BlockStart(block.index, kind))
        # Anthropic opens blocks empty; content already in the start is kept as a first delta.
        initial = content.get("text") or content.get("thinking") or (
            msgspec.json.encode(content["input"]).decode() if content.get("input") else None)
        if initial:
            out.append(block.delta(initial))

    def _add_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self._usage.update({k: v for k, v in usage.items() if v is not None})

    def close(self) -> list[StreamChunk]:
        usage = usage_from_wire(self._usage) if any(k in self._usage for k in _USAGE_FIELDS) else None
        return closing_chunks(self._blocks, usage, self._finish, "stop_reason")


def _delta_text(delta: dict[str, Any]) -> str | None:
    kind = delta.get("type")
    if kind == "text_delta":
        return str(delta.get("text") or "")
    if kind == "thinking_delta":
        return str(delta.get("thinking") or "")
    if kind == "input_json_delta":
        return str(delta.get("partial_json") or "")
    return None  # signature_delta, citations_delta: nothing dsh records


def body_events(reply: dict[str, Any]) -> list[SSEEvent]:
    """A whole Message as the events a stream of it would have sent."""
    # A block's whole content in its `content_block_start` is read as its one delta.
    start = {"type": "message_start", "message": {**reply, "content": []}}
    events: list[SSEEvent] = [("message_start", _encode(start))]
    for k, block in enumerate(reply.get("content") or ()):
        events.append(("content_block_start", _encode({"type": "content_block_start", "index": k,
                                                       "content_block": block})))
        events.append(("content_block_stop", _encode({"type": "content_block_stop", "index": k})))
    end = {"type": "message_delta", "delta": {"stop_reason": reply.get("stop_reason")},
           "usage": reply.get("usage") or {}}
    events.append(("message_delta", _encode(end)))
    return events
