"""OpenAI chat completions (the DeepSeek flavour dsh records from): `POST …/v1/chat/completions`.

One recorded delta is one SSE event, so a client rebuilds exactly the recorded fragments. The
first delta carries `role: "assistant"`; a tool call's identity (id, type, name) rides only on its
first fragment. Rendering is pure and runs once per entry wherever the bytes do not depend on the
request.

Requests are read in `request`; a live stream is decoded back into chunks in `stream`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from mockllm.dsh.chunks import (
    Block,
    BlockStart,
    FinishChunk,
    ReasoningDelta,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
)
from mockllm.script.entries import ThrowEntry
from mockllm.wire.chat import stream as chat_stream
from mockllm.wire.chat.request import decode_request
from mockllm.wire.chat.stream import ChatStreamDecoder
from mockllm.wire.dialect import WalkedDialect
from mockllm.wire.render import CallRender, Ended, Run
from mockllm.wire.request import Request
from mockllm.wire.sse import HOLE, data_event, run_pieces

DONE = data_event(b"[DONE]")

_encode = msgspec.json.encode


_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 409: "conflict_error", 410: "invalid_request_error",
                413: "invalid_request_error", 422: "invalid_request_error", 429: "rate_limit_error"}


def error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def error_body(message: str, code: str | None, status: int) -> bytes:
    """The OpenAI error body `{"error":{"message","type","param","code"}}`."""
    return _encode({"error": {"message": message, "type": error_type(status), "param": None, "code": code}})


def models_body(model: str) -> bytes:
    """`GET …/v1/models`: the one model the recording called."""
    return _encode({"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "mockllm"}]})


def usage_object(usage: TokenUsage) -> dict[str, Any]:
    """dsh's disjoint counts -> OpenAI's: prompt tokens include cache reads."""
    cached = usage.cacheReadTokens or 0
    prompt = usage.inputTokens + cached
    out: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": usage.outputTokens,
                           "total_tokens": prompt + usage.outputTokens}
    if usage.cacheReadTokens is not None:
        out["prompt_tokens_details"] = {"cached_tokens": usage.cacheReadTokens}
    if usage.reasoningTokens is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": usage.reasoningTokens}
    return out




def _usage_only(data: Any) -> bool:
    return isinstance(data, dict) and data.get("choices") == [] and isinstance(data.get("usage"), dict)


def finish_reason(finish: FinishChunk) -> str:
    reason = finish.reason
    if reason.kind == "stop":
        return "stop"
    if reason.kind == "tool-calls":
        return "tool_calls"
    if reason.kind == "max-tokens":
        return "length"
    if reason.kind == "error":
        code = reason.error_code or "error"
        # An empty response was recorded as an error by the adapter; on the wire it was a bare stop.
        return "stop" if code == "EMPTY_RESPONSE" else code.lower()
    return reason.kind.replace("-", "_")


class _ToolCall:
    """A tool call being streamed: its identity, its fragments, and its later fragments' template."""

    __slots__ = ("args", "cut", "id", "name", "ordinal")

    def __init__(self, call_id: str, name: str, ordinal: int, cut: list[bytes]) -> None:
        self.id = call_id
        self.name = name
        self.ordinal = ordinal  # its index among the call's tool calls: the wire's `index`
        self.args: list[str] = []
        self.cut = cut


class _ChatCall(CallRender):
    """One call as `chat.completion.chunk` events and its assembled `chat.completion`."""

    def opening(self) -> None:
        envelope = self.envelope
        # Every chunk's JSON opens with the same fields: encoded once per reply.
        self._prefix = (
            b'{"id":' + _encode(envelope.reply_id) + b',"object":"chat.completion.chunk","created":'
            + _encode(envelope.created) + b',"model":' + _encode(envelope.model) + b","
        )
        self._role_sent = False
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._tool_calls: dict[int, _ToolCall] = {}  # block index -> assembled call, in call order
        self._cuts: dict[str, list[bytes]] = {}  # delta field -> its event's template
        # The last delta's template and where its text is assembled: what more() goes on with.
        self._run: tuple[list[bytes], list[str]] = ([], [])

    def text(self, chunk: TextDelta) -> None:
        self._text(chunk.text)

    def reasoning(self, chunk: ReasoningDelta) -> None:
        self._reasoning_text(chunk.text)

    def more(self, run: Run) -> None:
        (head, tail), parts = self._run
        parts.append(run.text)
        self.frames.run(run_pieces(head, run.values, tail), run.count)

    def tool_delta(self, chunk: ToolCallDelta) -> None:
        name = chunk.name
        if name is None and chunk.index not in self._tool_calls:  # only a call's first fragment names it
            name = getattr(self.ended.get(chunk.index), "name", None)
        self._tool_fragment(chunk.index, chunk.id, name, chunk.argumentsDelta)

    def finish_chunk(self, chunk: FinishChunk) -> None:
        self._emit({}, finish_reason(chunk))

    def whole_block(self, start: BlockStart, block: Block) -> None:
        if block.type == "text":
            self._text(block.text or "")
        elif block.type == "reasoning":
            self._reasoning_text(block.text or "")
        elif block.type == "tool-call":
            arguments = block.arguments if isinstance(block.arguments, str) else _encode(block.arguments).decode()
            self._tool_fragment(start.index, block.id, block.name, arguments)

    def end(self) -> Ended:
        return self.usage_frame(), (DONE,), _encode(self.completion())

    def held(self) -> Ended:
        # The usage frame still goes out before the hold when the client asked for usage.
        return self.end()

    def error_event(self, entry: ThrowEntry, status: int, body: bytes) -> bytes:
        return data_event(body)

    @staticmethod
    def throw_body(message: str, code: str, status: int) -> bytes:
        return error_body(message, code, status)

    @staticmethod
    def context_window_body(message: str | None) -> bytes:
        return error_body(message or "context window exceeded", "context_length_exceeded", 400)

    def _text(self, text: str) -> None:
        self._fragment("content", text, self._content)

    def _reasoning_text(self, text: str) -> None:
        self._fragment("reasoning_content", text, self._reasoning)

    def _fragment(self, field: str, text: str, parts: list[str]) -> None:
        """A text or reasoning delta: after the first chunk (which carries the role), from its template."""
        parts.append(text)
        cut = self._cuts.get(field)
        if cut is None:
            cut = self._cuts[field] = self._frame({field: HOLE}, None).split(b"\x00")
        self._run = (cut, parts)
        if self._role_sent:
            self.frames.append(cut[0] + _encode(text) + cut[1])
        else:
            self._emit({field: text})

    def _tool_fragment(self, index: int, call_id: str | None, name: str | None, arguments: str) -> None:
        call = self._tool_calls.get(index)
        if call is None:
            ordinal = len(self._tool_calls)
            # Fragments after a call's first carry only its index and their arguments.
            fragment = {"tool_calls": [{"index": ordinal, "function": {"arguments": HOLE}}]}
            cut = self._frame(fragment, None).split(b"\x00")
            call = self._tool_calls[index] = _ToolCall(call_id or f"call_{ordinal}", name or "", ordinal, cut)
            wire = {"index": ordinal, "id": call.id, "type": "function",
                    "function": {"name": call.name, "arguments": arguments}}
            delta: dict[str, Any] = {"tool_calls": [wire]}
            if not self._role_sent:
                delta["content"] = None
            self._emit(delta)
        else:
            self.frames.append(call.cut[0] + _encode(arguments) + call.cut[1])
        call.args.append(arguments)
        self._run = (call.cut, call.args)

    def _emit(self, delta: dict[str, Any], finish: str | None = None) -> None:
        if not self._role_sent:
            delta = {"role": "assistant", **delta}
            self._role_sent = True
        self.frames.append(self._frame(delta, finish))

    def _frame(self, delta: dict[str, Any], finish: str | None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return data_event(self._prefix + b'"choices":[' + _encode(choice) + b"]}")

    def usage_frame(self) -> bytes | None:
        if self.usage is None:
            return None
        return data_event(self._prefix + b'"choices":[],"usage":' + _encode(usage_object(self.usage)) + b"}")

    def completion(self) -> dict[str, Any]:
        """The non-streaming `chat.completion` for the same call."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._content) if self._content else None}
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        if self._tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": "".join(c.args)}}
                for c in self._tool_calls.values()
            ]
        elif message["content"] is None:
            message["content"] = ""
        out: dict[str, Any] = {
            "id": self.envelope.reply_id, "object": "chat.completion", "created": self.envelope.created,
            "model": self.envelope.model,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": finish_reason(self.finish) if self.finish else None}],
        }
        if self.usage is not None:
            out["usage"] = usage_object(self.usage)
        return out


class ChatCompletions(WalkedDialect):
    name = "chat"
    path = "/chat/completions"
    call = _ChatCall
    decoder = ChatStreamDecoder
    whole_events = staticmethod(chat_stream.body_events)

    def decode_request(self, body: bytes) -> Request:
        return decode_request(body)

    def reply_id(self, script: int, call: int) -> str:
        return f"chatcmpl-mockllm-{script}-{call}"

    def error_body(self, message: str, code: str | None, status: int) -> bytes:
        return error_body(message, code, status)

    def recorded_ending(self, events: Sequence[tuple[str | None, Any]]) -> tuple[int | None, int]:
        # `[DONE]` closes the stream; the chunk with no choices and the usage is what a client
        # gets only when it asks for usage (`stream_options.include_usage`), right before it.
        closing = len(events) - 1 if events and events[-1][1] == "[DONE]" else len(events)
        usage = next((k for k in range(closing - 1, -1, -1) if _usage_only(events[k][1])), None)
        return usage, closing
