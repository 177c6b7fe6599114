"""A live chat completions stream decoded back into StreamChunks, the way dsh's adapter records.

Blocks are allocated on first sight (reasoning, text, each tool call by its wire index), every
delta becomes one chunk (fragment boundaries are data), and the call ends with each block's
`block-end` in block order, then `usage`, then `finish`.
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

_FINISH_KINDS = {"stop": "stop", "tool_calls": "tool-calls", "function_call": "tool-calls", "length": "max-tokens"}


def finish_from_wire(reason: str | None) -> FinishReason:
    """An OpenAI `finish_reason` as the recorded finish kind; unknown reasons are errors with that code."""
    if reason is None:
        return FinishReason("stop")
    kind = _FINISH_KINDS.get(reason)
    if kind is not None:
        return FinishReason(kind)
    return FinishReason("error", failure=Failure(message=f"finish_reason {reason}", code=reason.upper()))


def usage_from_wire(usage: dict[str, Any]) -> TokenUsage:
    """OpenAI usage -> dsh's disjoint counts: cache reads are taken out of the prompt tokens."""
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
    prompt = int(usage.get("prompt_tokens") or 0)
    return TokenUsage(prompt - int(cached or 0), int(usage.get("completion_tokens") or 0),
                      cacheReadTokens=cached, reasoningTokens=reasoning)


class _Open:
    """A block seen so far: its type and what its deltas assembled."""

    __slots__ = ("call_id", "index", "kind", "name", "parts")

    def __init__(self, index: int, kind: str) -> None:
        self.index = index
        self.kind = kind
        self.parts: list[str] = []
        self.call_id: str | None = None
        self.name: str | None = None

    def block(self) -> Block:
        text = "".join(self.parts)
        if self.kind == "tool-call":
            return Block("tool-call", id=self.call_id, name=self.name, arguments=text)
        return Block(self.kind, text=text)


class ChatStreamDecoder(StreamDecoder):
    def __init__(self) -> None:
        self._blocks: list[_Open] = []
        self._by_key: dict[tuple[str, int], _Open] = {}  # ("text"|"reasoning", 0) or ("tool-call", wire index)
        self._usage: TokenUsage | None = None
        self._finish: FinishReason | None = None

    def feed(self, event: str | None, data: bytes) -> list[StreamChunk]:
        if data.startswith(b"[DONE]"):
            return []
        payload = msgspec.json.decode(data)
        if not isinstance(payload, dict):
            return []
        out: list[StreamChunk] = []
        error = payload.get("error")
        if isinstance(error, dict):
            self._finish = FinishReason("error", failure=Failure(message=error.get("message"),
                                                                  code=error.get("code") or error.get("type")))
            return out
        if isinstance(payload.get("usage"), dict):
            self._usage = usage_from_wire(payload["usage"])
        for choice in payload.get("choices") or ():
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content")
            if isinstance(reasoning, str) and reasoning:
                block = self._open(("reasoning", 0), "reasoning", out)
                block.parts.append(reasoning)
                out.append(ReasoningDelta(block.index, reasoning))
            content = delta.get("content")
            if isinstance(content, str) and content:
                block = self._open(("text", 0), "text", out)
                block.parts.append(content)
                out.append(TextDelta(block.index, content))
            for call in delta.get("tool_calls") or ():
                out.append(self._tool_fragment(call, out))
            if choice.get("finish_reason") is not None:
                self._finish = finish_from_wire(choice["finish_reason"])
        return out

    def _open(self, key: tuple[str, int], kind: str, out: list[StreamChunk]) -> _Open:
        block = self._by_key.get(key)
        if block is None:
            block = self._by_key[key] = _Open(len(self._blocks), kind)
            self._blocks.append(block)
            out.append(BlockStart(block.index, kind))
        return block

    def _tool_fragment(self, call: dict[str, Any], out: list[StreamChunk]) -> StreamChunk:
        block = self._open(("tool-call", int(call.get("index") or 0)), "tool-call", out)
        function = call.get("function") or {}
        block.call_id = block.call_id or call.get("id")
        block.name = block.name or function.get("name")
        arguments = function.get("arguments") or ""
        block.parts.append(arguments)
        # dsh repeats the call's identity on every fragment; so does the recording.
        return ToolCallDelta(block.index, arguments, block.call_id, block.name)

    def close(self) -> list[StreamChunk]:
        out: list[StreamChunk] = [BlockEnd(b.index, b.block()) for b in self._blocks]
        if self._usage is not None:
            out.append(UsageChunk(self._usage))
        out.append(FinishChunk(self._finish or FinishReason("error", failure=Failure(
            message="the stream ended with no finish_reason", code="STREAM_CLOSED"))))
        return out
