"""A rendered answer to one script entry, in one dialect's bytes; the server only writes it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

# How a stream ends after its frames: its closing frames (`[DONE]`, an error event, or nothing at
# all for a bare cut), or holding the connection until the client leaves (a hang, an aborted finish).
Ending = Literal["done", "error", "cut", "hold"]

# A frame's source (`Reply.sources`): the index of the entry chunk that produced it, or one of these.
AT_START = -1  # produced before any chunk (an envelope: message_start, response.created): sent at once
AT_END = 1 << 30  # the usage frame and the closing: sent with the last chunk


class Frames:
    """The frames a renderer emits, each with its source: the chunk being walked when it was emitted.

    A renderer sets `chunk` as it walks an entry's chunks; every `append` records it. Frames
    emitted before the walk are AT_START; frames emitted after it (closing blocks, a terminal
    event) keep the last chunk's index. Pacing sends each frame when its source chunk came.
    """

    __slots__ = ("chunk", "frames", "sources")

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.sources: list[int] = []
        self.chunk = AT_START

    def append(self, frame: bytes) -> None:
        self.frames.append(frame)
        self.sources.append(self.chunk)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.frames)

    def __len__(self) -> int:
        return len(self.frames)


@dataclass(frozen=True, slots=True)
class Reply:
    """How one entry is answered, for a streaming and a non-streaming request.

    `status` != 200 means the call fails before any byte is streamed (`body` is the error).
    Otherwise the stream is `frames`, then `usage_frame` when the client asked for usage (dialects
    that always send usage carry it in `frames`), then `closing` (`[DONE]`, an error event, or
    nothing), unless `ending` is "hold". `sources` holds each frame's source (see Frames), for pacing.
    """

    status: int
    frames: tuple[bytes, ...]
    usage_frame: bytes | None
    ending: Ending
    closing: tuple[bytes, ...]
    body: bytes  # non-stream: the dialect's whole answer, or the error body when status != 200
    hold_when_not_streaming: bool = False
    # Non-stream status: a `throw` fails a non-streaming call as an HTTP error even when its chunks
    # would have been streamed first (a whole answer cannot carry a mid-stream error).
    body_status: int = 200
    sources: tuple[int, ...] = ()  # per frame, the entry chunk it came from (Frames); () when nothing streams
    # The stream split after its first event, per include_usage, built on first use.
    _parts: dict[bool, tuple[bytes, bytes]] = field(default_factory=dict, compare=False, repr=False)

    def stream_bytes(self, include_usage: bool) -> bytes:
        """The whole stream up to its ending: every frame, the usage frame if asked for, the closing."""
        return b"".join(self._events(include_usage))

    def stream_parts(self, include_usage: bool) -> tuple[bytes, bytes]:
        """`stream_bytes` split after its first event: (first event, the rest), for two writes."""
        parts = self._parts.get(include_usage)
        if parts is None:
            events = self._events(include_usage)
            parts = self._parts[include_usage] = (events[0] if events else b"", b"".join(events[1:]))
        return parts

    def paced_events(self, include_usage: bool) -> tuple[list[bytes], list[int]]:
        """The stream's events, as `stream_bytes` sends them, and each one's source (see Frames)."""
        events = self._events(include_usage)
        sources = list(self.sources[: len(self.frames)])
        sources += [AT_START] * (len(self.frames) - len(sources))  # a renderer that names no sources
        sources += [AT_END] * (len(events) - len(sources))
        return events, sources

    def _events(self, include_usage: bool) -> list[bytes]:
        events = list(self.frames)
        if include_usage and self.usage_frame is not None:
            events.append(self.usage_frame)
        if self.ending != "hold":
            events.extend(self.closing)
        return events
