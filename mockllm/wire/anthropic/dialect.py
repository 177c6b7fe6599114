"""Anthropic Messages: `POST …/v1/messages`, streaming and not.

The Anthropic SDK's base URL has no `/v1` (it appends `/v1/messages`), so `http://host:port`,
`…/scenarios/{name}` and `…/runs/{run}` are all Anthropic base URLs: this dialect's route is
`/messages` under each of the server's `…/v1` bases. Authentication (`x-api-key` or a bearer token)
and `anthropic-version` are accepted and never checked.

How an entry is sent (WIRE.md §4; one recorded delta is one SSE event, fragment boundaries are data):
- `message_start` opens the stream with the recorded usage; each recorded block is one content block,
  numbered on the wire by first sight: reasoning as a `thinking` block (`thinking_delta`s, then a
  `signature_delta`), text as a `text` block (`text_delta`s), a tool call as a `tool_use` block with
  its recorded id and name (`input_json_delta`s). Blocks are sent one after another, as Anthropic
  does: a block stops at its recorded `block-end` or when the next block starts, whichever is first.
  A block recorded with no deltas is sent as one delta holding its assembled content.
- dsh records no signature, so every thinking block carries the placeholder `SIGNATURE` (the SDK's
  `ThinkingBlock.signature` is a required string, and clients send it back with tool results).
- `message_delta` carries `stop_reason` (`end_turn`, `tool_use`, `max_tokens`) and the output usage;
  then `message_stop`. Usage maps dsh's disjoint counts one to one: inputTokens -> `input_tokens`,
  cacheReadTokens -> `cache_read_input_tokens`, cacheWriteTokens -> `cache_creation_input_tokens`,
  outputTokens -> `output_tokens`, reasoningTokens -> `output_tokens_details.thinking_tokens`; the
  optional ones only when recorded. `message_start` carries the whole usage, `message_delta` the
  output part (cumulative, as the SDK overwrites it). No recorded usage: zeros.
- An `error` finish is the wire condition that produced it: `EMPTY_RESPONSE` a message with no
  content ending `end_turn`; `CONTEXT_WINDOW_EXCEEDED` an HTTP 400 `invalid_request_error`
  "prompt is too long: …" (what Anthropic clients match on); `CONTENT_FILTER` `refusal`; any other
  code its `stop_reason`, lowercased. A recorded call with no finish ends with a null `stop_reason`.
- A `throw` with no chunks is an HTTP error in Anthropic's shape, its type by status; with chunks, they
  are streamed and then an `event: error` (no `message_stop`); `STREAM_CLOSED` is a bare cut. A
  replayed error is sent exactly as Anthropic would (no extra fields, no `retry-after`). A `hang`
  streams one text delta `partial` and holds; an `aborted` finish streams its chunks and holds.
- Not streaming: one `message` with the same content (tool input parsed from the recorded
  arguments), stop reason and usage; a `throw` is its HTTP error; a hang or aborted finish holds.

Mock-made errors (exhaustion, unrecorded sessions, bad requests) keep Anthropic's
`{"type":"error","error":{"type","message"}}` and add the mockllm code twice: machine-readable in
`error.code`, and at the head of the message (`script_exhausted: run …`), since SDKs show the message.

Requests are read in `request`; a live stream is decoded back into chunks in
`stream`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from mockllm.dsh.chunks import (
    FinishChunk,
    TokenUsage,
)
from mockllm.script.entries import ThrowEntry
from mockllm.wire.anthropic import stream as anthropic_stream
from mockllm.wire.anthropic.request import decode_request
from mockllm.wire.anthropic.stream import AnthropicStreamDecoder
from mockllm.wire.blocks import BlockByBlock, finish_stop_reason
from mockllm.wire.dialect import WalkedDialect
from mockllm.wire.render import Ended
from mockllm.wire.request import Request
from mockllm.wire.sse import HOLE, NUMBER, json_template, named_event, named_pieces, named_template, run_pieces

_encode = msgspec.json.encode

# What every replayed thinking block is signed with: dsh records no signature, and a fixed one keeps
# the bytes the same every run. Clients treat it as opaque.
SIGNATURE = "mockllm-unsigned"

MESSAGE_STOP = named_event("message_stop", b'{"type":"message_stop"}')

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
                403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                429: "rate_limit_error", 500: "api_error", 504: "timeout_error", 529: "overloaded_error"}


def error_type(status: int) -> str:
    """Anthropic's error type for an HTTP status."""
    return _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def provider_error(message: str, status: int) -> bytes:
    """Anthropic's own error body, as a replayed provider error is sent."""
    return _encode({"type": "error", "error": {"type": error_type(status), "message": message}})


def error_body(message: str, code: str | None, status: int) -> bytes:
    """A mock-made error: Anthropic's shape, the mockllm code in `error.code` and heading the message."""
    if code is None:
        return provider_error(message, status)
    return _encode({"type": "error", "error": {"type": error_type(status), "message": f"{code}: {message}",
                                               "code": code}})


def usage_object(usage: TokenUsage | None) -> dict[str, Any]:
    """dsh's disjoint counts -> Anthropic's (also disjoint: input tokens exclude cache reads and writes)."""
    if usage is None:
        return {"input_tokens": 0, "output_tokens": 0}
    out: dict[str, Any] = {"input_tokens": usage.inputTokens}
    if usage.cacheWriteTokens is not None:
        out["cache_creation_input_tokens"] = usage.cacheWriteTokens
    if usage.cacheReadTokens is not None:
        out["cache_read_input_tokens"] = usage.cacheReadTokens
    out.update(output_usage(usage))
    return out


def output_usage(usage: TokenUsage | None) -> dict[str, Any]:
    """The output part of the usage, as `message_delta` carries it."""
    if usage is None:
        return {"output_tokens": 0}
    out: dict[str, Any] = {"output_tokens": usage.outputTokens}
    if usage.reasoningTokens is not None:
        out["output_tokens_details"] = {"thinking_tokens": usage.reasoningTokens}
    return out


# Error codes the adapter records for answers that were, on the wire, a normal stop.
_ERROR_STOPS = {"EMPTY_RESPONSE": "end_turn", "CONTENT_FILTER": "refusal"}


def stop_reason(finish: FinishChunk | None) -> str | None:
    return None if finish is None else finish_stop_reason(finish.reason, _ERROR_STOPS)


def context_window_message(message: str | None) -> str:
    """The 400's message: Anthropic's wording first, since clients detect the overflow by it."""
    if message and message.startswith("prompt is too long"):
        return message
    return f"prompt is too long: {message or 'the context window was exceeded'}"




_WIRE_TYPES = {"text": "text", "reasoning": "thinking", "tool-call": "tool_use"}

# The stream's events, each encoded once (sse.py's templates).
_MESSAGE_START = named_template("message_start", {"type": "message_start", "message": {
    "id": HOLE, "type": "message", "role": "assistant", "model": HOLE, "content": [], "stop_reason": None,
    "stop_sequence": None, "usage": HOLE}})
_BLOCK_STARTS = {
    "text": named_template("content_block_start", {"type": "content_block_start", "index": NUMBER,
                                                   "content_block": {"type": "text", "text": ""}}),
    "thinking": named_template("content_block_start", {"type": "content_block_start", "index": NUMBER,
                                                       "content_block": {"type": "thinking", "thinking": "",
                                                                         "signature": ""}}),
    "tool_use": named_template("content_block_start", {"type": "content_block_start", "index": NUMBER,
                                                       "content_block": {"type": "tool_use", "id": HOLE,
                                                                         "name": HOLE, "input": {}}}),
}
_DELTAS = {wire_type: named_pieces("content_block_delta", {"type": "content_block_delta", "index": NUMBER,
                                                           "delta": {"type": delta_type, field: HOLE}})
           for wire_type, delta_type, field in (("text", "text_delta", "text"),
                                                ("thinking", "thinking_delta", "thinking"),
                                                ("tool_use", "input_json_delta", "partial_json"))}
_SIGNATURE_DELTA = named_template("content_block_delta", {"type": "content_block_delta", "index": NUMBER,
                                                          "delta": {"type": "signature_delta", "signature": SIGNATURE}})
_BLOCK_STOP = named_template("content_block_stop", {"type": "content_block_stop", "index": NUMBER})
_MESSAGE_DELTA = named_template("message_delta", {"type": "message_delta", "delta": {
    "stop_reason": HOLE, "stop_sequence": None}, "usage": HOLE})
# The non-streamed message and its blocks.
_MESSAGE = json_template({"id": HOLE, "type": "message", "role": "assistant", "model": HOLE, "content": HOLE,
                          "stop_reason": HOLE, "stop_sequence": None, "usage": HOLE})
_ASSEMBLED = {"text": json_template({"type": "text", "text": HOLE}),
              "thinking": json_template({"type": "thinking", "thinking": HOLE, "signature": SIGNATURE}),
              "tool_use": json_template({"type": "tool_use", "id": HOLE, "name": HOLE, "input": HOLE})}


_CUTS: dict[tuple[str, int], tuple[bytes, bytes]] = {}


def _delta_cut(wire_type: str, wire: int) -> tuple[bytes, bytes]:
    """A block's delta events around their delta: the same for every reply, made once."""
    cut = _CUTS.get((wire_type, wire))
    if cut is None:
        head, middle, tail = _DELTAS[wire_type]
        cut = _CUTS[wire_type, wire] = (head + b"%d" % wire + middle, tail)
    return cut


class _Block:
    """One content block on the wire: its type and index, what its deltas assembled, its tool
    identity, and its delta events' pieces (the template with its index filled in)."""

    __slots__ = ("call_id", "head", "name", "parts", "tail", "type", "wire")

    def __init__(self, wire_type: str, wire: int, call_id: str | None, name: str | None) -> None:
        self.type = wire_type
        self.wire = wire
        self.parts: list[str] = []
        self.call_id = call_id
        self.name = name
        self.head, self.tail = _delta_cut(wire_type, wire)

    def assembled(self) -> bytes:
        """The block in a non-streamed message."""
        joined = "".join(self.parts)
        if self.type == "tool_use":
            return _ASSEMBLED["tool_use"] % (_encode(self.call_id), _encode(self.name), _encode(tool_input(joined)))
        return _ASSEMBLED[self.type] % _encode(joined)


def tool_input(arguments: str) -> Any:
    """A tool call's recorded arguments as Anthropic's `input` object; text that is not JSON stays as is."""
    if not arguments.strip():
        return {}
    try:
        return msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return arguments


class _MessageCall(BlockByBlock[_Block]):
    """One call as Messages stream events and its assembled `message`."""

    def open_message(self) -> None:
        # Encoded once: message_start and the non-streamed message both carry them.
        self._id, self._model = _encode(self.envelope.reply_id), _encode(self.envelope.model)
        self._usage = _encode(usage_object(self.usage))
        start = self._usage
        if self.envelope.recorded:  # no output yet when the message starts (Envelope.recorded)
            start = _encode({**usage_object(self.usage), "output_tokens": 0})
        self.frames.append(_MESSAGE_START % (self._id, self._model, start))

    def new_block(self, kind: str, wire: int, call_id: str | None, name: str | None) -> _Block:
        wire_type = _WIRE_TYPES[kind]
        if wire_type == "tool_use":
            block = _Block(wire_type, wire, call_id or f"toolu_{wire}", name or "")
            self.frames.append(_BLOCK_STARTS[wire_type] % (wire, _encode(block.call_id), _encode(block.name)))
        else:
            block = _Block(wire_type, wire, None, None)
            self.frames.append(_BLOCK_STARTS[wire_type] % wire)
        return block

    def delta_frame(self, block: _Block, value: bytes) -> bytes:
        return block.head + value + block.tail

    def run_frames(self, block: _Block, values: list[bytes]) -> list[bytes]:
        return run_pieces(block.head, values, block.tail)

    def close_block(self, block: _Block) -> None:
        if block.type == "thinking":
            self.frames.append(_SIGNATURE_DELTA % block.wire)
        self.frames.append(_BLOCK_STOP % block.wire)

    def end(self) -> Ended:
        """Stop the open block, then `message_delta` (stop reason, output usage); `message_stop` closes."""
        self.stop_open()
        stop = _encode(stop_reason(self.finish))
        self.frames.append(_MESSAGE_DELTA % (stop, _encode(output_usage(self.usage))))
        content = b"[" + b",".join([block.assembled() for block in self.blocks]) + b"]"
        return None, (MESSAGE_STOP,), _MESSAGE % (self._id, self._model, content, stop, self._usage)

    def error_event(self, entry: ThrowEntry, status: int, body: bytes) -> bytes:
        return named_event("error", body)

    @staticmethod
    def throw_body(message: str, code: str, status: int) -> bytes:
        return provider_error(message, status)

    @staticmethod
    def context_window_body(message: str | None) -> bytes:
        return provider_error(context_window_message(message), 400)


class AnthropicMessages(WalkedDialect):
    name = "anthropic"
    path = "/messages"
    call = _MessageCall
    decoder = AnthropicStreamDecoder
    whole_events = staticmethod(anthropic_stream.body_events)

    def decode_request(self, body: bytes) -> Request:
        return decode_request(body)

    def reply_id(self, script: int, call: int) -> str:
        return f"msg_mockllm_{script}_{call}"

    def error_body(self, message: str, code: str | None, status: int) -> bytes:
        return error_body(message, code, status)
