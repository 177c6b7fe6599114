"""Derive a session's replay script from its log (pure: no I/O, no HTTP).

The cut is the heart of it: a fork child's log begins with the events it inherited from its parent
(its seed), the parent's model output included. Only events after `seedLength` are the child's
own; deriving from the whole log would serve the child its parent's answers.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from mockllm.dsh.chunks import (
    Block,
    BlockEnd,
    BlockStart,
    FinishChunk,
    FinishReason,
    StreamChunk,
    TokenUsage,
    UsageChunk,
)
from mockllm.dsh.header import SessionKind
from mockllm.dsh.names import (
    COMPACTION_EVENT,
    REQUEST_CONTEXT,
    REQUEST_HEADER,
    SIDECAR_FILE,
    STEP_START,
    TOOL_RESULT,
    USER_MESSAGE,
)
from mockllm.dsh.reader import CallChunk, Event, SessionLog, read_log
from mockllm.errors import RecordingError
from mockllm.script.entries import ChunksEntry, Entry
from mockllm.script.inputs import RecordedInputs
from mockllm.script.sidecar import Sidecar

_INPUT_EVENTS = (USER_MESSAGE, TOOL_RESULT)
# The events besides chunks read here.
_NOTED = frozenset((USER_MESSAGE, TOOL_RESULT, STEP_START, COMPACTION_EVENT, REQUEST_HEADER))
# A system prompt dsh's fixtures template away (`"system": "{{system}}"`): no prompt to compare.
_PLACEHOLDER = re.compile(r"\{\{[\w:.-]+\}\}")


class _Compaction(msgspec.Struct):
    llmStreamCall: bool = False
    rawOutput: list[Block] = []
    usage: TokenUsage | None = None


_compaction_decoder = msgspec.json.Decoder(_Compaction)


@dataclass(slots=True)
class RecordedCall:
    """One model call found in a log: its chunks, what the agent sent before it, and when."""

    turn: int | None
    step: int | None
    line: int  # line of the call's last chunk: where a missing `finish` is reported
    chunks: list[StreamChunk] = field(default_factory=list)
    inputs: RecordedInputs | None = None
    system: str | None = None  # the system prompt a `request/header` logged since the last call names
    tools: frozenset[str] | None = None  # the names of the tools that header says the request offered
    # When the call started (its step's start, or the end of the call it retries) and each chunk's
    # time, epoch ms; None for a projected log, which records no times.
    started: float | None = None
    times: array[float] | None = None

    @property
    def finished(self) -> bool:
        return bool(self.chunks) and isinstance(self.chunks[-1], FinishChunk)

    @property
    def where(self) -> str:
        return "compaction" if self.turn is None else f"(turn {self.turn}, step {self.step})"


def own_events(log: SessionLog) -> list[Event]:
    """The events this session produced itself: everything after the inherited seed."""
    return log.events[log.header.cut :]


def recorded_calls(events: list[Event], log: SessionLog, *, with_times: bool = False) -> list[RecordedCall]:
    """Group chunk events into calls by (turn, step), in log order, with each call's inputs (and,
    `with_times`, when it started and each chunk's time: only pacing needs those, so a load does
    not pay for them; see `call_timings`).

    A `finish` closes its call: a later chunk in the same (turn, step) is a provider retry within
    that step and starts the next call.
    """
    calls: list[RecordedCall] = []
    open_calls: dict[tuple[int, int], RecordedCall] = {}
    # The call being extended, and its key: consecutive chunks nearly always share it, so the dict
    # is consulted only when (turn, step) changes. This loop runs once per recorded event, so the
    # per-chunk work is two bound appends; a call's last line is set when it is left.
    current: RecordedCall | None = None
    key = (-1, -1)
    add_chunk: Callable[[StreamChunk], None] = _ignore
    add_time: Callable[[Any], None] = _ignore
    timed = False  # whether the current call keeps times
    last_line = 0
    kinds: list[str] = []  # input events logged since the last call started, undecoded
    raws: list[bytes] = []
    started: float | None = None
    system: str | None = None
    tools: frozenset[str] | None = None
    for event in events:
        data = event.data
        if type(data) is CallChunk:
            if current is None or data.turn != key[0] or data.step != key[1]:
                if current is not None:
                    current.line = last_line
                key = (data.turn, data.step)
                current = open_calls.get(key)
                if current is None:
                    current = open_calls[key] = RecordedCall(
                        data.turn, data.step, event.line, inputs=RecordedInputs.of(kinds, raws), system=system,
                        tools=tools,                        started=started if started is not None else event.time,
                        times=array("d") if with_times and event.time is not None else None)
                    kinds.clear()
                    raws.clear()
                    system = tools = None
                    calls.append(current)
                add_chunk = current.chunks.append
                timed = current.times is not None
                if current.times is not None:
                    add_time = current.times.append
            add_chunk(data.chunk)
            if timed:
                add_time(event.time)
            last_line = event.line
            if type(data.chunk) is FinishChunk:
                current.line = last_line
                del open_calls[key]
                current = None
                started = event.time  # a retry inside the step starts when this call ended
        elif event.type not in _NOTED:
            continue  # most other events: one set lookup
        elif event.type in _INPUT_EVENTS and isinstance(data, msgspec.Raw):
            kinds.append(event.type)
            raws.append(bytes(data))
        elif event.type == STEP_START:
            started = event.time
        elif event.type == REQUEST_HEADER and isinstance(data, msgspec.Raw):
            system, tools = _header_of(data)
        elif event.type == COMPACTION_EVENT and isinstance(data, msgspec.Raw):
            compaction = _decode_compaction(data, event, log)
            if compaction.llmStreamCall:
                calls.append(RecordedCall(None, None, event.line, _compaction_chunks(compaction),
                                          RecordedInputs.of(kinds, raws)))
                kinds.clear()
                raws.clear()
    if current is not None:
        current.line = last_line
    return calls


def _header_of(raw: msgspec.Raw) -> tuple[str | None, frozenset[str] | None]:
    """The system prompt and offered tools' names a `request/header` event names
    (`{"header": {"system": …, "tools": […]}}`), where it names them: `tools` as names (what
    `mockllm record` writes) or as tool definitions (`{"name"}`, `{"function": {"name"}}`)."""
    try:
        data = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None, None
    header = data.get("header") if isinstance(data, dict) else None
    if not isinstance(header, dict):
        return None, None
    system = header.get("system")
    return (system if isinstance(system, str) and not _PLACEHOLDER.fullmatch(system) else None,
            _tool_names(header.get("tools")))


def _tool_names(tools: Any) -> frozenset[str] | None:
    if not isinstance(tools, list):  # absent, or dsh's fixtures' `"{{tools}}"` placeholder
        return None
    names = set()
    for tool in tools:
        if isinstance(tool, dict):
            function = tool.get("function")
            tool = function.get("name") if isinstance(function, dict) else tool.get("name")
        if isinstance(tool, str):
            names.add(tool)
    return frozenset(names)


def _ignore(value: object) -> None:
    """Stands in for an append where nothing is kept (a projected log has no times)."""


def derive_calls(log: SessionLog, *, with_times: bool = False) -> list[RecordedCall]:
    """The session's own recorded calls (after the cut), unvalidated."""
    return recorded_calls(own_events(log), log, with_times=with_times)


def call_timings(path: Path) -> list[Timing | None]:
    """When each of the session's own recorded calls came, read again from its log: pacing is the
    only reader, and most servers never pace, so a load keeps no times."""
    return [_timing(call) for call in derive_calls(read_log(path), with_times=True)]


@dataclass(frozen=True, slots=True)
class DerivedScript:
    """What a session replays: its kind and its entries, in call order, and for each entry what the
    agent sent before it (None: nothing recorded, e.g. an appended sidecar entry) and which
    recorded call's times it keeps (None: an entry the sidecar replaced or appended)."""

    kind: SessionKind
    entries: list[Entry]
    inputs: list[RecordedInputs | None]
    timed: list[int | None]  # per entry, the recorded call whose times it replays (None: scripted)
    system: str | None = None  # the system prompt of its first recorded call, when the log names it
    tools: frozenset[str] | None = None  # the names of the tools its first recorded call offered, when named


class Timing(msgspec.Struct, gc=False, frozen=True):
    """When a recorded call's chunks came, in epoch ms: its start (the step's) and each chunk's time.

    Untracked by the cyclic collector, as RecordedInputs is: one is kept per recorded call."""

    started: float
    times: array[float]


def derive_script(log: SessionLog | None, sidecar: Sidecar | None, *, primary: bool) -> DerivedScript:
    """A session's replay script, the one place derivation happens (DESIGN.md §2).

    Cut at the seed, group the own chunks into calls, require each call's `finish` unless the
    sidecar replaces that call, apply the sidecar, and name the kind. `log` is None for an
    override-only scenario, whose sidecar is the primary's whole script.
    """
    if log is None:
        if sidecar is None:
            raise ValueError("a script needs a log or a sidecar")
        entries = sidecar.apply([])
        return DerivedScript("primary", entries, [None] * len(entries), [None] * len(entries))
    calls = derive_calls(log)
    replaced = sidecar.replaces(len(calls)) if sidecar is not None else set()
    entries = calls_to_entries(calls, log, replaced)
    if sidecar is not None:
        entries = sidecar.apply(entries)
    # What the agent sent before call N is in the log whatever the sidecar scripts for call N; the
    # chunks' times only describe an entry the sidecar left as recorded.
    inputs: list[RecordedInputs | None] = [calls[n].inputs if n < len(calls) else None for n in range(len(entries))]
    timed: list[int | None] = [n if n < len(calls) and n not in replaced else None for n in range(len(entries))]
    kind: SessionKind = "primary" if primary else ("fork" if log.header.is_seeded else "spawn")
    first = calls[0] if calls else None
    return DerivedScript(kind, entries, inputs, timed, first.system if first else None,
                         first.tools if first else None)


def _timing(call: RecordedCall) -> Timing | None:
    if call.times is None or call.started is None:
        return None
    return Timing(call.started, call.times)


def calls_to_entries(calls: list[RecordedCall], log: SessionLog, replaced: set[int]) -> list[Entry]:
    """Turn calls into `chunks` entries; a call with no `finish` is an error unless replaced."""
    for number, call in enumerate(calls):
        if not call.finished and number not in replaced:
            last = type(call.chunks[-1]).__name__ if call.chunks else "nothing"
            raise RecordingError(
                log.path, call.line,
                f"the model call of {call.where} (call {number}, 0-based) has no final finish chunk "
                f"(it ends with {last}); re-record it, or replace it in {SIDECAR_FILE}",
            )
    return [ChunksEntry(call.chunks) for call in calls]


def _decode_compaction(raw: msgspec.Raw, event: Event, log: SessionLog) -> _Compaction:
    try:
        return _compaction_decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise RecordingError(log.path, event.line, f"{COMPACTION_EVENT} data: {exc}") from None


def _compaction_chunks(compaction: _Compaction) -> list[StreamChunk]:
    """A compaction made by a streamed model call replays as one block per rawOutput block."""
    chunks: list[StreamChunk] = []
    for index, block in enumerate(compaction.rawOutput):
        chunks.append(BlockStart(index, block.type))
        chunks.append(BlockEnd(index, block))
    if compaction.usage is not None:
        chunks.append(UsageChunk(compaction.usage))
    chunks.append(FinishChunk(FinishReason("stop")))
    return chunks


def recorded_model(log: SessionLog) -> str | None:
    """The model the session called, from its first `request/context` or `request/header` event."""
    for event in log.events:
        if event.type in (REQUEST_CONTEXT, REQUEST_HEADER) and isinstance(event.data, msgspec.Raw):
            data = msgspec.json.decode(event.data)
            if not isinstance(data, dict):
                continue
            model = data.get("model") or ((data.get("header") or {}).get("config") or {}).get("model")
            if isinstance(model, str):
                return model
    return None
