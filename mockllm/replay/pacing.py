"""Pacing: when each event of a paced stream goes out, and the one writer that sends it then.

A run's `pace` (DESIGN.md §5; `--pace`, or `"pace"` in `POST /_mockllm/runs`):
- `burst` (the default): no pacing; the server writes the whole stream at once (its own fast path).
- `recorded`: each event goes out when the recorded chunk that produced it came, measured from the
  recorded call's start (its step's start, or the end of the call it retries), divided by `speed`.
  The wait before the first chunk is kept too, so a client sees the recorded time to first token.
- a number of milliseconds: a fixed gap between events, event k at k * gap (`speed` is not applied).

Frames do not map 1:1 to chunks, so each frame carries its source (`Reply.sources`, filled by the
renderers): the chunk being walked when it was emitted. Envelope events sent before any chunk
(Anthropic's `message_start`, Responses' `response.created`) go out at once, as a provider
acknowledges a request before its model's first token; the usage frame and the closing go with
the last chunk. Offsets count from when the handler starts to answer, and the schedule is absolute:
an event sent late (a busy loop) does not push the later ones, so a stream takes its recorded time.
Only streams are paced: a non-streaming answer, one body, is sent at once. A hang's prefix (or an
aborted call's chunks) is paced, then the stream holds as it does unpaced.

Recorded clocks are not always sane (a fixture stitched from several runs steps days back and
forth), so the schedule is built from the gaps between consecutive chunks: a negative gap is 0 (the
clock stepped back), and a gap longer than MAX_GAP_MS is a clock jump, also 0, and the run's report
says so. An entry with no recorded times (a projected log, an entry scripted in the sidecar, a side
route) is served burst under `recorded`, and the run's report says that too (`pacing` notes).

Every paced stream sleeps through `Pacer`, which the server closes on shutdown: sleeping streams
then send the rest of their events at once and end, so shutdown never waits for a schedule and a
client still gets a whole answer. A client that leaves cancels its handler (aiohttp's
handler_cancellation), which cancels the sleep at once.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

from mockllm.replay.report import PacingNote
from mockllm.replay.run import Run
from mockllm.script.derive import Timing
from mockllm.script.entries import ChunksEntry
from mockllm.wire.reply import AT_START, Reply

log = logging.getLogger("mockllm")

# A recorded gap longer than this is a jump of the recording's clock, not a wait (10 minutes: far past
# any model's time to first token; the corpus has fixtures whose clocks differ by weeks).
MAX_GAP_MS = 600_000.0
# Events due within this many seconds are written now: a timer that fires a hair early needs no second sleep.
EARLY_S = 0.0005


class EventWriter(Protocol):
    """What the pacing writer writes to (an aiohttp StreamResponse)."""

    async def write(self, data: bytes) -> None: ...


@dataclass(frozen=True, slots=True)
class Schedule:
    """A paced stream: its events and when each one is due, in seconds after `start` (loop time)."""

    events: list[bytes]
    offsets: list[float]  # nondecreasing, one per event
    start: float

    @property
    def length(self) -> int:
        return sum(len(e) for e in self.events)


def chunk_offsets(timing: Timing, speed: float = 1.0) -> tuple[list[float], int]:
    """Each chunk's offset after the call's start in ms (divided by `speed`), and how many recorded
    gaps were clock jumps (taken as 0). Negative gaps count as 0, so offsets never go back."""
    offsets: list[float] = []
    jumps = 0
    at = 0.0
    previous = timing.started
    for time in timing.times:
        gap = time - previous
        previous = time
        if abs(gap) > MAX_GAP_MS:
            jumps += 1
        elif gap > 0:
            at += gap / speed
        offsets.append(at)
    return offsets, jumps


def frame_offsets(sources: list[int], chunks: list[float]) -> list[float]:
    """Each event's offset in ms: its source chunk's (AT_START: 0; past the last chunk: the last's)."""
    if not chunks:
        return [0.0] * len(sources)
    last = len(chunks) - 1
    return [0.0 if s == AT_START else chunks[min(s, last)] for s in sources]


def untimed_reason(run: Run, script: int, call: int) -> str:
    """Why entry `call` of script `script` has no recorded times, in words for the run's report."""
    sessions = run.scenario.sessions
    if script >= len(sessions):
        route = run.scenario.side_routes[script - len(sessions)]
        return f"side route {route.model!r} ({route.file}) keeps no recorded times"
    session = sessions[script]
    entry = session.entries[call]
    if not isinstance(entry, ChunksEntry):
        return f"its {type(entry).__name__.removesuffix('Entry').lower()} entry is scripted, not recorded"
    if session.header is None or any(t is not None for t in session.timings):
        return "its entry is scripted in the sidecar, which records no times"
    return "the log records no times (a projected fixture)"


class Pacer:
    """Plans and writes the paced streams of one server; `close()` (at shutdown) wakes them all."""

    def __init__(self) -> None:
        self._sleeping: set[asyncio.Future[None]] = set()
        self.closed = False

    def plan(self, run: Run, reply: Reply, include_usage: bool, timing: Timing | None,
             where: tuple[int, int, str]) -> Schedule | None:
        """The schedule of `reply` under the run's pace, or None to send it burst.

        `where` is (script, call, file) of the entry, for the notes a run's report shows."""
        settings = run.settings
        events, sources = reply.paced_events(include_usage)
        start = asyncio.get_running_loop().time()
        gap = settings.gap_ms
        if gap is not None:
            return Schedule(events, [k * gap / 1000 for k in range(len(events))], start)
        script, call, file = where
        if timing is None:
            _note(run, file, call, "burst", f"{untimed_reason(run, script, call)}: served burst under "
                  "--pace recorded")
            return None
        chunks, jumps = chunk_offsets(timing, settings.speed)
        if jumps:
            _note(run, file, call, "recorded", f"{jumps} recorded gap(s) over {MAX_GAP_MS / 60_000:g} minutes "
                  "are clock jumps, not waits: paced as 0")
        return Schedule(events, [ms / 1000 for ms in frame_offsets(sources, chunks)], start)

    async def write(self, response: EventWriter, schedule: Schedule) -> None:
        """Write each event when it is due; events due together go in one write. Once closed, the
        rest goes out at once."""
        loop = asyncio.get_running_loop()
        events, offsets, start = schedule.events, schedule.offsets, schedule.start
        i, n = 0, len(events)
        while i < n:
            wait = start + offsets[i] - loop.time()
            if wait > EARLY_S and not self.closed:
                await self._sleep(wait)
            due = float("inf") if self.closed else loop.time() - start + EARLY_S
            j = i + 1
            while j < n and offsets[j] <= due:
                j += 1
            await response.write(events[i] if j == i + 1 else b"".join(events[i:j]))
            i = j

    async def _sleep(self, delay: float) -> None:
        # asyncio.sleep's own mechanism (a future and a timer), with the future kept so close() can wake it.
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        timer = loop.call_later(delay, _wake, waiter)
        self._sleeping.add(waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._sleeping.discard(waiter)

    @property
    def sleeping(self) -> int:
        """Paced streams waiting for their next event now."""
        return len(self._sleeping)

    def close(self) -> None:
        """Shutdown: wake every sleeping stream, and let none sleep again."""
        self.closed = True
        for waiter in self._sleeping:
            _wake(waiter)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _note(run: Run, file: str, call: int, served: str, why: str) -> None:
    """Say once per run and call how pacing served it; the log says it once per run and file."""
    key = (file, call)
    if key in run.pacing:
        return
    if not any(f == file for f, _ in run.pacing):
        log.warning("run %s: %s call %d: %s", run.id, file, call + 1, why)
    run.pacing[key] = PacingNote(file, call, served, why)
