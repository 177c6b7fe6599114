"""A call as the provider sent it: its wire events (or its whole answer), kept beside the session
logs so that a replay in the same dialect sends what the provider sent, envelope and all.

A dsh log keeps a call's content, provider-neutral (StreamChunks): what every dialect renders.
What the provider sent around it (its model, ids, `created`, `system_fingerprint`,
`service_tier`, usage where and as it put it, the request settings Responses echoes back, the
events a client reads and a chunk cannot say, such as Anthropic's `ping`) is in no chunk. A
recorder keeps it per call as a `WireCall`, one line of the scenario's `envelopes.jsonl`; replay
serves those events again, in the dialect they were recorded in, as long as they still say what
the log says: they are decoded again with the dialect's own stream decoder, and only when that
gives the entry's chunks exactly (nothing edited, patched or redacted apart since) are they sent.
Otherwise, and in every other dialect, the call is rendered from its chunks as before, under the
recorded model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from mockllm.dsh.chunks import StreamChunk
from mockllm.scenario.envelopes import WireCall, field_at
from mockllm.wire.dialect import Dialect, SSEEvent
from mockllm.wire.envelope import Envelope
from mockllm.wire.reply import AT_START, Reply

_encode = msgspec.json.encode

_MODEL_PATHS = ("model", "modelVersion", "message.model", "response.model")


def model_of(values: Sequence[Any]) -> str | None:
    """The model the provider named in its answer (chat, Ollama `model`, Gemini `modelVersion`,
    Anthropic `message.model`, Responses `response.model`): the first one any event names."""
    for value in values:
        model = field_at(value, _MODEL_PATHS)
        if isinstance(model, str) and model:
            return model
    return None


def wire_call(session: str, call: int, dialect: str, events: Sequence[SSEEvent] | None,
              body: bytes | None) -> WireCall | None:
    """What a recorder keeps of one answered call: its events (streamed) or its body (whole),
    decoded to JSON; None when the body is not JSON."""
    if body is not None:
        try:
            whole = msgspec.json.decode(body)
        except msgspec.DecodeError:
            return None
        return WireCall(session, call, dialect, model_of([whole]), body=whole)
    stream = [(name, _data(data)) for name, data in events or ()]
    return WireCall(session, call, dialect, model_of([data for _, data in stream[:3]] + [d for _, d in stream[-2:]]),
                    stream=stream)


def _data(data: bytes) -> Any:
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError:
        return data.decode("utf-8", "replace")


def _raw(data: Any) -> bytes:
    return data.encode() if isinstance(data, str) else _encode(data)


def says(dialect: Dialect, wire: WireCall, chunks: Sequence[StreamChunk]) -> list[int] | None:
    """Whether `wire`'s events (or body) decode, with `dialect`'s decoder, to exactly `chunks`:
    for a stream, each event's source (the last chunk it completes, AT_START before any; see
    `Frames`), for a body, []; None when they say something else (the log was edited since)."""
    decoder = dialect.stream_decoder()
    decoded: list[StreamChunk] = []
    sources: list[int] = []
    try:
        if wire.stream is not None:
            for name, data in wire.stream:
                decoded += decoder.feed(name, _raw(data))
                sources.append(len(decoded) - 1 if decoded else AT_START)
        else:
            events = dialect.body_events(_encode(wire.body))
            if events is None:
                return None
            for name, data in events:
                decoded += decoder.feed(name, data)
        fed = len(decoded)
        decoded += decoder.close()
        # The events after the last one that made a chunk (a finish reason, usage, `[DONE]`) came when
        # the call ended: they go with its last chunk (the finish the decoder makes as it closes), as
        # a rendered call's closing frames do.
        last = fed - 1
        for k in range(len(sources) - 1, -1, -1):
            if sources[k] != last or (k and sources[k - 1] != last) or (k == 0 and last != AT_START):
                break
            sources[k] = len(decoded) - 1
    except (msgspec.DecodeError, ValueError, TypeError, AttributeError):  # an event the recorder could not read either
        return None
    return sources if decoded == list(chunks) else None


def envelope(wire: WireCall | None, dialect: Dialect, default: Envelope) -> Envelope:
    """The envelope a call is rendered under: the recorded model in every dialect, and in the
    dialect it was recorded in, the provider's id and creation time too."""
    if wire is None:
        return default
    model = wire.model or default.model
    if wire.dialect != dialect.name:
        return Envelope(default.reply_id, default.created, model, recorded=True)
    created = wire.created
    return Envelope(wire.reply_id or default.reply_id, default.created if created is None else created, model,
                    recorded=True)


def replayed(dialect: Dialect, wire: WireCall, sources: list[int], rendered: Reply) -> Reply:
    """`rendered` with what the provider sent put back: its stream's events (as the provider sent
    them; the dialect says which of them are the usage frame a client may not have asked for, and
    which close the stream), or its whole answer. The other mode stays as rendered."""
    if rendered.status != 200 or rendered.ending != "done":
        return rendered
    if wire.body is not None:
        return msgspec.structs.replace(rendered, body=_encode(wire.body))
    if wire.stream is None:
        return rendered
    framed = [dialect.frame(name, _raw(data)) for name, data in wire.stream]
    frames = [frame for frame in framed if frame is not None]
    if len(frames) != len(framed):  # a dialect that cannot frame its recorded events
        return rendered
    usage_at, closing_at = dialect.recorded_ending(wire.stream)
    usage = frames[usage_at] if usage_at is not None else None
    closing = tuple(frames[closing_at:])
    kept = [k for k in range(closing_at) if k != usage_at]
    return msgspec.structs.replace(rendered, frames=tuple(frames[k] for k in kept), usage_frame=usage,
                                   closing=closing, sources=tuple(sources[k] for k in kept))
