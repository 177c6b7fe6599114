"""A live chat completions stream decoded back into StreamChunks, the way dsh's adapter records.

Blocks are allocated on first sight (reasoning, text, each tool call by its wire index), every
delta becomes one chunk (fragment boundaries are data), and the call ends with each block's
`block-end` in block order, then `usage`, then `finish`.
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


class ChatStreamDecoder(StreamDecoder):
    def __init__(self) -> None:
        self._blocks: list[OpenBlock] = []
        self._by_key: dict[tuple[str, int], OpenBlock] = {}  # ("text"|"reasoning", 0) or ("tool-call", wire index)
        self._usage: TokenUsage | None = None
        self._finish: FinishReason | None = None

    def feed(self, event: str | None, data: bytes) -> list[StreamChunk]:
        if data.startswith(b"[DONE]"):
            self.ended = True
            return []
        payload = msgspec.json.decode(data)
        if not isinstance(payload, dict):
            return []
        out: list[StreamChunk] = []
        error = payload.get("error")
        if isinstance(error, dict):
            self._finish = FinishReason("error", failure=Failure(message=error.get("message"),
                                                                  code=error.get("code") or error.get("type")))
            self.ended = True
            return out
        if isinstance(payload.get("usage"), dict):
            self._usage = usage_from_wire(payload["usage"])
        for choice in payload.get("choices") or ():
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content")
            if isinstance(reasoning, str) and reasoning:
                out.append(self._open(("reasoning", 0), "reasoning", out).delta(reasoning))
            content = delta.get("content")
            if isinstance(content, str) and content:
                out.append(self._open(("text", 0), "text", out).delta(content))
            for call in delta.get("tool_calls") or ():
                out.append(self._tool_fragment(call, out))
            if choice.get("finish_reason") is not None:
                self._finish = finish_from_wire(choice["finish_reason"])
        return out

    def _open(self, key: tuple[str, int], kind: str, out: list[StreamChunk]) -> OpenBlock:
        block = self._by_key.get(key)
        if block is None:
            block = self._by_key[key] = OpenBlock(len(self._blocks), kind)
            self._blocks.append(block)
            out.append(BlockStart(block.index, kind))
        return block

    def _tool_fragment(self, call: dict[str, Any], out: list[StreamChunk]) -> StreamChunk:
        block = self._open(("tool-call", int(call.get("index") or 0)), "tool-call", out)
        function = call.get("function") or {}
        block.call_id = block.call_id or call.get("id")
        block.name = block.name or function.get("name")
        return block.delta(function.get("arguments") or "")

    def close(self) -> list[StreamChunk]:
        return closing_chunks(self._blocks, self._usage, self._finish, "finish_reason")


def body_events(reply: dict[str, Any]) -> list[SSEEvent]:
    """A whole chat.completion as the chunks a stream of it would have sent."""
    events: list[SSEEvent] = []
    for choice in reply.get("choices") or ():
        message = dict(choice.get("message") or {})
        # A stream's tool-call fragments carry their index; a whole message's calls are in order.
        message["tool_calls"] = [{**call, "index": k} for k, call in enumerate(message.get("tool_calls") or ())]
        events.append((None, _encode({"choices": [{"index": choice.get("index", 0), "delta": message,
                                                    "finish_reason": choice.get("finish_reason")}]})))
    if isinstance(reply.get("usage"), dict):
        events.append((None, _encode({"choices": [], "usage": reply["usage"]})))
    return events
