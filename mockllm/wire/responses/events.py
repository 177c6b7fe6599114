"""OpenAI Responses' stream events, encoded once for every reply (sse.py's templates), and its items.

responses.py decides which events a call sends and in what order; this module holds what each
event is: its template, filled per reply by one bytes `%` (`%b` at a HOLE, `%d` at a NUMBER), and
`Item`, one output item as it is streamed. A first render in this dialect is on the request path
(chat completions is rendered at start-up), and it sends some ten events besides its deltas, so
events that always go out together are one template, with the constant parts of what they carry
(an in-progress Response, an added item) written into it rather than filled in.
"""

from __future__ import annotations

from typing import Any

import msgspec

from mockllm.dsh.chunks import FinishChunk, TokenUsage
from mockllm.wire.sse import HOLE, NUMBER, json_template, named_pieces, named_template

_encode = msgspec.json.encode

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


def _event(kind: str, number: Any = NUMBER, **fields: Any) -> bytes:
    """An event's template: its type, its sequence number (a NUMBER unless given), then `fields`."""
    return named_template(kind, {"type": kind, "sequence_number": number, **fields})


def _response(status: Any) -> dict[str, Any]:
    """The Response object: its id, creation time (encoded: it is filled once per reply and used
    twice), model, status, error, incomplete_details, output and usage are holes unless given."""
    return {"id": HOLE, "object": "response", "created_at": HOLE, "status": status, "error": HOLE,
            "incomplete_details": HOLE, "model": HOLE, "output": HOLE, "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "usage": HOLE}


RESPONSE = json_template(_response(HOLE))
# The stream's opening: created and in_progress, numbered 0 and 1, each carrying the Response in
# progress (no error, output or usage yet): one template, its id, creation time and model twice.
_IN_PROGRESS = {**_response("in_progress"), "error": None, "incomplete_details": None, "output": [], "usage": None}
OPENING = (_event("response.created", 0, response=_IN_PROGRESS)
           + _event("response.in_progress", 1, response=_IN_PROGRESS))

# How a finished call ends: its terminal event (sequence number, Response), the Response's status
# (encoded), error and incomplete_details.
Terminal = tuple[bytes, bytes, bytes, bytes]
_COMPLETED: Terminal = (_event("response.completed", response=HOLE), b'"completed"', b"null", b"null")
_INCOMPLETE = _event("response.incomplete", response=HOLE)
_MAX_TOKENS: Terminal = (_INCOMPLETE, b'"incomplete"', b"null", b'{"reason":"max_output_tokens"}')
_FILTERED: Terminal = (_INCOMPLETE, b'"incomplete"', b"null", b'{"reason":"content_filter"}')
_FAILED = _event("response.failed", response=HOLE)


def terminal(finish: FinishChunk | None) -> Terminal:
    """The terminal event of a finished call, and the Response fields that go with it."""
    reason = finish.reason if finish is not None else None
    if reason is None or reason.kind in ("stop", "tool-calls"):
        return _COMPLETED
    if reason.kind == "max-tokens":
        return _MAX_TOKENS
    code = reason.error_code or "error"
    if reason.kind == "error" and code == "EMPTY_RESPONSE":  # on the wire it was a bare completed response
        return _COMPLETED
    if reason.kind == "error" and code == "CONTENT_FILTER":
        return _FILTERED
    message = reason.error_message or f"the model call failed ({code})"
    error = {"code": code.lower() if reason.kind == "error" else reason.kind, "message": message}
    return _FAILED, b'"failed"', _encode(error), b"null"


def _delta_pieces(kind: str, **fields: Any) -> list[bytes]:
    """A delta event's pieces: its sequence number, item id, output index and delta are the holes."""
    return named_pieces(kind, {"type": kind, "sequence_number": NUMBER, "item_id": HOLE, "output_index": NUMBER,
                               **fields})


# `where` is an item's id and index.
_WHERE: dict[str, Any] = {"item_id": HOLE, "output_index": NUMBER}
ITEM_ADDED = _event("response.output_item.added", output_index=NUMBER, item=HOLE)
_ITEM_DONE = _event("response.output_item.done", output_index=NUMBER, item=HOLE)
ERROR = _event("error", code=HOLE, message=HOLE, param=None, error=HOLE)
# Per item kind: the item when done (output_item.done and the Response carry it), the events that
# open it (output_item.added, with the item as it is then, and its part added), its delta events'
# pieces, and the events that close it (its text done, its part done, output_item.done).
_MESSAGE_ITEM = json_template({"id": HOLE, "type": "message", "status": HOLE, "role": "assistant",
                               "content": [{"type": "output_text", "text": HOLE, "annotations": []}]})
_MESSAGE_OPENED = (
    _event("response.output_item.added", output_index=NUMBER, item={
        "id": HOLE, "type": "message", "status": "in_progress", "role": "assistant", "content": []})
    + _event("response.content_part.added", **_WHERE, content_index=0,
             part={"type": "output_text", "text": "", "annotations": []}))
_TEXT_DELTA = _delta_pieces("response.output_text.delta", content_index=0, delta=HOLE, logprobs=[])
_MESSAGE_CLOSED = (
    _event("response.output_text.done", **_WHERE, content_index=0, text=HOLE, logprobs=[])
    + _event("response.content_part.done", **_WHERE, content_index=0,
             part={"type": "output_text", "text": HOLE, "annotations": []})
    + _ITEM_DONE)
_REASONING_ITEM = json_template({"id": HOLE, "type": "reasoning", "summary": [{"type": "summary_text", "text": HOLE}]})
_REASONING_OPENED = (
    _event("response.output_item.added", output_index=NUMBER, item={"id": HOLE, "type": "reasoning", "summary": []})
    + _event("response.reasoning_summary_part.added", **_WHERE, summary_index=0,
             part={"type": "summary_text", "text": ""}))
_SUMMARY_DELTA = _delta_pieces("response.reasoning_summary_text.delta", summary_index=0, delta=HOLE)
_REASONING_CLOSED = (
    _event("response.reasoning_summary_text.done", **_WHERE, summary_index=0, text=HOLE)
    + _event("response.reasoning_summary_part.done", **_WHERE, summary_index=0,
             part={"type": "summary_text", "text": HOLE})
    + _ITEM_DONE)
_CALL_ITEM = json_template({"id": HOLE, "type": "function_call", "status": HOLE, "call_id": HOLE, "name": HOLE,
                            "arguments": HOLE})
_ARGUMENTS_DELTA = _delta_pieces("response.function_call_arguments.delta", delta=HOLE)
_CALL_CLOSED = _event("response.function_call_arguments.done", **_WHERE, arguments=HOLE) + _ITEM_DONE
_DELTA_PIECES = {"text": _TEXT_DELTA, "reasoning": _SUMMARY_DELTA, "tool-call": _ARGUMENTS_DELTA}
OPENED = {"text": _MESSAGE_OPENED, "reasoning": _REASONING_OPENED}

# Per delta kind, what goes between two of its events in a run: the first one's end, the next
# one's start and its sequence number, for every number, made once for all replies (a run's events
# differ by their number and their delta: the rest is joined around those).
_BETWEEN: dict[str, list[bytes]] = {kind: [] for kind in _DELTA_PIECES}


class Item:
    """One output item being streamed: a recorded block, its output index and its id (encoded),
    its deltas so far, and for a tool call its identity."""

    __slots__ = ("between", "call_id", "done", "encoded_id", "head", "index", "json", "json_parts", "kind", "middle",
                 "name", "output_index", "parts", "tail")

    def __init__(self, index: int, output_index: int, item_id: str, kind: str) -> None:
        self.index = index  # the block's index in the recorded call
        self.output_index = output_index
        self.kind = kind
        self.parts: list[str] = []
        self.call_id = ""
        self.name = ""
        self.done = False
        self.json = b""  # the item as `output_item.done` sent it
        self.json_parts = 0  # how many deltas it held then
        self.encoded_id = _encode(item_id)
        # Its delta events around their sequence number and delta: `head`, the number, `middle`
        # (the pieces between, its id and index filled in), the delta, `tail`.
        self.head, after_number, after_id, after_index, self.tail = _DELTA_PIECES[kind]
        self.middle = after_number + self.encoded_id + after_id + b"%d" % output_index + after_index
        self.between = _BETWEEN[kind]

    def delta(self, number: int, value: bytes) -> bytes:
        """The delta event numbered `number` carrying `value` (encoded JSON)."""
        return self.head + b"%d" % number + self.middle + value + self.tail

    def run(self, first: int, values: list[bytes]) -> list[bytes]:
        """The delta events numbered from `first`, for `values` (encoded JSON), as the pieces that
        joined are those events (`Frames.run`): `head, number, middle, value, tail` each."""
        between, end = self.between, first + len(values)
        if len(between) < end:
            tail_head = self.tail + self.head
            between.extend(tail_head + b"%d" % n for n in range(len(between), max(end, 2 * len(between), 256)))
        parts = [self.middle] * (3 * len(values))
        parts[0::3] = between[first:end]
        parts[0] = self.head + b"%d" % first
        parts[2::3] = values
        parts.append(self.tail)
        return parts

    def opened(self, number: int) -> bytes:
        """A text or reasoning item's opening events, numbered from `number`."""
        eid, output_index = self.encoded_id, self.output_index
        return OPENED[self.kind] % (number, output_index, eid, number + 1, eid, output_index)

    def closed(self, number: int, text: bytes) -> tuple[bytes, int]:
        """The events that end the item (its text or arguments done, then the item), numbered from
        `number`, with `text` its whole text encoded; and how many events they are."""
        self.done = True
        self.json, self.json_parts = self.whole(b'"completed"', text), len(self.parts)
        eid, output_index = self.encoded_id, self.output_index
        if self.kind == "tool-call":
            return _CALL_CLOSED % (number, eid, output_index, text, number + 1, output_index, self.json), 2
        template = _MESSAGE_CLOSED if self.kind == "text" else _REASONING_CLOSED
        return template % (number, eid, output_index, text, number + 1, eid, output_index, text, number + 2,
                           output_index, self.json), 3

    def final(self) -> bytes:
        """The item in the final Response: with every delta sent, even one after it was done (a
        recording that interleaves blocks)."""
        if len(self.parts) == self.json_parts:
            return self.json
        return self.whole(b'"completed"', _encode("".join(self.parts)))

    def whole(self, status: bytes, text: bytes) -> bytes:
        """The item (`status` and `text` encoded), as `output_item.done` and the Response carry it."""
        if self.kind == "text":
            return _MESSAGE_ITEM % (self.encoded_id, status, text)
        if self.kind == "reasoning":
            return _REASONING_ITEM % (self.encoded_id, text)
        return _CALL_ITEM % (self.encoded_id, status, _encode(self.call_id), _encode(self.name), text)
