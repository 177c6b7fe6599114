"""A live Gemini `streamGenerateContent?alt=sse` answer decoded back into StreamChunks, the way
dsh's adapter records.

Each SSE event is a `GenerateContentResponse`; only the first candidate is read. Blocks open on
first sight and a run of one kind continues its block: a `thought: true` text part as reasoning, a
text part as text (empty ones add nothing: Gemini ends streams with one), each non-empty part one
delta. A `functionCall` part comes whole: a block of its own with one `tool-call-delta` holding its
`args` as JSON, its `id` when sent. `usageMetadata` is cumulative (the last one counts):
input = prompt - cached, output = candidates + thoughts, reasoning = thoughts, cache reads = cached.
`finishReason` `STOP` is a stop, or `tool-calls` when the answer called functions (Gemini says
`STOP` for both); `MAX_TOKENS` max tokens; `SAFETY` a `CONTENT_FILTER` error; any other an error
naming it. A `{"error": …}` event ends the call with an error, its status name the code.
A whole (`generateContent`) answer has the same shape, read as one event.
"""

from __future__ import annotations

from typing import Any

import msgspec

from mockllm.dsh.chunks import BlockStart, Failure, FinishReason, StreamChunk, TokenUsage
from mockllm.wire.dialect import OpenBlock, StreamDecoder, closing_chunks

_encode = msgspec.json.encode

# Finish reasons google-genai knows (it warns on others): an error code that is one is sent as itself.
FINISH_REASONS = frozenset((
    "FINISH_REASON_UNSPECIFIED", "STOP", "MAX_TOKENS", "SAFETY", "RECITATION", "LANGUAGE", "OTHER", "BLOCKLIST",
    "PROHIBITED_CONTENT", "SPII", "MALFORMED_FUNCTION_CALL", "IMAGE_SAFETY", "UNEXPECTED_TOOL_CALL",
    "TOO_MANY_TOOL_CALLS",
))


def finish_from_wire(reason: str, called_tools: bool) -> FinishReason:
    if reason == "STOP":
        return FinishReason("tool-calls" if called_tools else "stop")
    if reason == "MAX_TOKENS":
        return FinishReason("max-tokens")
    code = "CONTENT_FILTER" if reason == "SAFETY" else reason
    return FinishReason("error", failure=Failure(message=f"finishReason {reason}", code=code))


def usage_from_wire(metadata: dict[str, Any]) -> TokenUsage:
    cached = metadata.get("cachedContentTokenCount")
    thoughts = metadata.get("thoughtsTokenCount")
    prompt = int(metadata.get("promptTokenCount") or 0)
    candidates = int(metadata.get("candidatesTokenCount") or 0)
    return TokenUsage(prompt - int(cached or 0), candidates + int(thoughts or 0), cacheReadTokens=cached,
                      reasoningTokens=thoughts)


class GeminiStreamDecoder(StreamDecoder):
    def __init__(self) -> None:
        self._blocks: list[OpenBlock] = []
        self._open: OpenBlock | None = None  # the text or reasoning block a run of parts continues
        self._usage: TokenUsage | None = None
        self._reason: str | None = None
        self._error: FinishReason | None = None
        self._called = False

    def feed(self, event: str | None, data: bytes) -> list[StreamChunk]:
        payload = msgspec.json.decode(data)
        if isinstance(payload, list):  # a stream asked for without alt=sse is one JSON array of events
            return [chunk for item in payload for chunk in self.feed(event, _encode(item))]
        if not isinstance(payload, dict):
            return []
        error = payload.get("error")
        if isinstance(error, dict):
            self._error = FinishReason("error", failure=Failure(message=error.get("message"),
                                                                code=error.get("status") or str(error.get("code"))))
            return []
        out: list[StreamChunk] = []
        metadata = payload.get("usageMetadata")
        if isinstance(metadata, dict):
            self._usage = usage_from_wire(metadata)
        candidates = payload.get("candidates") or []
        candidate = candidates[0] if candidates and isinstance(candidates[0], dict) else {}
        content = candidate.get("content") or {}
        for part in content.get("parts") or () if isinstance(content, dict) else ():
            if isinstance(part, dict):
                out.extend(self._part(part))
        if isinstance(candidate.get("finishReason"), str):
            self._reason = candidate["finishReason"]
            self.ended = True  # its last chunk says why it finished: no closing event follows
        return out

    def _part(self, part: dict[str, Any]) -> list[StreamChunk]:
        call = part.get("functionCall")
        if isinstance(call, dict):
            args = call.get("args")
            text = args if isinstance(args, str) else _encode(args if args is not None else {}).decode()
            block = OpenBlock(len(self._blocks), "tool-call", call.get("id"), call.get("name"))
            self._blocks.append(block)
            self._open = None
            self._called = True
            return [BlockStart(block.index, "tool-call"), block.delta(text)]
        said = part.get("text")
        if not isinstance(said, str) or not said:
            return []
        kind = "reasoning" if part.get("thought") else "text"
        out: list[StreamChunk] = []
        if self._open is None or self._open.kind != kind:
            self._open = OpenBlock(len(self._blocks), kind)
            self._blocks.append(self._open)
            out.append(BlockStart(self._open.index, kind))
        out.append(self._open.delta(said))
        return out

    def close(self) -> list[StreamChunk]:
        finish = self._error or (finish_from_wire(self._reason, self._called) if self._reason else None)
        return closing_chunks(self._blocks, self._usage, finish, "finishReason")
