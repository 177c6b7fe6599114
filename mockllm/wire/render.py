"""One script entry to one Reply, the same way in every dialect.

What an entry becomes is decided here, once for all dialects:
- a `hang` streams HANG_CHUNKS (one text delta, as dsh does) and holds the connection;
- a `throw` with no chunks fails before any byte: the provider's HTTP error;
- a `throw` with chunks streams them, then ends in the dialect's error event, or with nothing at
  all for `STREAM_CLOSED` (a bare cut); not streaming, it is the HTTP error;
- a call whose finish is a `CONTEXT_WINDOW_EXCEEDED` error is the dialect's HTTP 400 (that is how
  the provider said it, and how the client's adapter records it again);
- an `aborted` finish streams the chunks and holds, as the live client cancelled;
- any other call streams its chunks, ends, and closes.

A dialect says only what its events are: a `CallRender` subclass turns each kind of chunk into its
frames and shapes its error bodies. The walk over the chunks is shared, so every dialect reads a
recorded call the same way (which finish and usage count, which blocks had no deltas).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

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
    UsageChunk,
)
from mockllm.script.entries import HANG_CHUNKS, Entry, HangEntry, ThrowEntry, throw_status
from mockllm.wire.dialect import Envelope
from mockllm.wire.reply import Frames, Reply

# How a walked call closes, besides its frames: the usage frame sent when the client asks for usage
# (None where the dialect always carries usage in its frames), the closing frames, and the whole
# answer for a client that did not stream.
Ended = tuple[bytes | None, tuple[bytes, ...], bytes]


class CallRender(ABC):
    """One call's chunks walked once into one dialect's frames and its whole answer.

    Before the walk the whole call is read once, since several wire shapes need what comes later
    (Anthropic's `message_start` carries the usage; a block with no deltas is sent at its start):
    `finish` and `usage` (the last of each), `ended` (each block's recorded `block-end`) and
    `last_delta` (each block's last delta's position). Then `opening()` emits the envelope's
    first events, and each chunk goes to the hook for its type with `frames.chunk` set to its
    position, so pacing sends every frame when the chunk it came from was recorded.
    """

    def __init__(self, envelope: Envelope, chunks: Sequence[StreamChunk]) -> None:
        self.envelope = envelope
        self.frames = Frames()
        finish: FinishChunk | None = None
        usage: TokenUsage | None = None
        ended: dict[int, Block] = {}
        last_delta: dict[int, int] = {}
        for position, chunk in enumerate(chunks):
            if isinstance(chunk, TextDelta | ReasoningDelta | ToolCallDelta):
                last_delta[chunk.index] = position
            elif isinstance(chunk, BlockEnd):
                ended[chunk.index] = chunk.block
            elif isinstance(chunk, UsageChunk):
                usage = chunk.usage
            elif isinstance(chunk, FinishChunk):
                finish = chunk
        self.finish = finish
        self.usage = usage
        self.ended = ended
        self.last_delta = last_delta
        self.opening(chunks)
        self._walk(chunks)

    def _walk(self, chunks: Sequence[StreamChunk]) -> None:
        frames, ended, last_delta = self.frames, self.ended, self.last_delta
        for position, chunk in enumerate(chunks):
            frames.chunk = position  # what end() adds keeps the last chunk's: it goes out with it
            if isinstance(chunk, TextDelta):
                self.text(chunk)
            elif isinstance(chunk, ReasoningDelta):
                self.reasoning(chunk)
            elif isinstance(chunk, ToolCallDelta):
                self.tool_delta(chunk)
            elif isinstance(chunk, BlockStart):
                self.block_start(chunk)
                if chunk.index not in last_delta and chunk.index in ended:
                    # A block recorded with no deltas still reaches the client, as one delta of its content.
                    self.whole_block(chunk, ended[chunk.index])
            elif isinstance(chunk, BlockEnd):
                self.block_end(chunk)
            elif isinstance(chunk, FinishChunk):
                self.finish_chunk(chunk)

    @property
    def sources(self) -> tuple[int, ...]:
        return tuple(self.frames.sources)

    # -- what a dialect says: its events --------------------------------------------------------

    def opening(self, chunks: Sequence[StreamChunk]) -> None:
        """The envelope's events before any chunk (sent at once when paced); none by default."""
        return None

    @abstractmethod
    def text(self, chunk: TextDelta) -> None: ...

    @abstractmethod
    def reasoning(self, chunk: ReasoningDelta) -> None: ...

    @abstractmethod
    def tool_delta(self, chunk: ToolCallDelta) -> None: ...

    def block_start(self, chunk: BlockStart) -> None:
        """A recorded block starts; dialects without blocks on the wire send nothing."""
        return None

    @abstractmethod
    def whole_block(self, start: BlockStart, block: Block) -> None:
        """A block recorded with no deltas, at its start: its assembled content as one delta."""

    def block_end(self, chunk: BlockEnd) -> None:
        """A recorded block ends; dialects without blocks on the wire send nothing."""
        return None

    def finish_chunk(self, chunk: FinishChunk) -> None:
        """The recorded finish, where it was recorded; dialects that say it at the end send nothing here."""
        return None

    @abstractmethod
    def end(self) -> Ended:
        """A call that finished: its last frames (appended), then what the reply closes with."""

    def held(self) -> Ended:
        """An aborted call, which holds after its frames: by default nothing more."""
        return None, (), b""

    @abstractmethod
    def error_event(self, entry: ThrowEntry, status: int, body: bytes) -> bytes:
        """The event that ends a `throw`'s stream after its chunks (not appended to the frames)."""

    @staticmethod
    @abstractmethod
    def throw_body(message: str, code: str, status: int) -> bytes:
        """A replayed provider error's HTTP body."""

    @staticmethod
    @abstractmethod
    def context_window_body(message: str | None) -> bytes:
        """The HTTP 400 body of a call that overflowed its context window."""


def render_entry(call: type[CallRender], entry: Entry, envelope: Envelope) -> Reply:
    """Answer one script entry (templates already resolved) with `call`'s events."""
    if isinstance(entry, HangEntry):
        hang = call(envelope, HANG_CHUNKS)
        return Reply(200, tuple(hang.frames), None, "hold", (), b"", hold_when_not_streaming=True,
                     sources=hang.sources)
    if isinstance(entry, ThrowEntry):
        status = throw_status(entry.code, entry.status)
        body = call.throw_body(entry.message, entry.code, status)
        if not entry.chunks:
            return Reply(status, (), None, "error", (), body, body_status=status)
        stream = call(envelope, entry.chunks)
        frames, sources = tuple(stream.frames), stream.sources
        if entry.code == "STREAM_CLOSED":
            return Reply(200, frames, None, "cut", (), body, body_status=status, sources=sources)
        return Reply(200, frames, None, "error", (stream.error_event(entry, status, body),), body,
                     body_status=status, sources=sources)
    stream = call(envelope, entry.chunks)
    reason = stream.finish.reason if stream.finish is not None else None
    if reason is not None and reason.kind == "error" and reason.error_code == "CONTEXT_WINDOW_EXCEEDED":
        return Reply(400, (), None, "done", (), call.context_window_body(reason.error_message), body_status=400)
    if reason is not None and reason.kind == "aborted":
        usage_frame, closing, body = stream.held()
        return Reply(200, tuple(stream.frames), usage_frame, "hold", closing, body, hold_when_not_streaming=True,
                     sources=stream.sources)
    usage_frame, closing, body = stream.end()
    return Reply(200, tuple(stream.frames), usage_frame, "done", closing, body, sources=stream.sources)
