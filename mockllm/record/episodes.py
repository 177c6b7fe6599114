"""new_episodes, written: the scenario as it was, with each session that went live continued by its
live calls, and each session the recording did not have added as a child.

A session that went live after being served K recorded calls keeps its log as recorded up to the
end of call K's answer (the header and those lines byte for byte), then its live calls, written as
`mockllm record` writes calls (`events.SessionEvents`), numbered on from there: the open step and
turn are closed by the first live call's rows, as dsh would have closed them. A primary's sidecar
keeps only the patches of the calls it kept. Sessions the run did not take live are not read.

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
    STEP_START,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_START,
    USER_MESSAGE,
    child_file,
)
from mockllm.dsh.reader import CallChunk, Event, parse_log
from mockllm.dsh.writer import EventLike, encode_rows
from mockllm.errors import RecordError
from mockllm.record.call import ObservedCall
from mockllm.record.events import SessionEvents
from mockllm.record.redact import Redactor
from mockllm.record.side import write_json
from mockllm.script.derive import derive_calls

# What follows a call's last chunk and still belongs to its answer, as `mockllm record` writes it.
_ANSWER_EVENTS = frozenset((ASSISTANT_MESSAGE, TOOL_CALL))
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
            raise RecordError(f"{path}: its call {kept_calls} is a compaction; new_episodes cannot continue "
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


def write_new_session(folder: Path, session: LiveSession, number: int, header: SessionHeader,
                      redactor: Redactor) -> str:
    """A session the recording did not have, as child `number`: its file name."""
    state = SessionEvents()
    rows: list[EventLike] = []
    for call in session.calls:
        rows += state.call(call, redactor)
    rows += state.closing(session.calls[-1].ended if session.calls else 0)
    file = child_file(number)
    (folder / file).write_bytes(encode_header(header) + b"\n" + encode_rows(rows))
    return file


def next_child_number(folder: Path) -> int:
    """The number after the highest `session.N.jsonl` in `folder`."""
    numbers = [int(m.group(1)) for p in folder.iterdir() if (m := CHILD_FILE.fullmatch(p.name))]
    return max(numbers, default=0) + 1


def has_sidecar(folder: Path) -> bool:
    return (folder / SIDECAR_FILE).is_file()
