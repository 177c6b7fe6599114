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

Rendering is two steps. `Reading` reads an entry once, the same for every dialect: which finish
and usage count, which blocks had no deltas, and its runs of deltas with their texts already
JSON-encoded. A `CallRender` subclass then walks a reading into one dialect's events: a dialect
says only what its events are (its frames for a text, reasoning or tool-call delta, a block's
start and end, the envelope, the finish, its error event and bodies). The catalog keeps each
entry's reading, so a call first asked for in another dialect is only spliced into that
dialect's templates: a call is rendered on the request path the first time it is asked for in a
dialect, and there the work per delta is what counts.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal, cast

import msgspec

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
from mockllm.wire.envelope import Envelope
from mockllm.wire.reply import SSE_END, Frames, Reply

# How a walked call closes, besides its frames: the usage frame sent when the client asks for usage
# (None where the dialect always carries usage in its frames), the closing frames, and the whole
# answer for a client that did not stream.
Ended = tuple[bytes | None, tuple[bytes, ...], bytes]

_DELTAS = (TextDelta, ReasoningDelta, ToolCallDelta)
_encode = msgspec.json.encode


class Run(msgspec.Struct, frozen=True, gc=False):
    """The deltas of a step after its first (same type and block): their texts joined, and each
    one's text JSON-encoded, so a dialect makes all their events by joining its templates around
    them (sse.py's `run_pieces`)."""

    count: int
    text: str
    values: list[bytes]


# One step of the walk: where a run of deltas of one type and block starts, or any other chunk but
# usage (no dialect sends it where it was recorded), and for a run of more than one delta, the rest.
Step = tuple[int, Run | None]


class Reading:
    """An entry's chunks read once, the same for every dialect.

    Several wire shapes need what comes later in a call (Anthropic's `message_start` carries the
    usage; a block with no deltas is sent at its start), so the whole call is read before any
    dialect walks it: `finish` and `usage` (the last of each), `ended` (each block's recorded
    `block-end`, the last one of a block), `last_delta` (each block's last delta's position),
    `tool_deltas`, and the `steps` to walk.
    """

    __slots__ = ("chunks", "ended", "entry", "finish", "kind", "last_delta", "steps", "tool_deltas", "usage")

    def __init__(self, entry: Entry) -> None:
        self.entry = entry
        self.kind: Literal["chunks", "throw", "hang"]
        self.chunks: Sequence[StreamChunk]
        if isinstance(entry, HangEntry):
            self.kind, self.chunks = "hang", HANG_CHUNKS
        else:
            self.kind, self.chunks = ("throw" if isinstance(entry, ThrowEntry) else "chunks"), entry.chunks
        self.finish: FinishChunk | None = None
        self.usage: TokenUsage | None = None
        self.ended: dict[int, Block] = {}
        self.last_delta: dict[int, int] = {}
        self.tool_deltas: list[ToolCallDelta] = []
        self.steps: list[Step] = []
        run: type | None = None  # the type of the run of deltas being read
        run_index = start = 0
        position = -1
        for chunk in self.chunks:
            position += 1
            kind = type(chunk)
            # The bulk of any call, kept to a test and a compare: only deltas have the type of a run.
            if kind is run and chunk.index == run_index:  # type: ignore[union-attr]
                continue
            if run is not None:
                self._end_run(start, position, run_index)
                run = None
            if isinstance(chunk, _DELTAS):
                run, run_index, start = kind, chunk.index, position
                continue
            if isinstance(chunk, UsageChunk):
                self.usage = chunk.usage
                continue
            self.steps.append((position, None))
            if isinstance(chunk, BlockEnd):
                self.ended[chunk.index] = chunk.block
            elif isinstance(chunk, FinishChunk):
                self.finish = chunk
        if run is not None:
            self._end_run(start, len(self.chunks), run_index)

    def _end_run(self, start: int, end: int, index: int) -> None:
        self.last_delta[index] = end - 1
        first = self.chunks[start]
        rest = None
        if isinstance(first, ToolCallDelta):
            calls = cast("list[ToolCallDelta]", self.chunks[start:end])
            self.tool_deltas += calls
            if end - start > 1:
                texts = [c.argumentsDelta for c in calls[1:]]
                rest = Run(len(texts), "".join(texts), list(map(_encode, texts)))
        elif end - start > 1:
            texts = [c.text for c in cast("list[TextDelta]", self.chunks[start + 1 : end])]
            rest = Run(len(texts), "".join(texts), list(map(_encode, texts)))
        self.steps.append((start, rest))


class CallRender(ABC):
    """One call, read, walked once into one dialect's frames and its whole answer.

    `opening()` emits the envelope's first events; then each step goes to the hook for its chunk's
    type with `frames.chunk` set to its position, so pacing sends every frame when the chunk it
    came from was recorded, and a run's further deltas go to `more()` at once.
    """

    # Each chunk type's hook, per dialect (set for every subclass): a step costs a lookup and a call,
    # and nothing where the dialect sends nothing for that chunk.
    _hooks: ClassVar[dict[type, Callable[[Any, Any], None] | None]]
    # How each of the dialect's events ends: where its joined frames split into events again.
    event_end: ClassVar[bytes] = SSE_END
    # How its frames are held and split again: by `event_end`, or by their own lengths (Bedrock's
    # binary event stream has no delimiter).
    frames_type: ClassVar[type[Frames]] = Frames

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        block_end = None if cls.block_end is CallRender.block_end else cls.block_end
        finish = None if cls.finish_chunk is CallRender.finish_chunk else cls.finish_chunk
        cls._hooks = {TextDelta: cls.text, ReasoningDelta: cls.reasoning, ToolCallDelta: cls.tool_delta,
                      BlockStart: cls._block_started, BlockEnd: block_end, FinishChunk: finish}

    def __init__(self, envelope: Envelope, reading: Reading) -> None:
        self.envelope = envelope
        self.frames = frames = self.frames_type(self.event_end)
        self.finish = reading.finish
        self.usage = reading.usage
        self.ended = reading.ended
        self.last_delta = reading.last_delta
        self.tool_deltas = reading.tool_deltas
        self.opening()
        chunks, hooks = reading.chunks, self._hooks
        for start, rest in reading.steps:
            chunk = chunks[start]
            frames.chunk = start
            hook = hooks[type(chunk)]
            if hook is not None:
                hook(self, chunk)
            if rest is not None:
                self.more(rest)
        if chunks:
            frames.chunk = len(chunks) - 1  # what end() adds keeps the last chunk's: it goes out with it

    def tool_identity(self) -> dict[int, tuple[str | None, str | None]]:
        """Each tool call's identity as a client first sees it, by recorded block index: its first
        delta's (id, name), gaps filled from its block-end (the dialects that send a tool call's id
        and name when its block opens need them before its deltas)."""
        identity: dict[int, tuple[str | None, str | None]] = {}
        calls = [(c.index, c.id, c.name) for c in self.tool_deltas]
        calls += [(i, b.id, b.name) for i, b in self.ended.items() if b.type == "tool-call"]
        for index, call_id, name in calls:
            old_id, old_name = identity.get(index, (None, None))
            identity[index] = (old_id or call_id, old_name or name)
        return identity

    def _block_started(self, chunk: BlockStart) -> None:
        self.block_start(chunk)
        if chunk.index not in self.last_delta and chunk.index in self.ended:
            # A block recorded with no deltas still reaches the client, as one delta of its content.
            self.whole_block(chunk, self.ended[chunk.index])

    # -- what a dialect says: its events --------------------------------------------------------

    def opening(self) -> None:
        """The envelope's events before any chunk (sent at once when paced); none by default."""
        return None

    @abstractmethod
    def text(self, chunk: TextDelta) -> None: ...

    @abstractmethod
    def reasoning(self, chunk: ReasoningDelta) -> None: ...

    @abstractmethod
    def tool_delta(self, chunk: ToolCallDelta) -> None: ...

    @abstractmethod
    def more(self, run: Run) -> None:
        """The deltas right after the last one, of its type and block: one frame each (`frames.run`)."""

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


def render_entry(call: type[CallRender], reading: Reading, envelope: Envelope) -> Reply:
    """Answer one read script entry (templates already resolved) with `call`'s events."""
    entry = reading.entry
    if reading.kind == "hang":
        frames = call(envelope, reading).frames
        return Reply(200, frames.events(), None, "hold", (), b"", hold_when_not_streaming=True,
                     sources=tuple(frames.sources))
    if isinstance(entry, ThrowEntry):
        status = throw_status(entry.code, entry.status)
        body = call.throw_body(entry.message, entry.code, status)
        if not entry.chunks:
            return Reply(status, (), None, "error", (), body, body_status=status)
        stream = call(envelope, reading)
        sources = tuple(stream.frames.sources)
        if entry.code == "STREAM_CLOSED":
            return Reply(200, stream.frames.events(), None, "cut", (), body, body_status=status, sources=sources)
        error: tuple[bytes, ...] = (stream.error_event(entry, status, body),)
        return Reply(200, stream.frames.events(error), None, "error", error, body, body_status=status,
                     sources=sources)
    reason = reading.finish.reason if reading.finish is not None else None
    if reason is not None and reason.kind == "error" and reason.error_code == "CONTEXT_WINDOW_EXCEEDED":
        return Reply(400, (), None, "done", (), call.context_window_body(reason.error_message), body_status=400)
    stream = call(envelope, reading)
    if reason is not None and reason.kind == "aborted":
        usage_frame, closing, body = stream.held()
        ending: Literal["hold", "done"] = "hold"
    else:
        usage_frame, closing, body = stream.end()
        ending = "done"
    # Sent as one buffer when the client asks for usage: the usage frame and the closing are joined
    # behind the frames once, here (Events).
    after = ((usage_frame,) if usage_frame is not None else ()) + closing if ending == "done" else ()
    return Reply(200, stream.frames.events(after), usage_frame, ending, closing, body,
                 hold_when_not_streaming=ending == "hold", sources=tuple(stream.frames.sources))


_HANG = Reading(HangEntry())  # the same for every hang (readyFile is the server's business)


def read(entry: Entry) -> Reading:
    """`entry` read for any dialect's render (`Dialect.render`); keep it to render it again."""
    return _HANG if isinstance(entry, HangEntry) else Reading(entry)
