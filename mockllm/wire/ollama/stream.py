"""A live Ollama `/api/chat` answer decoded back into StreamChunks, the way dsh's adapter records.

Each NDJSON line is fed as one data-only event. Blocks open on first sight and a run of one kind
continues its block: `message.thinking` as reasoning, `message.content` as text (empty strings,
which Ollama sends beside the other fields, add nothing); every non-empty piece is one delta. A tool
call comes whole: it is its own block with one `tool-call-delta` holding its arguments as JSON
(recorded fragments were joined on the wire; replay sends them whole again). The line with
`done: true` gives the usage (`prompt_eval_count`, `eval_count`) and the finish: `stop` is a stop,
or `tool-calls` when the answer called tools (Ollama says `stop` for both); `length` is max
tokens; any other reason an error naming it. An `{"error": …}` line ends the call with an error.
A whole (`stream: false`) answer is the same object, read as one line.
"""

from __future__ import annotations

from typing import Any

import msgspec

from mockllm.dsh.chunks import BlockStart, Failure, FinishReason, StreamChunk, TokenUsage
from mockllm.wire.dialect import OpenBlock, StreamDecoder, closing_chunks

_encode = msgspec.json.encode


def finish_from_wire(reason: str | None, called_tools: bool) -> FinishReason | None:
    if reason is None:
        return None
    if reason == "stop":
        return FinishReason("tool-calls" if called_tools else "stop")
    if reason == "length":
        return FinishReason("max-tokens")
    return FinishReason("error", failure=Failure(message=f"done_reason {reason}", code=reason.upper()))


def usage_from_wire(done: dict[str, Any]) -> TokenUsage | None:
    if "prompt_eval_count" not in done and "eval_count" not in done:
        return None
    return TokenUsage(int(done.get("prompt_eval_count") or 0), int(done.get("eval_count") or 0))


class OllamaStreamDecoder(StreamDecoder):
    def __init__(self) -> None:
        self._blocks: list[OpenBlock] = []
        self._open: OpenBlock | None = None  # the text or reasoning block a run of deltas continues
        self._usage: TokenUsage | None = None
        self._finish: FinishReason | None = None
        self._called = False

    def feed(self, event: str | None, data: bytes) -> list[StreamChunk]:
        payload = msgspec.json.decode(data)
        if not isinstance(payload, dict):
            return []
        out: list[StreamChunk] = []
        error = payload.get("error")
        if error:
            said = error if isinstance(error, str) else _encode(error).decode()
            self._finish = FinishReason("error", failure=Failure(message=said, code="SERVER"))
            self.ended = True
            return out
        message = payload.get("message") or {}
        if isinstance(message, dict):
            thinking, content = message.get("thinking"), message.get("content")
            if isinstance(thinking, str) and thinking:
                out.extend(self._delta("reasoning", thinking))
            if isinstance(content, str) and content:
                out.extend(self._delta("text", content))
            for call in message.get("tool_calls") or ():
                out.extend(self._tool_call(call))
        if payload.get("done"):
            self.ended = True  # the last line: a client that leaves now has the whole answer
            self._usage = usage_from_wire(payload)
            self._finish = finish_from_wire(payload.get("done_reason") or "stop", self._called)
        return out

    def _delta(self, kind: str, text: str) -> list[StreamChunk]:
        out: list[StreamChunk] = []
        if self._open is None or self._open.kind != kind:
            self._open = OpenBlock(len(self._blocks), kind)
            self._blocks.append(self._open)
            out.append(BlockStart(self._open.index, kind))
        out.append(self._open.delta(text))
        return out

    def _tool_call(self, call: Any) -> list[StreamChunk]:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            return []
        arguments = function.get("arguments")
        text = arguments if isinstance(arguments, str) else _encode(arguments if arguments is not None else {}).decode()
        block = OpenBlock(len(self._blocks), "tool-call", call.get("id"), function.get("name"))
        self._blocks.append(block)
        self._open = None
        self._called = True
        return [BlockStart(block.index, "tool-call"), block.delta(text)]

    def close(self) -> list[StreamChunk]:
        return closing_chunks(self._blocks, self._usage, self._finish, "done line")
