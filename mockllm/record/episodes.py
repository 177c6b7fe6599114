"""new_episodes, written: the scenario as it was, with each session that went live continued by its
live calls, and each session the recording did not have added as a child.

A session that went live after being served K recorded calls keeps its log as recorded up to the
end of call K's answer (the header and those lines byte for byte), then its live calls, written as
`mockllm record` writes calls (`events.SessionEvents`), numbered on from there: the open step and
turn are closed by the first live call's rows, as dsh would have closed them. A primary's sidecar
keeps only the patches of the calls it kept. Sessions the run did not take live are not read.

A new session whose first call said `x-mockllm-fork: true` is written as `mockllm record` writes a
fork (`tree.SessionTree`): its log starts with its parent's completed turns as they stood when its
first call arrived (the parent's lines up to the last `turn/end` within the calls it had made, as
written in the rewritten parent log), its header says so in `seedLength`, and its own events are
numbered on from there.

What cannot be continued is refused with a RecordError naming the file: a primary whose whole
script is its sidecar's array, a cut inside a packed row, a call made by a compaction event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from mockllm.dsh.header import SessionHeader, encode_header
from mockllm.dsh.names import (
    ASSISTANT_MESSAGE,
    CHILD_FILE,
    CHUNK_EVENT,
    SIDECAR_FILE,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    child_file,
)
from mockllm.dsh.reader import CallChunk, Event, parse_log
from mockllm.dsh.writer import EventLike, encode_rows
from mockllm.errors import RecordError
from mockllm.numbering import call_name
from mockllm.record.call import ObservedCall
from mockllm.record.events import SessionEvents
from mockllm.record.redact import Redactor
from mockllm.record.side import write_json
from mockllm.script.derive import derive_calls

# What follows a call's last chunk and still belongs to its answer, as `mockllm record` writes it.
_ANSWER_EVENTS = frozenset((ASSISTANT_MESSAGE, TOOL_CALL))
# An answer that called no tool ends its step and turn right after it (`events.SessionEvents`).
_ANSWER_ENDS = _ANSWER_EVENTS | {STEP_END, TURN_END}
# Where a session's first call begins: what comes before it (a seed, a request header) is kept.
_CALL_EVENTS = frozenset((TURN_START, USER_MESSAGE, STEP_START, TOOL_RESULT, CHUNK_EVENT))


@dataclass(slots=True)
class LiveSession:
    """One live session of a new_episodes run: the recorded session it continues (None: a new one),
    how many recorded calls it was served first, and its live calls."""

    live_id: str
    file: str | None  # the recorded session's file
    path: Path | None  # its log
    served: int
    parent: str | None = None  # the live id its first call named in `x-mockllm-parent`
    recorded_id: str = ""  # a new session's id in the rewritten tree
    calls: list[ObservedCall] = field(default_factory=list)
    arrived: int = 0  # its live calls that have arrived (`calls` holds them once recorded, at the end)
    fork: bool = False  # its first call said `x-mockllm-fork: true`: it continues its parent's conversation
    forked_after: int = 0  # a fork's parent's calls (served and live) before the fork's first call


@dataclass(frozen=True, slots=True)
class Seed:
    """What a fork inherits: its parent's body lines as written, and their logical events."""

    lines: bytes = b""
    events: tuple[Event, ...] = ()
    projected: bool = False  # the parent's log has no seq/time: the fork's own rows must not either


def continued_log(path: Path, served: int, calls: list[ObservedCall], redactor: Redactor) -> bytes:
    """`path`'s log kept up to the end of its `served`-th recorded call, then `calls`."""
    buf = path.read_bytes()
    log = parse_log(buf, path)
    events = log.events
    recorded = derive_calls(log)
    kept_calls = min(served, len(recorded))
    if kept_calls:
        last = recorded[kept_calls - 1]
        if last.turn is None:
            raise RecordError(f"{path}: its {call_name(kept_calls - 1)} is a compaction; new_episodes cannot continue "
                              "the session after it: re-record the scenario with record mode rewrite")
        end = max(i for i, e in enumerate(events) if e.line <= last.line) + 1
        while end < len(events) and events[end].type in _ANSWER_EVENTS:
            end += 1
    else:
        cut = log.header.cut
        end = next((i for i in range(cut, len(events)) if events[i].type in _CALL_EVENTS), len(events))
    kept = events[:end]
    if kept and end < len(events) and events[end].line == kept[-1].line:
        raise RecordError(f"{path}:{kept[-1].line}: a packed row spans the end of the calls kept; new_episodes "
                          "cannot cut it: re-record the scenario with record mode rewrite")
    state = _state_after(kept, kept_calls > 0)
    rows: list[EventLike] = []
    for call in calls:
        rows += state.call(call, redactor)
    if calls:  # as `mockllm record` ends a log: a step left open for tool results is closed
        rows += state.closing(calls[-1].ended)
    return _lines(buf, kept[-1].line if kept else 1) + encode_rows(rows, projected=log.layout == "projected")


def _state_after(kept: list[Event], in_call: bool) -> SessionEvents:
    """Turn and step numbering after the kept events: mid-turn after a kept call's answer (its step
    and turn are closed by what comes next), else after the last turn the log started."""
    state = SessionEvents(first_seq=kept[-1].seq + 1 if kept else 0)
    chunk = next((e.data for e in reversed(kept) if isinstance(e.data, CallChunk)), None) if in_call else None
    if chunk is not None:
        state.turn, state.step = chunk.turn, chunk.step
        state.turn_open = state.step_open = True
        return state
    for event in kept:
        if event.type == TURN_START and isinstance(event.data, msgspec.Raw):
            turn = msgspec.json.decode(event.data)
            if isinstance(turn, dict) and isinstance(turn.get("turn"), int):
                state.turn = max(state.turn, turn["turn"])
    state.completed, state.completed_turn = state.seq, state.turn
    return state


def _lines(buf: bytes, count: int) -> bytes:
    """The first `count` lines of `buf`, each with its newline."""
    offset = 0
    for _ in range(count):
        found = buf.find(b"\n", offset)
        if found < 0:
            return buf + b"\n"
        offset = found + 1
    return buf[:offset]


def trim_sidecar(path: Path, kept: int) -> None:
    """The primary went live after `kept` calls: only patches of calls before that still apply (the
    live calls take the later positions); no patch left, no sidecar."""
    doc: Any = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict):
        raise RecordError(f"{path}: the primary's whole script is this sidecar's array; new_episodes cannot "
                          "continue it: re-record the scenario with record mode rewrite")
    patches = [p for p in doc.get("patches", []) if isinstance(p, dict) and p.get("at", kept) < kept]
    if patches:
        write_json(path, {**doc, "patches": patches})
    else:
        path.unlink()


def fork_seed(path: Path, calls: int) -> Seed:
    """The seed of a fork of `path`'s session made after its first `calls` own calls: every event up
    to the last `turn/end` by the end of those calls' answers (a fork inherits whole turns; the
    parent's own seed counts too), as `tree.SessionTree` cuts one from a parent being recorded."""
    buf = path.read_bytes()
    log = parse_log(buf, path)
    events = log.events
    recorded = derive_calls(log)
    made = min(calls, len(recorded))
    if made:
        last = recorded[made - 1]
        end = max(i for i, e in enumerate(events) if e.line <= last.line) + 1
        # The step and turn an answer ended are inherited with it.
        while end < len(events) and events[end].type in _ANSWER_ENDS:
            end += 1
    else:
        end = log.header.cut
    ends = [i for i in range(end) if events[i].type == TURN_END]
    if not ends:
        return Seed()
    seed = events[: ends[-1] + 1]
    header_end = buf.find(b"\n") + 1
    return Seed(_lines(buf, seed[-1].line)[header_end:], tuple(seed), log.layout == "projected")


def write_new_session(folder: Path, session: LiveSession, number: int, header: SessionHeader,
                      redactor: Redactor, seed: Seed | None = None) -> str:
    """A session the recording did not have, as child `number` (a fork's log starting with `seed`): its
    file name."""
    seed = seed or Seed()
    state = _state_after(list(seed.events), False) if seed.events else SessionEvents()
    rows: list[EventLike] = []
    for call in session.calls:
        rows += state.call(call, redactor)
    rows += state.closing(session.calls[-1].ended if session.calls else 0)
    file = child_file(number)
    body = seed.lines + encode_rows(rows, projected=seed.projected)
    (folder / file).write_bytes(encode_header(header) + b"\n" + body)
    return file


def next_child_number(folder: Path) -> int:
    """The number after the highest `session.N.jsonl` in `folder`."""
    numbers = [int(m.group(1)) for p in folder.iterdir() if (m := CHILD_FILE.fullmatch(p.name))]
    return max(numbers, default=0) + 1


def has_sidecar(folder: Path) -> bool:
    return (folder / SIDECAR_FILE).is_file()
