"""OpenAI Responses: `POST …/v1/responses`, stream and non-stream.

A stream is named events (`event:` + `data:` with the same `type`), `sequence_number` from 0, no
`[DONE]`: `response.created`, `response.in_progress`, then one output item per recorded block
(reasoning as a summary, text as a message, each tool call as a `function_call`), each added
before its deltas and done before the terminal event, then `response.completed` carrying the
whole `output` and `usage`. One recorded delta is one delta event (fragment boundaries are data);
a block recorded with no deltas is sent as one delta of its assembled content, as chat.py does.

Decisions (the wire has no finish reason, only a status):
- `stop` and `tool-calls` -> `completed`; `max-tokens` -> `response.incomplete` with
  `incomplete_details.reason = "max_output_tokens"`, as OpenAI sends it (the SDK's
  `responses.stream(...).get_final_response()` then raises RuntimeError: there is no
  `response.completed`, exactly as against OpenAI).
- error finishes: `CONTEXT_WINDOW_EXCEEDED` is an HTTP 400 `context_length_exceeded` (as in chat);
  `EMPTY_RESPONSE` a completed response with no output; `CONTENT_FILTER` an incomplete response
  with reason `content_filter`; any other code `response.failed` with `error.code` its code,
  lowercased (the SDK yields it as an event; `get_final_response` raises RuntimeError).
- a `throw` with chunks streams them, then an `error` event with the fields both at its top level
  (as the API reference documents) and nested under `error` (as OpenAI sends them at run time):
  the nested object is what makes `openai` 3.57 raise `openai.APIError` mid-stream. `STREAM_CLOSED`
  is a bare cut. A `throw` with no chunks is the HTTP error, in OpenAI's error body.
- an item is done at its `block-end`, or as soon as another item opens after its last delta: dsh
  records every `block-end` at the end of a call, while OpenAI closes an item before adding the
  next, and clients may rely on that.
- usage is always the SDK's full `ResponseUsage` (its detail objects are required): `input_tokens`
  = input + cache reads + cache writes (OpenAI counts every prompt token; `cached_tokens` and
  `cache_write_tokens` are its breakdown), `output_tokens_details.reasoning_tokens`, with 0 for a
  count not recorded. A call recorded with no usage has `usage: null`.

Requests are read in `responses_request`; a live stream is decoded back into chunks in
`responses_stream`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec

from mockllm.dsh.chunks import (
    Block,
    BlockEnd,
    BlockStart,
    FinishChunk,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
)
from mockllm.script.entries import Entry, ThrowEntry
from mockllm.wire import render, responses_stream
from mockllm.wire.chat import error_body, error_type
from mockllm.wire.dialect import Dialect, Envelope, SSEEvent, StreamDecoder, whole_reply
from mockllm.wire.render import CallRender, Ended
from mockllm.wire.reply import Reply
from mockllm.wire.request import Request
from mockllm.wire.responses_request import decode_request
from mockllm.wire.responses_stream import ResponsesStreamDecoder
from mockllm.wire.sse import named_event

_encode = msgspec.json.encode
_REPLY_ID = re.compile(r"resp_mockllm_(\d+)_(\d+)")


def usage_object(usage: TokenUsage) -> dict[str, Any]:
    """dsh's disjoint counts -> a full `ResponseUsage` (every field the SDK's model requires)."""
    cached = usage.cacheReadTokens or 0
    written = usage.cacheWriteTokens or 0
    prompt = usage.inputTokens + cached + written
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
        "output_tokens": usage.outputTokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoningTokens or 0},
        "total_tokens": prompt + usage.outputTokens,
    }


class Responses(Dialect):
    name = "responses"
    path = "/responses"

    def decode_request(self, body: bytes) -> Request:
        return decode_request(body)

    def reply_id(self, script: int, call: int) -> str:
        return f"resp_mockllm_{script}_{call}"

    def reply_of(self, reply_id: str) -> tuple[int, int] | None:
        """`resp_mockllm_{script}_{call}` back to (script, call); any other id is not ours."""
        match = _REPLY_ID.fullmatch(reply_id)
        return (int(match[1]), int(match[2])) if match else None

    def render(self, entry: Entry, envelope: Envelope) -> Reply:
        return render_entry(entry, envelope)

    def error_body(self, message: str, code: str | None, status: int) -> bytes:
        return error_body(message, code, status)

    def stream_decoder(self) -> StreamDecoder:
        return ResponsesStreamDecoder()

    def body_events(self, body: bytes) -> list[SSEEvent] | None:
        reply = whole_reply(body)
        return None if reply is None else responses_stream.body_events(reply)


def render_entry(entry: Entry, envelope: Envelope) -> Reply:
    """Answer for one script entry (templates must already be resolved)."""
    return render.render_entry(_ResponseCall, entry, envelope)


def _status(finish: FinishChunk | None) -> tuple[str, dict[str, Any]]:
    """The terminal status of a finished call, and the Response fields that go with it."""
    reason = finish.reason if finish is not None else None
    if reason is None or reason.kind in ("stop", "tool-calls"):
        return "completed", {}
    if reason.kind == "max-tokens":
        return "incomplete", {"incomplete_details": {"reason": "max_output_tokens"}}
    code = reason.error_code or "error"
    if reason.kind == "error" and code == "EMPTY_RESPONSE":  # on the wire it was a bare completed response
        return "completed", {}
    if reason.kind == "error" and code == "CONTENT_FILTER":
        return "incomplete", {"incomplete_details": {"reason": "content_filter"}}
    message = reason.error_message or f"the model call failed ({code})"
    return "failed", {"error": {"code": code.lower() if reason.kind == "error" else reason.kind, "message": message}}


_TERMINAL = {"completed": "response.completed", "incomplete": "response.incomplete", "failed": "response.failed"}
_ITEM_PREFIX = {"reasoning": "rs", "text": "msg", "tool-call": "fc"}


class _Item:
    """One output item being streamed: a recorded block."""

    __slots__ = ("call_id", "done", "id", "index", "kind", "name", "output_index", "parts")

    def __init__(self, index: int, output_index: int, item_id: str, kind: str) -> None:
        self.index = index  # the block's index in the recorded call
        self.output_index = output_index
        self.id = item_id
        self.kind = kind
        self.parts: list[str] = []
        self.call_id = ""
        self.name = ""
        self.done = False

    def whole(self, status: str = "completed") -> dict[str, Any]:
        """The item as `output_item.done`, `response.completed` and a non-stream body carry it."""
        text = "".join(self.parts)
        if self.kind == "reasoning":
            return {"id": self.id, "type": "reasoning", "summary": [{"type": "summary_text", "text": text}]}
        if self.kind == "text":
            return {"id": self.id, "type": "message", "status": status, "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}
        return {"id": self.id, "type": "function_call", "status": status, "call_id": self.call_id,
                "name": self.name, "arguments": text}


class _ResponseCall(CallRender):
    """One call as named Responses events and its assembled Response."""

    def opening(self, chunks: Sequence[StreamChunk]) -> None:
        self._item_suffix = self.envelope.reply_id.removeprefix("resp_")  # item ids unique across replies
        self._sequence = 0
        self.items: dict[int, _Item] = {}  # block index -> item, in output order
        identity: dict[int, tuple[str | None, str | None]] = {}  # tool block -> first recorded (id, name)
        for chunk in chunks:
            if isinstance(chunk, ToolCallDelta):
                call_id, name = identity.get(chunk.index, (None, None))
                identity[chunk.index] = (call_id or chunk.id, name or chunk.name)
        for index, block in self.ended.items():
            call_id, name = identity.get(index, (None, None))
            identity[index] = (call_id or block.id, name or block.name)
        self._identity = identity
        self.event("response.created", response=self._response("in_progress", []))
        self.event("response.in_progress", response=self._response("in_progress", []))

    def text(self, chunk: TextDelta) -> None:
        self._delta(self._item(chunk.index, "text", self.frames.chunk), chunk.text)

    def reasoning(self, chunk: ReasoningDelta) -> None:
        self._delta(self._item(chunk.index, "reasoning", self.frames.chunk), chunk.text)

    def tool_delta(self, chunk: ToolCallDelta) -> None:
        self._delta(self._item(chunk.index, "tool-call", self.frames.chunk), chunk.argumentsDelta)

    def block_start(self, chunk: BlockStart) -> None:
        if chunk.blockType in _ITEM_PREFIX:
            self._item(chunk.index, chunk.blockType, self.frames.chunk)

    def whole_block(self, start: BlockStart, block: Block) -> None:
        if start.blockType in _ITEM_PREFIX:  # a block of no item kind is not sent at all
            self._delta(self.items[start.index], _whole_text(block))

    def block_end(self, chunk: BlockEnd) -> None:
        ending = self.items.get(chunk.index)
        if ending is not None and not ending.done:
            self._close(ending)

    def end(self) -> Ended:
        """Close every open item, then the terminal event, whose Response is also the non-stream body."""
        for item in self.items.values():
            if not item.done:
                self._close(item)
        status, fields = _status(self.finish)
        usage = usage_object(self.usage) if self.usage is not None else None
        response = self._response(status, [i.whole() for i in self.items.values()], **{**fields, "usage": usage})
        self.event(_TERMINAL[status], response=response)
        return None, (), _encode(response)

    def error_event(self, entry: ThrowEntry, status: int, body: bytes) -> bytes:
        # The fields both at the top (the API reference) and nested under `error` (what OpenAI sends,
        # and what makes the SDK raise mid-stream).
        error = {"type": error_type(status), "code": entry.code, "message": entry.message, "param": None}
        return self._frame("error", code=entry.code, message=entry.message, param=None, error=error)

    @staticmethod
    def throw_body(message: str, code: str, status: int) -> bytes:
        return error_body(message, code, status)

    @staticmethod
    def context_window_body(message: str | None) -> bytes:
        return error_body(message or "context window exceeded", "context_length_exceeded", 400)

    def event(self, kind: str, **fields: Any) -> None:
        self.frames.append(self._frame(kind, **fields))

    def _frame(self, kind: str, **fields: Any) -> bytes:
        """The next event in sequence."""
        frame = named_event(kind, _encode({"type": kind, "sequence_number": self._sequence, **fields}))
        self._sequence += 1
        return frame

    def _response(self, status: str, output: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
        envelope = self.envelope
        return {"id": envelope.reply_id, "object": "response", "created_at": envelope.created, "status": status,
                "error": None, "incomplete_details": None, "model": envelope.model, "output": output,
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "usage": None, **fields}

    def _item(self, index: int, kind: str, position: int) -> _Item:
        item = self.items.get(index)
        if item is not None:
            return item
        # OpenAI closes an item before adding the next: close those with no deltas left.
        for other in self.items.values():
            if not other.done and self.last_delta.get(other.index, -1) < position:
                self._close(other)
        output_index = len(self.items)
        item_id = f"{_ITEM_PREFIX[kind]}_{self._item_suffix}_{output_index}"
        item = self.items[index] = _Item(index, output_index, item_id, kind)
        if kind == "tool-call":
            call_id, name = self._identity.get(index, (None, None))
            ordinal = sum(1 for i in self.items.values() if i.kind == "tool-call") - 1
            item.call_id, item.name = call_id or f"call_{ordinal}", name or ""
            self.event("response.output_item.added", output_index=output_index,
                       item={**item.whole("in_progress"), "arguments": ""})
        elif kind == "reasoning":
            self.event("response.output_item.added", output_index=output_index,
                       item={"id": item.id, "type": "reasoning", "summary": []})
            self.event("response.reasoning_summary_part.added", item_id=item.id, output_index=output_index,
                       summary_index=0, part={"type": "summary_text", "text": ""})
        else:
            self.event("response.output_item.added", output_index=output_index,
                       item={**item.whole("in_progress"), "content": []})
            self.event("response.content_part.added", item_id=item.id, output_index=output_index, content_index=0,
                       part={"type": "output_text", "text": "", "annotations": []})
        return item

    def _delta(self, item: _Item, text: str) -> None:
        item.parts.append(text)
        where = {"item_id": item.id, "output_index": item.output_index}
        if item.kind == "text":
            self.event("response.output_text.delta", **where, content_index=0, delta=text, logprobs=[])
        elif item.kind == "reasoning":
            self.event("response.reasoning_summary_text.delta", **where, summary_index=0, delta=text)
        else:
            self.event("response.function_call_arguments.delta", **where, delta=text)

    def _close(self, item: _Item) -> None:
        item.done = True
        text = "".join(item.parts)
        where = {"item_id": item.id, "output_index": item.output_index}
        if item.kind == "text":
            self.event("response.output_text.done", **where, content_index=0, text=text, logprobs=[])
            self.event("response.content_part.done", **where, content_index=0,
                       part={"type": "output_text", "text": text, "annotations": []})
        elif item.kind == "reasoning":
            self.event("response.reasoning_summary_text.done", **where, summary_index=0, text=text)
            self.event("response.reasoning_summary_part.done", **where, summary_index=0,
                       part={"type": "summary_text", "text": text})
        else:
            self.event("response.function_call_arguments.done", **where, arguments=text)
        self.event("response.output_item.done", output_index=item.output_index, item=item.whole())


def _whole_text(block: Block) -> str:
    if block.type == "tool-call":
        if block.arguments is None or isinstance(block.arguments, str):
            return block.arguments or ""
        return _encode(block.arguments).decode()  # recorded as an object: sent as its JSON text
    return block.text or ""
