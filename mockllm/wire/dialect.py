"""The seam between the replay core and the wire dialects.

A dialect decodes its requests into a neutral `Request` (what routing, templates and input
comparison read), renders script entries as its own bytes (`Reply`), shapes its error bodies, and
decodes a live upstream stream back into StreamChunks (what a recorder needs). The server, the
reply cache, conversation routing and templates name no dialect: adding one is a module under
`mockllm/wire/` and one line in `mockllm/wire/__init__.py`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec

from mockllm.dsh.chunks import (
    Block,
    BlockEnd,
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
from mockllm.script.entries import Entry
from mockllm.wire.reply import Reply


class ToolCall(NamedTuple):
    """A tool call the assistant made, as the conversation carries it back."""

    id: str | None
    name: str | None
    arguments: str | None  # as sent: a JSON text (dialects with structured input encode it canonically)


class Message(NamedTuple):
    """One conversation message in neutral form.

    `role` is system, user, assistant or tool; `text` joins the message's text parts (reasoning is
    left out: clients strip it from older turns); a tool result is a `tool` message naming the call
    it answers in `tool_call_id`.
    """

    role: str | None
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None


@dataclass(slots=True)
class Request:
    """A live model request in neutral form.

    The conversation stays undecoded until routing, a template or a comparison asks for it: with a
    session header and no templates nothing reads it, and decoding a long agent history would be
    most of a request's work before its first byte.
    """

    stream: bool
    include_usage: bool  # dialects that always send usage say True
    model: str | None
    raw_conversation: Any  # the dialect's conversation field(s), undecoded: templates search its strings
    _decode: Callable[[Any], list[Message]] = field(repr=False)
    # The id of an earlier reply this request continues (OpenAI Responses' previous_response_id).
    continues: str | None = None
    # The names of the tools the request offers (its `tools` field), decoded on first use; None
    # when it sends no `tools` at all (then any tool call is the agent's business).
    raw_tools: Any = None
    _decode_tools: Callable[[Any], frozenset[str]] | None = field(default=None, repr=False)
    # Decodes only the messages after the last assistant message, where a dialect can do that
    # without decoding the whole history (every request's new inputs are compared).
    _decode_tail: Callable[[Any], list[Message]] | None = field(default=None, repr=False)
    _messages: list[Message] | None = field(default=None, repr=False)
    _tail: list[Message] | None = field(default=None, repr=False)

    @property
    def messages(self) -> list[Message]:
        """The conversation, decoded on first use."""
        if self._messages is None:
            self._messages = self._decode(self.raw_conversation)
        return self._messages

    @property
    def tail(self) -> list[Message]:
        """The messages after the last assistant message (all of them when there is none)."""
        if self._tail is None:
            if self._messages is None and self._decode_tail is not None:
                self._tail = self._decode_tail(self.raw_conversation)
            else:
                self._tail = messages_after_last_assistant(self.messages)
        return self._tail

    @property
    def offered_tools(self) -> frozenset[str] | None:
        if self.raw_tools is None or self._decode_tools is None:
            return None
        return self._decode_tools(self.raw_tools)


def messages_after_last_assistant(messages: list[Message]) -> list[Message]:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "assistant":
            return messages[index + 1 :]
    return messages


NO_TOOLS = msgspec.Raw()  # a request struct's `tools` when the field is absent (falsy)


def tool_names(raw: Any) -> frozenset[str]:
    """Names of the tools a request offers: `[{"function": {"name": …}}]` (chat completions) or
    `[{"name": …}]` (Anthropic Messages, OpenAI Responses)."""
    tools = msgspec.json.decode(raw) if isinstance(raw, msgspec.Raw) else raw
    names = set()
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict):
            function = tool.get("function")
            name = function.get("name") if isinstance(function, dict) else tool.get("name")
            if isinstance(name, str):
                names.add(name)
    return frozenset(names)


@dataclass(frozen=True, slots=True)
class Envelope:
    """What every event of one rendered reply repeats: its id, creation time and model."""

    reply_id: str
    created: int
    model: str


class OpenBlock:
    """A block a stream decoder has seen: its recorded index and type, what its deltas assembled,
    and, for a tool call, its identity (dsh repeats it on every fragment; so does a recording)."""

    __slots__ = ("call_id", "index", "kind", "name", "parts", "whole")

    def __init__(self, index: int, kind: str, call_id: str | None = None, name: str | None = None) -> None:
        self.index = index
        self.kind = kind  # text | reasoning | tool-call
        self.parts: list[str] = []
        self.call_id = call_id
        self.name = name
        self.whole: str | None = None  # the assembled content, where the stream sends it at the block's end

    def delta(self, text: str) -> StreamChunk:
        """The chunk of one delta of this block; the delta is kept for the block's end."""
        self.parts.append(text)
        if self.kind == "reasoning":
            return ReasoningDelta(self.index, text)
        if self.kind == "tool-call":
            return ToolCallDelta(self.index, text, self.call_id, self.name)
        return TextDelta(self.index, text)

    def block(self) -> Block:
        text = self.whole if self.whole is not None else "".join(self.parts)
        if self.kind == "tool-call":
            return Block("tool-call", id=self.call_id, name=self.name, arguments=text)
        return Block(self.kind, text=text)


def closing_chunks(blocks: list[OpenBlock], usage: TokenUsage | None, finish: FinishReason | None,
                   awaited: str) -> list[StreamChunk]:
    """How a decoded call ends, as dsh records it: every block's end in block order, the usage, the
    finish; a stream that ended before saying how (`awaited`: what never came) is STREAM_CLOSED."""
    out: list[StreamChunk] = [BlockEnd(b.index, b.block()) for b in blocks]
    if usage is not None:
        out.append(UsageChunk(usage))
    out.append(FinishChunk(finish or FinishReason("error", failure=Failure(
        message=f"the stream ended with no {awaited}", code="STREAM_CLOSED"))))
    return out


SSEEvent = tuple[str | None, bytes]  # an SSE event's name (None: data only) and data


def whole_reply(body: bytes) -> dict[str, Any] | None:
    """A non-streamed answer's JSON object, or None when it is not one."""
    try:
        reply = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None
    return reply if isinstance(reply, dict) else None


class StreamDecoder(ABC):
    """Turns one live streamed answer, event by event, back into StreamChunks (record mode)."""

    # The upstream's id of the answer being decoded, once seen, where a later request may continue
    # it by id (OpenAI Responses' previous_response_id): a recorder routes such a request by it.
    reply_id: str | None = None
    # The stream has said it is over (its closing event: chat's `[DONE]`, Anthropic's `message_stop`,
    # Responses' `response.completed`, or an error event): a client that leaves after this has the
    # whole answer, and a recorder must not take its leaving for a cancelled call.
    ended: bool = False
    # Its answers can be continued by id (`reply_id`, OpenAI Responses): a recorder needs the id the
    # moment the answer is over, before the request that continues it arrives, so it decodes such a
    # stream as it forwards it; any other stream it decodes once the answer is over.
    chains: bool = False

    @abstractmethod
    def feed(self, event: str | None, data: bytes) -> list[StreamChunk]:
        """The chunks one SSE event (name, data) adds."""

    @abstractmethod
    def close(self) -> list[StreamChunk]:
        """The chunks that end the call (block ends, usage, finish), once the stream is over."""


class Dialect(ABC):
    """One wire API (OpenAI chat completions, Anthropic Messages, OpenAI Responses)."""

    name: str  # short and stable: journal records and caches are keyed by it
    path: str  # the route under a base, e.g. "/chat/completions" under ".../v1"

    @abstractmethod
    def decode_request(self, body: bytes) -> Request:
        """The neutral request; raises RequestError naming what is wrong."""

    @abstractmethod
    def reply_id(self, script: int, call: int) -> str:
        """A stable id for the reply to entry `call` of script `script` (the same bytes every run)."""

    @abstractmethod
    def render(self, entry: Entry, envelope: Envelope) -> Reply:
        """Answer one script entry (templates already resolved)."""

    @abstractmethod
    def error_body(self, message: str, code: str | None, status: int) -> bytes:
        """This dialect's error body for an HTTP status."""

    @abstractmethod
    def stream_decoder(self) -> StreamDecoder:
        """A fresh decoder for one live streamed answer."""

    def body_events(self, body: bytes) -> list[SSEEvent] | None:
        """A whole (`stream: false`) answer as the events a stream of the same answer would have
        sent, for `stream_decoder()`, so one decoder records both; None: not read (not recorded)."""
        return None

    def reply_of(self, reply_id: str) -> tuple[int, int] | None:
        """The (script, call) an earlier reply id was rendered for, when this dialect's ids say so."""
        return None
