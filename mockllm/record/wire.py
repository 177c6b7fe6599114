"""What a recorder keeps of the provider's own answer, beside the logs: `envelopes.jsonl`.

One line per recorded call that ended as it should (`wire.recorded.WireCall`): its session's id
and its number among the session's own calls, the dialect, the model, and the events (or the
whole answer) as the provider sent them, masked as the logs are. A call that failed, was cut,
or that the agent cancelled keeps no line: its replay is rendered from its chunks, as before.

Masking must not leave anything in the line the log does not hold: a secret split across two
deltas is masked across them in the log (`redact_chunks`), but each event is masked on its own.
So with `--redact` or `--cwd`, the masked events are decoded again, and a line whose events no
longer say exactly what the log says keeps only the model.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from mockllm.dsh.chunks import FinishChunk
from mockllm.record.call import ObservedCall
from mockllm.record.redact import Redactor, redact_chunks
from mockllm.scenario.envelopes import ENVELOPES_FILE, WireCall
from mockllm.wire import dialect_named
from mockllm.wire.recorded import says, wire_call

_encode = msgspec.json.encode


def kept_wire(session: str, number: int, call: ObservedCall, redactor: Redactor) -> WireCall | None:
    """The line to keep for call `number` of `session`, or None (nothing to keep)."""
    last = call.chunks[-1].chunk if call.chunks else None
    if call.dialect is None or not isinstance(last, FinishChunk) or last.reason.kind in ("error", "aborted"):
        return None
    dialect = dialect_named(call.dialect)
    wire = wire_call(session, number, call.dialect, call.events, call.body)
    if wire is None or dialect is None:
        return None
    if redactor:
        stream = None if wire.stream is None else [(name, redactor.value(data)) for name, data in wire.stream]
        wire = msgspec.structs.replace(wire, stream=stream, body=redactor.value(wire.body),
                                       model=redactor.value(wire.model))
        if says(dialect, wire, redact_chunks(redactor, [c.chunk for c in call.chunks])) is None:
            return WireCall(session, number, call.dialect, wire.model)
    return wire


def keep_wire(path: Path, session: str, number: int, call: ObservedCall, redactor: Redactor, durable: bool) -> None:
    """`kept_wire`, appended to `path` if there is one (on a recorder's writer thread)."""
    wire = kept_wire(session, number, call, redactor)
    if wire is not None:
        append_wire(path, wire, durable)


def append_wire(path: Path, wire: WireCall, durable: bool) -> None:
    """One line appended (and, `durable`, on disk before the next call's)."""
    with path.open("ab") as out:
        out.write(_encode(wire) + b"\n")
        out.flush()
        if durable:
            os.fsync(out.fileno())


class _Key(msgspec.Struct):
    session: str
    call: int


_key = msgspec.json.Decoder(_Key)


def continue_wires(folder: Path, cut: dict[str, int], added: list[WireCall]) -> None:
    """`envelopes.jsonl` of a scenario whose sessions were continued (new_episodes): the lines
    of session S's calls from `cut[S]` on dropped (its log no longer holds them), `added` after."""
    path = folder / ENVELOPES_FILE
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        lines = []
    kept = []
    for line in lines:
        try:
            key = _key.decode(line)
        except msgspec.DecodeError:
            continue  # a broken line was reported when the scenario was loaded; it is not carried on
        if key.call < cut.get(key.session, key.call + 1):
            kept.append(line + b"\n")
    kept += [_encode(wire) + b"\n" for wire in added]
    if kept:
        path.write_bytes(b"".join(kept))
