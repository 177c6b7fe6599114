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
from typing import Any

import msgspec

from mockllm.dsh.chunks import (
    Block,
    BlockEnd,
    BlockStart,
    FinishChunk,
    ReasoningDelta,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
)
from mockllm.script.entries import Entry, ThrowEntry
from mockllm.wire import render, responses_stream
from mockllm.wire.chat import error_body, error_type
from mockllm.wire.dialect import Dialect, Envelope, SSEEvent, StreamDecoder, whole_reply
from mockllm.wire.render import CallRender, Ended, Reading, Run, read
from mockllm.wire.reply import Reply
from mockllm.wire.request import Request
from mockllm.wire.responses_request import decode_request
from mockllm.wire.responses_stream import ResponsesStreamDecoder
from mockllm.wire.sse import HOLE, NUMBER, json_template, named_pieces, named_template

_encode = msgspec.json.encode
_REPLY_ID = re.compile(r"resp_mockllm_(\d+)_(\d+)")

_USAGE = json_template({"input_tokens": NUMBER, "input_tokens_details": {"cached_tokens": NUMBER,
                                                                          "cache_write_tokens": NUMBER},
                        "output_tokens": NUMBER, "output_tokens_details": {"reasoning_tokens": NUMBER},
                        "total_tokens": NUMBER})


def usage_json(usage: TokenUsage | None) -> bytes:
    """dsh's disjoint counts -> a full `ResponseUsage` (every field the SDK's model requires), or
    null for a call recorded with no usage."""
    if usage is None:
        return b"null"
    cached = usage.cacheReadTokens or 0
    written = usage.cacheWriteTokens or 0
    prompt = usage.inputTokens + cached + written
    return _USAGE % (prompt, cached, written, usage.outputTokens, usage.reasoningTokens or 0,
                     prompt + usage.outputTokens)


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

    def render(self, reading: Reading, envelope: Envelope) -> Reply:
        return render.render_entry(_ResponseCall, reading, envelope)

    def error_body(self, message: str, code: str | None, status: int) -> bytes:
        return error_body(message, code, status)

    def stream_decoder(self) -> StreamDecoder:
        return ResponsesStreamDecoder()

    def body_events(self, body: bytes) -> list[SSEEvent] | None:
        reply = whole_reply(body)
        return None if reply is None else responses_stream.body_events(reply)


def render_entry(entry: Entry, envelope: Envelope) -> Reply:
    """Answer for one script entry (templates must already be resolved)."""
    return render.render_entry(_ResponseCall, read(entry), envelope)


def _status(finish: FinishChunk | None) -> tuple[str, bytes, bytes]:
    """The terminal status of a finished call, and the Response's `error` and `incomplete_details`
    that go with it (encoded)."""
    reason = finish.reason if finish is not None else None
    if reason is None or reason.kind in ("stop", "tool-calls"):
        return "completed", b"null", b"null"
    if reason.kind == "max-tokens":
        return "incomplete", b"null", b'{"reason":"max_output_tokens"}'
    code = reason.error_code or "error"
    if reason.kind == "error" and code == "EMPTY_RESPONSE":  # on the wire it was a bare completed response
        return "completed", b"null", b"null"
    if reason.kind == "error" and code == "CONTENT_FILTER":
        return "incomplete", b"null", b'{"reason":"content_filter"}'
    message = reason.error_message or f"the model call failed ({code})"
    error = {"code": code.lower() if reason.kind == "error" else reason.kind, "message": message}
    return "failed", _encode(error), b"null"


_ITEM_PREFIX = {"reasoning": "rs", "text": "msg", "tool-call": "fc"}


def _event(kind: str, **fields: Any) -> bytes:
    """An event's template: its type, its sequence number (a NUMBER), then `fields`."""
    return named_template(kind, {"type": kind, "sequence_number": NUMBER, **fields})


def _delta_pieces(kind: str, **fields: Any) -> list[bytes]:
    """A delta event's pieces: its sequence number, item id, output index and delta are the holes."""
    return named_pieces(kind, {"type": kind, "sequence_number": NUMBER, "item_id": HOLE, "output_index": NUMBER,
                               **fields})


# The stream's events, each encoded once (sse.py's templates). `where` is an item's id and index.
_WHERE: dict[str, Any] = {"item_id": HOLE, "output_index": NUMBER}
_RESPONSE = json_template({"id": HOLE, "object": "response", "created_at": NUMBER, "status": HOLE, "error": HOLE,
                           "incomplete_details": HOLE, "model": HOLE, "output": HOLE, "parallel_tool_calls": True,
                           "tool_choice": "auto", "tools": [], "usage": HOLE})
_RESPONSE_EVENTS = {kind: _event(kind, response=HOLE) for kind in (
    "response.created", "response.in_progress", "response.completed", "response.incomplete", "response.failed")}
_TERMINAL = {"completed": "response.completed", "incomplete": "response.incomplete", "failed": "response.failed"}
_ITEM_ADDED = _event("response.output_item.added", output_index=NUMBER, item=HOLE)
_ITEM_DONE = _event("response.output_item.done", output_index=NUMBER, item=HOLE)
_ERROR = _event("error", code=HOLE, message=HOLE, param=None, error=HOLE)
# Per item kind: its item (in progress, then done), the events that open it after
# output_item.added, its delta events' pieces and the events that close it before output_item.done.
_MESSAGE_ITEM = json_template({"id": HOLE, "type": "message", "status": HOLE, "role": "assistant",
                               "content": [{"type": "output_text", "text": HOLE, "annotations": []}]})
_MESSAGE_ADDED = json_template({"id": HOLE, "type": "message", "status": "in_progress", "role": "assistant",
                                "content": []})
_PART_ADDED = _event("response.content_part.added", **_WHERE, content_index=0,
                     part={"type": "output_text", "text": "", "annotations": []})
_TEXT_DELTA = _delta_pieces("response.output_text.delta", content_index=0, delta=HOLE, logprobs=[])
_TEXT_DONE = _event("response.output_text.done", **_WHERE, content_index=0, text=HOLE, logprobs=[])
_PART_DONE = _event("response.content_part.done", **_WHERE, content_index=0,
                    part={"type": "output_text", "text": HOLE, "annotations": []})
_REASONING_ITEM = json_template({"id": HOLE, "type": "reasoning", "summary": [{"type": "summary_text", "text": HOLE}]})
_REASONING_ADDED = json_template({"id": HOLE, "type": "reasoning", "summary": []})
_SUMMARY_ADDED = _event("response.reasoning_summary_part.added", **_WHERE, summary_index=0,
                        part={"type": "summary_text", "text": ""})
_SUMMARY_DELTA = _delta_pieces("response.reasoning_summary_text.delta", summary_index=0, delta=HOLE)
_SUMMARY_TEXT_DONE = _event("response.reasoning_summary_text.done", **_WHERE, summary_index=0, text=HOLE)
_SUMMARY_DONE = _event("response.reasoning_summary_part.done", **_WHERE, summary_index=0,
                       part={"type": "summary_text", "text": HOLE})
_CALL_ITEM = json_template({"id": HOLE, "type": "function_call", "status": HOLE, "call_id": HOLE, "name": HOLE,
                            "arguments": HOLE})
_ARGUMENTS_DELTA = _delta_pieces("response.function_call_arguments.delta", delta=HOLE)
_ARGUMENTS_DONE = _event("response.function_call_arguments.done", **_WHERE, arguments=HOLE)
_DELTA_PIECES = {"text": _TEXT_DELTA, "reasoning": _SUMMARY_DELTA, "tool-call": _ARGUMENTS_DELTA}
# Events that always go out together, filled by one `%`.
_OPENING = _RESPONSE_EVENTS["response.created"] + _RESPONSE_EVENTS["response.in_progress"]
_MESSAGE_OPENED = _ITEM_ADDED + _PART_ADDED
_REASONING_OPENED = _ITEM_ADDED + _SUMMARY_ADDED
_MESSAGE_CLOSED = _TEXT_DONE + _PART_DONE + _ITEM_DONE
_REASONING_CLOSED = _SUMMARY_TEXT_DONE + _SUMMARY_DONE + _ITEM_DONE
_CALL_CLOSED = _ARGUMENTS_DONE + _ITEM_DONE

# Per delta kind, what goes between two of its events in a run: the first one's end, the next
# one's start and its sequence number, for every number, made once for all replies (a run's events
# differ by their number and their delta: the rest is joined around those).
_BETWEEN: dict[str, list[bytes]] = {kind: [] for kind in _DELTA_PIECES}


def _numbered_run(kind: str, first: int, middle: bytes, values: list[bytes]) -> bytes:
    """The joined delta events of one item numbered from `first`, for `values` (encoded JSON):
    `head, number, middle, value, tail` each, with one join."""
    head, tail = _DELTA_PIECES[kind][0], _DELTA_PIECES[kind][-1]
    between = _BETWEEN[kind]
    end = first + len(values)
    if len(between) < end:
        between.extend(tail + head + b"%d" % n for n in range(len(between), max(end, 2 * len(between), 256)))
    parts = [middle] * (3 * len(values))
    parts[0::3] = between[first:end]
    parts[0] = head + b"%d" % first
    parts[2::3] = values
    parts.append(tail)
    return b"".join(parts)


class _Item:
    """One output item being streamed: a recorded block."""

    __slots__ = ("call_id", "done", "encoded_id", "id", "index", "json", "json_parts", "kind", "middle", "name",
                 "output_index", "parts")

    def __init__(self, index: int, output_index: int, item_id: str, kind: str) -> None:
        self.index = index  # the block's index in the recorded call
        self.output_index = output_index
        self.id = item_id
        self.kind = kind
        self.parts: list[str] = []
        self.call_id = ""
        self.name = ""
        self.done = False
        self.json = b""  # the item as `output_item.done` sent it
        self.json_parts = 0  # how many deltas it held then
        self.encoded_id = _encode(item_id)
        # Its delta events between their sequence number and their delta (_DELTA_PIECES, filled in).
        _, after_number, after_id, after_index, _ = _DELTA_PIECES[kind]
        self.middle = after_number + self.encoded_id + after_id + b"%d" % output_index + after_index

    def final(self) -> bytes:
        """The item in the final Response: with every delta sent, even one after it was done (a
        recording that interleaves blocks)."""
        if len(self.parts) == self.json_parts:
            return self.json
        return self.whole(b'"completed"', _encode("".join(self.parts)))

    def whole(self, status: bytes, text: bytes) -> bytes:
        """The item (`status` and `text` encoded), as `output_item.done` and the Response carry it."""
        if self.kind == "reasoning":
            return _REASONING_ITEM % (self.encoded_id, text)
        if self.kind == "text":
            return _MESSAGE_ITEM % (self.encoded_id, status, text)
        return _CALL_ITEM % (self.encoded_id, status, _encode(self.call_id), _encode(self.name), text)


class _ResponseCall(CallRender):
    """One call as named Responses events and its assembled Response."""

    def opening(self) -> None:
        self._item_suffix = self.envelope.reply_id.removeprefix("resp_")  # item ids unique across replies
        self._sequence = 0
        self.items: dict[int, _Item] = {}  # block index -> item, in output order
        self._last: _Item | None = None  # the last delta's item: what more() goes on with
        self._identity: dict[int, tuple[str | None, str | None]] | None = None  # made for the first tool call
        self._id, self._model = _encode(self.envelope.reply_id), _encode(self.envelope.model)
        response = self._response(b'"in_progress"', b"null", b"null", b"[]", b"null")
        self.frames.together(_OPENING % (0, response, 1, response), 2)
        self._sequence = 2

    def text(self, chunk: TextDelta) -> None:
        self._delta(self._item(chunk.index, "text", self.frames.chunk), chunk.text)

    def reasoning(self, chunk: ReasoningDelta) -> None:
        self._delta(self._item(chunk.index, "reasoning", self.frames.chunk), chunk.text)

    def tool_delta(self, chunk: ToolCallDelta) -> None:
        self._delta(self._item(chunk.index, "tool-call", self.frames.chunk), chunk.argumentsDelta)

    def more(self, run: Run) -> None:
        item = self._last
        assert item is not None
        item.parts.append(run.text)
        first = self._sequence
        self._sequence = first + run.count
        self.frames.run(_numbered_run(item.kind, first, item.middle, run.values), run.count)

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
        status, error, incomplete = _status(self.finish)
        output = b"[" + b",".join([item.final() for item in self.items.values()]) + b"]"
        response = self._response(_encode(status), error, incomplete, output, usage_json(self.usage))
        self._add(_RESPONSE_EVENTS[_TERMINAL[status]], response)
        return None, (), response

    def error_event(self, entry: ThrowEntry, status: int, body: bytes) -> bytes:
        # The fields both at the top (the API reference) and nested under `error` (what OpenAI sends,
        # and what makes the SDK raise mid-stream).
        error = {"type": error_type(status), "code": entry.code, "message": entry.message, "param": None}
        return _ERROR % (self._sequence, _encode(entry.code), _encode(entry.message), _encode(error))

    @staticmethod
    def throw_body(message: str, code: str, status: int) -> bytes:
        return error_body(message, code, status)

    @staticmethod
    def context_window_body(message: str | None) -> bytes:
        return error_body(message or "context window exceeded", "context_length_exceeded", 400)

    def _add(self, template: bytes, *values: bytes | int) -> None:
        """The next event in sequence: `template` with its sequence number, then `values`."""
        self.frames.append(template % (self._sequence, *values))
        self._sequence += 1

    def _response(self, status: bytes, error: bytes, incomplete: bytes, output: bytes, usage: bytes) -> bytes:
        """The Response object (values encoded), as the response.* events and the non-stream body carry it."""
        return _RESPONSE % (self._id, self.envelope.created, status, error, incomplete, self._model, output, usage)

    def _tool_identity(self) -> dict[int, tuple[str | None, str | None]]:
        """Each tool block's first recorded (id, name), gaps filled from its block-end."""
        identity: dict[int, tuple[str | None, str | None]] = {}
        for chunk in self.tool_deltas:
            call_id, name = identity.get(chunk.index, (None, None))
            identity[chunk.index] = (call_id or chunk.id, name or chunk.name)
        for index, block in self.ended.items():
            call_id, name = identity.get(index, (None, None))
            identity[index] = (call_id or block.id, name or block.name)
        return identity

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
        encoded_id, n = item.encoded_id, self._sequence
        if kind == "tool-call":
            if self._identity is None:
                self._identity = self._tool_identity()
            call_id, name = self._identity.get(index, (None, None))
            ordinal = sum(1 for i in self.items.values() if i.kind == "tool-call") - 1
            item.call_id, item.name = call_id or f"call_{ordinal}", name or ""
            self._add(_ITEM_ADDED, output_index, item.whole(b'"in_progress"', b'""'))
            return item
        opened, added = (_REASONING_OPENED, _REASONING_ADDED) if kind == "reasoning" else (_MESSAGE_OPENED,
                                                                                          _MESSAGE_ADDED)
        self.frames.together(opened % (n, output_index, added % encoded_id, n + 1, encoded_id, output_index), 2)
        self._sequence = n + 2
        return item

    def _delta(self, item: _Item, text: str) -> None:
        item.parts.append(text)
        self._last = item
        pieces = _DELTA_PIECES[item.kind]
        self.frames.append(pieces[0] + b"%d" % self._sequence + item.middle + _encode(text) + pieces[-1])
        self._sequence += 1

    def _close(self, item: _Item) -> None:
        """The events that end an item (its text or arguments done, then the item)."""
        item.done = True
        text = _encode("".join(item.parts))
        encoded_id, output_index, n = item.encoded_id, item.output_index, self._sequence
        item.json, item.json_parts = item.whole(b'"completed"', text), len(item.parts)
        if item.kind == "tool-call":
            closed = _CALL_CLOSED % (n, encoded_id, output_index, text, n + 1, output_index, item.json)
            self.frames.together(closed, 2)
            self._sequence = n + 2
            return
        template = _MESSAGE_CLOSED if item.kind == "text" else _REASONING_CLOSED
        closed = template % (n, encoded_id, output_index, text, n + 1, encoded_id, output_index, text, n + 2,
                             output_index, item.json)
        self.frames.together(closed, 3)
        self._sequence = n + 3


def _whole_text(block: Block) -> str:
    if block.type == "tool-call":
        if block.arguments is None or isinstance(block.arguments, str):
            return block.arguments or ""
        return _encode(block.arguments).decode()  # recorded as an object: sent as its JSON text
    return block.text or ""
