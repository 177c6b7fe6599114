"""The seam between the replay core and the wire dialects.

A dialect decodes its requests into a neutral `Request` (`wire.request`: what routing, templates
and input comparison read), renders script entries as its own bytes (`Reply`), shapes its error
bodies, and decodes a live upstream stream back into StreamChunks (what a recorder needs). The server, the
reply cache, conversation routing and templates name no dialect: adding one is a module under
`mockllm/wire/` and one line in `mockllm/wire/__init__.py`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

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
from mockllm.wire.envelope import Envelope
from mockllm.wire.render import CallRender, Reading, render_entry
from mockllm.wire.reply import Reply
from mockllm.wire.request import Request
from mockllm.wire.sse import data_event, named_event
from mockllm.wire.sse_reader import SSEReader


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

SSE = "text/event-stream; charset=utf-8"


class FrameReader(Protocol):
    """Splits a live streamed body into its events as its bytes arrive (record mode): SSE events,
    or NDJSON lines as data-only events."""

    def feed(self, piece: bytes) -> list[SSEEvent]: ...

    def close(self) -> list[SSEEvent]: ...


# What an info route answers: (the models the scenario's recording called, the request body) -> (status, JSON body).
InfoAnswer = Callable[[Sequence[str], bytes], tuple[int, bytes]]


@dataclass(frozen=True, slots=True)
class InfoRoute:
    """A route beside a dialect's model route that a client calls for its own checks (Ollama's
    `/api/tags`): answered from the scenario, never from a script, never journaled."""

    method: str
    path: str  # under a base root, as `Dialect.routes`
    answer: InfoAnswer


def whole_reply(body: bytes) -> dict[str, Any] | None:
    """A non-streamed answer's JSON object, or None when it is not one."""
    try:
        reply = msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError):  # nested too deep is no answer either
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
    """One wire API (OpenAI chat completions, Anthropic Messages, OpenAI Responses, Gemini, Ollama).

    Where it is served: `routes`, each under every base root (`http://host:port`,
    `…/scenarios/{name}`, `…/runs/{run}`): the OpenAI and Anthropic routes sit under `/v1`, Gemini's
    and Ollama's do not (`/v1beta/models/{model}:…`, `/api/chat`), so routes are relative to the
    root, not to a `/v1` base. A route may hold path parameters (`{model}`): `decode_routed` reads
    them. How it streams: `stream_type` is the streamed answer's Content-Type, and the rendered
    frames carry their own framing (SSE events, NDJSON lines), so the writer only writes bytes.
    """

    name: str  # short and stable: journal records and caches are keyed by it
    path: str  # the route under a `/v1` base, e.g. "/chat/completions" (what `routes` defaults to)
    stream_type: str = SSE  # the Content-Type of a streamed answer
    info_routes: tuple[InfoRoute, ...] = ()  # routes beside the model route (model listings), if any
    # Its wire carries a tool call's arguments as one object, sent whole (`whole_calls`): a call
    # recorded cut mid-arguments goes out with `{}`, and the run notes it.
    whole_calls: bool = False

    @property
    def routes(self) -> tuple[str, ...]:
        """The model routes under a base root (POST); path parameters are read by `decode_routed`."""
        return ("/v1" + self.path,)

    @property
    def prefixes(self) -> tuple[str, ...]:
        """Paths under a base root whose unknown neighbours get this dialect's error shape."""
        return self.routes

    @abstractmethod
    def decode_request(self, body: bytes) -> Request:
        """The neutral request; raises RequestError naming what is wrong."""

    def decode_routed(self, body: bytes, params: Mapping[str, str]) -> Request:
        """The neutral request of a call to one of `routes`, with the route's path parameters
        (Gemini names the model and whether to stream in the path); by default the body alone."""
        return self.decode_request(body)

    def frame_reader(self) -> FrameReader:
        """Splits a live stream of this dialect into events for `stream_decoder()` (record mode)."""
        return SSEReader()

    @abstractmethod
    def reply_id(self, script: int, call: int) -> str:
        """A stable id for the reply to entry `call` of script `script` (the same bytes every run)."""

    @abstractmethod
    def render(self, reading: Reading, envelope: Envelope) -> Reply:
        """Answer one script entry (templates already resolved), read by `render.read`."""

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

    def frame(self, name: str | None, data: bytes) -> bytes | None:
        """One recorded event (`recorded.WireCall`) in this dialect's framing: SSE for a dialect
        that streams SSE; None where the dialect does not say how (its recorded streams are then
        rendered from their chunks, as in any other dialect)."""
        if self.stream_type != SSE:
            return None
        return named_event(name, data) if name else data_event(data)

    def recorded_ending(self, events: Sequence[tuple[str | None, Any]]) -> tuple[int | None, int]:
        """Of a recorded stream's events (`recorded.WireCall.stream`): which one is the usage frame
        a client gets only when it asks for usage (None: there is none), and where the closing
        frames begin (by default none: every event is a frame)."""
        return None, len(events)

    def error_headers(self, body: bytes) -> Mapping[str, str] | None:
        """Headers an error answer with `body` carries besides its body (Bedrock names its error
        type in `x-amzn-errortype`, where botocore reads it); None for most dialects."""
        return None

    def upstream_request(self, method: str, url: str, headers: list[tuple[bytes, bytes]],
                         body: bytes) -> tuple[str, list[tuple[bytes, bytes]]]:
        """A live call as it goes upstream (record mode): its URL and the client's headers (hop-by-hop
        ones left out); as they are by default. Bedrock signs the call again for the upstream (the
        client signed it for mockllm's host). Raises RecordError when it cannot be sent."""
        return url, headers

    def reply_of(self, reply_id: str) -> tuple[int, int] | None:
        """The (script, call) an earlier reply id was rendered for, when this dialect's ids say so."""
        return None


class WalkedDialect(Dialect):
    """A dialect whose answers one `CallRender` subclass walks and whose whole answers its stream
    decoder reads as events (chat completions, Anthropic Messages, Responses): it names those pieces,
    and the methods that join them are written once, here."""

    call: ClassVar[type[CallRender]]  # walks a reading into this dialect's events
    decoder: ClassVar[type[StreamDecoder]]  # decodes one live stream back into chunks
    whole_events: ClassVar[staticmethod[[dict[str, Any]], list[SSEEvent]]]  # a whole answer as a stream's events

    def render(self, reading: Reading, envelope: Envelope) -> Reply:
        return render_entry(self.call, reading, envelope)

    def stream_decoder(self) -> StreamDecoder:
        return self.decoder()

    def body_events(self, body: bytes) -> list[SSEEvent] | None:
        reply = whole_reply(body)
        return None if reply is None else type(self).whole_events(reply)

