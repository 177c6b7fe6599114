"""Pacing: when each event of a paced stream goes out.

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

This module plans (pure: the run asks it, and keeps its notes); the server's `Pacer`
(mockllm/server/streaming.py) writes each event when its schedule says.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mockllm.options import RunSettings
from mockllm.scenario.load import Scenario
from mockllm.script.derive import Timing
from mockllm.script.entries import ChunksEntry
from mockllm.wire.reply import AT_START, Reply

# A recorded gap longer than this is a jump of the recording's clock, not a wait (10 minutes: far past
# any model's time to first token; the corpus has fixtures whose clocks differ by weeks).
MAX_GAP_MS = 600_000.0
@dataclass(frozen=True, slots=True)
class Schedule:
    """A paced stream: its events and when each one is due, in seconds after the answer starts."""

    events: list[bytes]
    offsets: list[float]  # nondecreasing, one per event

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


def untimed_reason(scenario: Scenario, script: int, call: int) -> str:
    """Why entry `call` of script `script` has no recorded times, in words for the run's report."""
    sessions = scenario.sessions
    if script >= len(sessions):
        route = scenario.side_routes[script - len(sessions)]
        return f"side route {route.model!r} ({route.file}) keeps no recorded times"
    session = sessions[script]
    entry = session.entries[call]
    if not isinstance(entry, ChunksEntry):
        return f"its {type(entry).__name__.removesuffix('Entry').lower()} entry is scripted, not recorded"
    if session.header is None or any(t is not None for t in session.timings):
        return "its entry is scripted in the sidecar, which records no times"
    return "the log records no times (a projected fixture)"


def plan_pacing(settings: RunSettings, reply: Reply, include_usage: bool, timing: Timing | None,
         untimed: Callable[[], str]) -> tuple[Schedule | None, tuple[str, str] | None]:
    """The schedule of `reply` under the run's pace (None: send it burst), and when it could not be
    paced as asked, how it was served ("burst" or "recorded") and why, for the run's report.
    `untimed` says why an entry has no recorded times (asked only then)."""
    events, sources = reply.paced_events(include_usage)
    gap = settings.gap_ms
    if gap is not None:
        return Schedule(events, [k * gap / 1000 for k in range(len(events))]), None
    if timing is None:
        return None, ("burst", f"{untimed()}: served burst under --pace recorded")
    chunks, jumps = chunk_offsets(timing, settings.speed)
    note = None
    if jumps:
        note = ("recorded", f"{jumps} recorded gap(s) over {MAX_GAP_MS / 60_000:g} minutes are clock jumps, "
                "not waits: paced as 0")
    return Schedule(events, [ms / 1000 for ms in frame_offsets(sources, chunks)]), note
