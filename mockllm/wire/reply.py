"""A rendered answer to one script entry, in one dialect's bytes; the server only writes it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Literal, overload

import msgspec

# How a stream ends after its frames: its closing frames (`[DONE]`, an error event, or nothing at
# all for a bare cut), or holding the connection until the client leaves (a hang, an aborted finish).
Ending = Literal["done", "error", "cut", "hold"]

# A frame's source (`Reply.sources`): the index of the entry chunk that produced it, or one of these.
AT_START = -1  # produced before any chunk (an envelope: message_start, response.created): sent at once
AT_END = 1 << 30  # the usage frame and the closing: sent with the last chunk

SSE_END = b"\n\n"  # how an SSE event ends (an NDJSON line ends in b"\n")


class Events(Sequence[bytes]):
    """A stream's events held as one joined bytes, as a renderer makes them.

    A burst stream is sent joined (`Reply.stream_bytes`), so its events are split apart only when
    something asks for them one by one (pacing, a test); making one bytes object per event cost
    more than anything else in a first render. Each event ends in the only `end` it holds, which is
    where it is split: an SSE event in its blank line (sse.py), an NDJSON line in its newline
    (ndjson.py); JSON payloads never hold a raw newline.

    `after` (the usage frame and the closing a renderer ends the stream with) may be joined into
    the same `buffer`, after the events: a burst stream that ends with exactly those is then sent
    from that one buffer, where joining them to the events on the request path copied the whole
    stream into fresh memory (its page faults cost more than a first render of a short call).
    """

    __slots__ = ("_split", "after", "buffer", "end", "length", "size")

    def __init__(self, buffer: bytes, count: int, end: bytes = SSE_END, after: tuple[bytes, ...] = ()) -> None:
        self.buffer = buffer  # the events, then `after`
        self.after = after
        self.size = len(buffer) - sum(map(len, after))  # the events' bytes
        self.length = count
        self.end = end
        self._split: tuple[bytes, ...] | None = None

    @property
    def joined(self) -> bytes:
        """The events' bytes, without `after`."""
        return self.buffer[: self.size] if self.after else self.buffer

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[bytes, ...]: ...

    def __getitem__(self, index: int | slice) -> bytes | tuple[bytes, ...]:
        return self.events()[index]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.events())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Events | tuple | list):
            return self.events() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.events())

    def __repr__(self) -> str:
        return repr(self.events())

    def events(self) -> tuple[bytes, ...]:
        """One bytes object per event, split on first use."""
        if self._split is None:
            end = self.end
            self._split = tuple(event + end for event in self.joined.split(end)[:-1])
            assert len(self._split) == self.length, "an event holds its end of its own"
        return self._split

    def whole(self, after: Sequence[bytes] = ()) -> bytes:
        """The events followed by `after`: the buffer itself when `after` is what it holds after the
        events, else joined (copied once)."""
        if tuple(after) == self.after:
            return self.buffer
        return b"".join([self.joined, *after])


class Frames:
    """The frames a renderer emits, each with its source: the chunk being walked when it was emitted.

    A renderer sets `chunk` as it walks an entry's chunks; every `append` records it, and a `run`
    of events records one source per event, the chunks after `chunk`. Frames emitted before the
    walk are AT_START; frames emitted after it (closing blocks, a terminal event) keep the last
    chunk's index. Pacing sends each frame when its source chunk came. `end` is how each event
    ends (see Events): where the joined frames split into events again.
    """

    __slots__ = ("chunk", "end", "pieces", "sources")

    def __init__(self, end: bytes = SSE_END) -> None:
        self.pieces: list[bytes] = []  # joined, the events: single events, several joined, or a run's pieces
        self.sources: list[int] = []  # one per event
        self.chunk = AT_START
        self.end = end

    def append(self, frame: bytes) -> None:
        self.pieces.append(frame)
        self.sources.append(self.chunk)

    def together(self, events: bytes, count: int) -> None:
        """`count` events joined, all from the chunk being walked."""
        self.pieces.append(events)
        self.sources += [self.chunk] * count

    def run(self, pieces: list[bytes], count: int) -> None:
        """`count` events as pieces that joined are those events, one for each of the chunks after
        `chunk`, in order (a run of deltas past its first): joined with the other frames, once."""
        self.pieces += pieces
        self.sources += range(self.chunk + 1, self.chunk + 1 + count)

    def events(self, after: Sequence[bytes] = ()) -> Events:
        """The frames joined, `after` joined behind them (see Events)."""
        after = tuple(after)
        return Events(b"".join([*self.pieces, *after]) if after else b"".join(self.pieces), len(self.sources),
                      self.end, after)


class Reply(msgspec.Struct, frozen=True, gc=False):
    """How one entry is answered, for a streaming and a non-streaming request.

    `status` != 200 means the call fails before any byte is streamed (`body` is the error).
    Otherwise the stream is `frames`, then `usage_frame` when the client asked for usage (dialects
    that always send usage carry it in `frames`), then `closing` (`[DONE]`, an error event, or
    nothing), unless `ending` is "hold". `sources` holds each frame's source (see Frames), for pacing.

    A frozen msgspec Struct, not a frozen dataclass: a reply is built on the request path the first
    time a call is asked for in a dialect, and a frozen dataclass's __init__ (an object.__setattr__
    per field) cost as much as rendering a short call. It holds no cycles: the collector skips it.
    """

    status: int
    frames: Sequence[bytes]  # a tuple, or Events as renderers make them
    usage_frame: bytes | None
    ending: Ending
    closing: tuple[bytes, ...]
    body: bytes  # non-stream: the dialect's whole answer, or the error body when status != 200
    hold_when_not_streaming: bool = False
    # Non-stream status: a `throw` fails a non-streaming call as an HTTP error even when its chunks
    # would have been streamed first (a whole answer cannot carry a mid-stream error).
    body_status: int = 200
    sources: tuple[int, ...] = ()  # per frame, the entry chunk it came from (Frames); () when nothing streams
    # The whole stream, per include_usage, built on first use.
    _streams: dict[bool, bytes] = msgspec.field(default_factory=dict)

    # Equal and hashed by what it answers, as the frozen dataclass it was: the `_streams` cache aside,
    # and `frames` as the events they are, joined (Events) or not.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Reply):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def _fields(self) -> tuple[object, ...]:
        return (self.status, tuple(self.frames), self.usage_frame, self.ending, self.closing, self.body,
                self.hold_when_not_streaming, self.body_status, self.sources)

    def stream_bytes(self, include_usage: bool) -> bytes:
        """The whole stream up to its ending: every frame, the usage frame if asked for, the closing.

        Built once per `include_usage`. Where the renderer joined exactly those after its frames
        (Events), it is that buffer, not a copy: the copy doubled what a reply holds, and on the
        request path a first render's fresh memory (page faults) cost more than rendering it."""
        stream = self._streams.get(include_usage)
        if stream is None:
            frames, after = self.frames, self._after_frames(include_usage)
            stream = frames.whole(after) if isinstance(frames, Events) else b"".join([*frames, *after])
            self._streams[include_usage] = stream
        return stream

    def paced_events(self, include_usage: bool) -> tuple[list[bytes], list[int]]:
        """The stream's events, as `stream_bytes` sends them, and each one's source (see Frames)."""
        events = self._events(include_usage)
        sources = list(self.sources[: len(self.frames)])
        sources += [AT_START] * (len(self.frames) - len(sources))  # a renderer that names no sources
        sources += [AT_END] * (len(events) - len(sources))
        return events, sources

    def _events(self, include_usage: bool) -> list[bytes]:
        return [*self.frames, *self._after_frames(include_usage)]

    def _after_frames(self, include_usage: bool) -> list[bytes]:
        after = [self.usage_frame] if include_usage and self.usage_frame is not None else []
        if self.ending != "hold":
            after += self.closing
        return after
