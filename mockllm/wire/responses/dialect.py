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

Each event's template, and an output item as it is streamed, are in `events`. Requests
are read in `request`; a live stream is decoded back into chunks in `stream`.
"""

from __future__ import annotations

import re

import msgspec

from mockllm.dsh.chunks import Block, BlockEnd, BlockStart, ReasoningDelta, TextDelta, ToolCallDelta
from mockllm.script.entries import ThrowEntry
from mockllm.wire.chat.dialect import error_body, error_type
from mockllm.wire.dialect import WalkedDialect
from mockllm.wire.render import CallRender, Ended, Run
from mockllm.wire.request import Request
from mockllm.wire.responses import stream as responses_stream
from mockllm.wire.responses.events import ERROR, ITEM_ADDED, OPENING, RESPONSE, Item, terminal, usage_json
from mockllm.wire.responses.request import decode_request
from mockllm.wire.responses.stream import ResponsesStreamDecoder

_encode = msgspec.json.encode
_REPLY_ID = re.compile(r"resp_mockllm_(\d+)_(\d+)")




_ITEM_PREFIX = {"reasoning": "rs", "text": "msg", "tool-call": "fc"}


class _ResponseCall(CallRender):
    """One call as named Responses events and its assembled Response."""

    def opening(self) -> None:
        envelope = self.envelope
        self._item_suffix = envelope.reply_id.removeprefix("resp_")  # item ids unique across replies
        self.items: dict[int, Item] = {}  # block index -> item, in output order
        self._last: Item | None = None  # the last delta's item: what more() goes on with
        self._identity: dict[int, tuple[str | None, str | None]] | None = None  # made for the first tool call
        # Encoded once: the opening's Response and the final one both carry them.
        self._id, self._model = _encode(envelope.reply_id), _encode(envelope.model)
        self._created = b"%d" % envelope.created
        opening = OPENING % (self._id, self._created, self._model, self._id, self._created, self._model)
        self.frames.together(opening, 2)
        self._sequence = 2

    def text(self, chunk: TextDelta) -> None:
        self._delta(self.items.get(chunk.index) or self._item(chunk.index, "text", self.frames.chunk), chunk.text)

    def reasoning(self, chunk: ReasoningDelta) -> None:
        self._delta(self.items.get(chunk.index) or self._item(chunk.index, "reasoning", self.frames.chunk), chunk.text)

    def tool_delta(self, chunk: ToolCallDelta) -> None:
        item = self.items.get(chunk.index) or self._item(chunk.index, "tool-call", self.frames.chunk)
        self._delta(item, chunk.argumentsDelta)

    def more(self, run: Run) -> None:
        item = self._last
        assert item is not None
        item.parts.append(run.text)
        first = self._sequence
        self._sequence = first + run.count
        self.frames.run(item.run(first, run.values), run.count)

    def block_start(self, chunk: BlockStart) -> None:
        if chunk.blockType in _ITEM_PREFIX and chunk.index not in self.items:
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
        event, status, error, incomplete = terminal(self.finish)
        output = b"[" + b",".join([item.final() for item in self.items.values()]) + b"]"
        response = RESPONSE % (self._id, self._created, status, error, incomplete, self._model, output,
                               usage_json(self.usage))
        self.frames.append(event % (self._sequence, response))
        self._sequence += 1
        return None, (), response

    def error_event(self, entry: ThrowEntry, status: int, body: bytes) -> bytes:
        # The fields both at the top (the API reference) and nested under `error` (what OpenAI sends,
        # and what makes the SDK raise mid-stream).
        error = {"type": error_type(status), "code": entry.code, "message": entry.message, "param": None}
        return ERROR % (self._sequence, _encode(entry.code), _encode(entry.message), _encode(error))

    @staticmethod
    def throw_body(message: str, code: str, status: int) -> bytes:
        return error_body(message, code, status)

    @staticmethod
    def context_window_body(message: str | None) -> bytes:
        return error_body(message or "context window exceeded", "context_length_exceeded", 400)


    def _item(self, index: int, kind: str, position: int) -> Item:
        """A new item for block `index` (it has none yet), added after closing those before it."""
        # OpenAI closes an item before adding the next: close those with no deltas left.
        for other in self.items.values():
            if not other.done and self.last_delta.get(other.index, -1) < position:
                self._close(other)
        output_index = len(self.items)
        item_id = f"{_ITEM_PREFIX[kind]}_{self._item_suffix}_{output_index}"
        item = self.items[index] = Item(index, output_index, item_id, kind)
        number = self._sequence
        if kind == "tool-call":
            if self._identity is None:
                self._identity = self.tool_identity()
            call_id, name = self._identity.get(index, (None, None))
            ordinal = sum(1 for i in self.items.values() if i.kind == "tool-call") - 1
            item.call_id, item.name = call_id or f"call_{ordinal}", name or ""
            self.frames.append(ITEM_ADDED % (number, output_index, item.whole(b'"in_progress"', b'""')))
            self._sequence = number + 1
            return item
        self.frames.together(item.opened(number), 2)
        self._sequence = number + 2
        return item

    def _delta(self, item: Item, text: str) -> None:
        item.parts.append(text)
        self._last = item
        self.frames.append(item.delta(self._sequence, _encode(text)))
        self._sequence += 1

    def _close(self, item: Item) -> None:
        """The events that end an item (its text or arguments done, then the item)."""
        events, count = item.closed(self._sequence, _encode("".join(item.parts)))
        self.frames.together(events, count)
        self._sequence += count


def _whole_text(block: Block) -> str:
    if block.type == "tool-call":
        if block.arguments is None or isinstance(block.arguments, str):
            return block.arguments or ""
        return _encode(block.arguments).decode()  # recorded as an object: sent as its JSON text
    return block.text or ""


class Responses(WalkedDialect):
    name = "responses"
    path = "/responses"
    call = _ResponseCall
    decoder = ResponsesStreamDecoder
    whole_events = staticmethod(responses_stream.body_events)

    def decode_request(self, body: bytes) -> Request:
        return decode_request(body)

    def reply_id(self, script: int, call: int) -> str:
        return f"resp_mockllm_{script}_{call}"

    def reply_of(self, reply_id: str) -> tuple[int, int] | None:
        """`resp_mockllm_{script}_{call}` back to (script, call); any other id is not ours."""
        match = _REPLY_ID.fullmatch(reply_id)
        return (int(match[1]), int(match[2])) if match else None

    def error_body(self, message: str, code: str | None, status: int) -> bytes:
        return error_body(message, code, status)
