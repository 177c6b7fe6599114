"""Derive a session's replay script from its log (pure: no I/O, no HTTP).

The cut is the heart of it: a fork child's log begins with the events it inherited from its parent
(its seed), the parent's model output included. Only events after `seedLength` are the child's
own; deriving from the whole log would serve the child its parent's answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from mockllm.chunks import Block, BlockEnd, BlockStart, FinishChunk, FinishReason, StreamChunk, TokenUsage, UsageChunk
from mockllm.entries import ChunksEntry, Entry
from mockllm.errors import RecordingError
from mockllm.header import SessionKind
from mockllm.recording import CallChunk, Event, SessionLog
from mockllm.sidecar import Sidecar

COMPACTION_EVENT = "compaction/summary"


class _Compaction(msgspec.Struct):
    llmStreamCall: bool = False
    rawOutput: list[Block] = []
    usage: TokenUsage | None = None


_compaction_decoder = msgspec.json.Decoder(_Compaction)


@dataclass(slots=True)
class RecordedCall:
    """One model call found in a log: its chunks and where it was recorded."""

    turn: int | None
    step: int | None
    line: int  # line of the call's last chunk: where a missing `finish` is reported
    chunks: list[StreamChunk] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return bool(self.chunks) and isinstance(self.chunks[-1], FinishChunk)

    @property
    def where(self) -> str:
        return "compaction" if self.turn is None else f"(turn {self.turn}, step {self.step})"


def own_events(log: SessionLog) -> list[Event]:
    """The events this session produced itself: everything after the inherited seed."""
    return log.events[log.header.cut :]


def recorded_calls(events: list[Event], log: SessionLog) -> list[RecordedCall]:
    """Group chunk events into calls by (turn, step), in log order.

    A `finish` closes its call: a later chunk in the same (turn, step) is a provider retry within
    that step and starts the next call.
    """
    calls: list[RecordedCall] = []
    open_calls: dict[tuple[int, int], RecordedCall] = {}
    # The call being extended, and its key: consecutive chunks nearly always share it, so the dict
    # is consulted only when (turn, step) changes. This loop runs once per recorded event.
    current: RecordedCall | None = None
    key = (-1, -1)
    for event in events:
        data = event.data
        if type(data) is CallChunk:
            if current is None or data.turn != key[0] or data.step != key[1]:
                key = (data.turn, data.step)
                current = open_calls.get(key)
                if current is None:
                    current = open_calls[key] = RecordedCall(data.turn, data.step, event.line)
                    calls.append(current)
            current.chunks.append(data.chunk)
            current.line = event.line
            if type(data.chunk) is FinishChunk:
                del open_calls[key]
                current = None
        elif event.type == COMPACTION_EVENT and isinstance(data, msgspec.Raw):
            compaction = _decode_compaction(data, event, log)
            if compaction.llmStreamCall:
                calls.append(RecordedCall(None, None, event.line, _compaction_chunks(compaction)))
    return calls


def derive_calls(log: SessionLog) -> list[RecordedCall]:
    """The session's own recorded calls (after the cut), unvalidated."""
    return recorded_calls(own_events(log), log)


@dataclass(frozen=True, slots=True)
class DerivedScript:
    """What a session replays: its kind and its entries, in call order."""

    kind: SessionKind
    entries: list[Entry]


def derive_script(log: SessionLog | None, sidecar: Sidecar | None, *, primary: bool) -> DerivedScript:
    """A session's replay script, the one place derivation happens (DESIGN.md §2).

    Cut at the seed, group the own chunks into calls, require each call's `finish` unless the
    sidecar replaces that call, apply the sidecar, and name the kind. `log` is None for an
    override-only scenario, whose sidecar is the primary's whole script.
    """
    if log is None:
        if sidecar is None:
            raise ValueError("a script needs a log or a sidecar")
        return DerivedScript("primary", sidecar.apply([]))
    calls = derive_calls(log)
    replaced = sidecar.replaces(len(calls)) if sidecar is not None else set()
    entries = calls_to_entries(calls, log, replaced)
    if sidecar is not None:
        entries = sidecar.apply(entries)
    kind: SessionKind = "primary" if primary else ("fork" if log.header.is_seeded else "spawn")
    return DerivedScript(kind, entries)


def calls_to_entries(calls: list[RecordedCall], log: SessionLog, replaced: set[int]) -> list[Entry]:
    """Turn calls into `chunks` entries; a call with no `finish` is an error unless replaced."""
    for number, call in enumerate(calls):
        if not call.finished and number not in replaced:
            last = type(call.chunks[-1]).__name__ if call.chunks else "nothing"
            raise RecordingError(
                log.path, call.line,
                f"the model call of {call.where} (call {number}) has no final finish chunk "
                f"(it ends with {last}); re-record it, or replace it in replay.override.json",
            )
    return [ChunksEntry(call.chunks) for call in calls]


def _decode_compaction(raw: msgspec.Raw, event: Event, log: SessionLog) -> _Compaction:
    try:
        return _compaction_decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise RecordingError(log.path, event.line, f"compaction/summary data: {exc}") from None


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
        if event.type in ("request/context", "request/header") and isinstance(event.data, msgspec.Raw):
            data = msgspec.json.decode(event.data)
            if not isinstance(data, dict):
                continue
            model = data.get("model") or ((data.get("header") or {}).get("config") or {}).get("model")
            if isinstance(model, str):
                return model
    return None
