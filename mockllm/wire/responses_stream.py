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

from mockllm.chunks import (
    Block,
    BlockEnd,
    BlockStart,
    Failure,
    FinishChunk,
    FinishReason,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageChunk,
)
from mockllm.wire.dialect import StreamDecoder

_BLOCK_TYPES = {"reasoning": "reasoning", "message": "text", "function_call": "tool-call"}
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


class _Open:
    """A block seen so far: its type, what its deltas assembled, and its done item if sent."""

    __slots__ = ("call_id", "index", "kind", "name", "parts", "whole")

    def __init__(self, index: int, kind: str, item: dict[str, Any]) -> None:
        self.index = index
        self.kind = kind
        self.parts: list[str] = []
        self.call_id: str | None = item.get("call_id")
        self.name: str | None = item.get("name")
        self.whole: str | None = None  # the content `output_item.done` carried

    def block(self) -> Block:
        text = self.whole if self.whole is not None else "".join(self.parts)
        if self.kind == "tool-call":
            return Block("tool-call", id=self.call_id, name=self.name, arguments=text)
        return Block(self.kind, text=text)


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
    def __init__(self) -> None:
        self._blocks: list[_Open] = []
        self._by_output: dict[int, _Open] = {}  # output_index -> block
        self._usage: TokenUsage | None = None
        self._finish: FinishReason | None = None

    def feed(self, event: str | None, data: bytes) -> list[StreamChunk]:
        payload = msgspec.json.decode(data)
        if not isinstance(payload, dict):
            return []
        kind = payload.get("type") or event
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
        elif kind == "error":
            # OpenAI nests the fields under `error` at run time; its reference puts them at the top.
            error = _mapping(payload.get("error")) or payload
            self._finish = FinishReason("error", failure=Failure(message=error.get("message"),
                                                                  code=error.get("code") or error.get("type")))
        return []

    def _added(self, payload: dict[str, Any]) -> list[StreamChunk]:
        item = _mapping(payload.get("item"))
        block_type = _BLOCK_TYPES.get(str(item.get("type")))
        if block_type is None:  # an item kind with no StreamChunk (web search, ...): not recorded
            return []
        block = self._by_output[_output_index(payload)] = _Open(len(self._blocks), block_type, item)
        self._blocks.append(block)
        return [BlockStart(block.index, block_type)]

    def _delta(self, payload: dict[str, Any]) -> list[StreamChunk]:
        block = self._by_output.get(_output_index(payload))
        delta = payload.get("delta")
        if block is None or not isinstance(delta, str):
            return []
        block.parts.append(delta)
        if block.kind == "text":
            return [TextDelta(block.index, delta)]
        if block.kind == "reasoning":
            return [ReasoningDelta(block.index, delta)]
        # dsh repeats the call's identity on every fragment; so does the recording.
        return [ToolCallDelta(block.index, delta, block.call_id, block.name)]

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
        out: list[StreamChunk] = [BlockEnd(b.index, b.block()) for b in self._blocks]
        if self._usage is not None:
            out.append(UsageChunk(self._usage))
        out.append(FinishChunk(self._finish or FinishReason("error", failure=Failure(
            message="the stream ended with no response.completed", code="STREAM_CLOSED"))))
        return out
