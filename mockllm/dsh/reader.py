"""Read one dsh session log (JSONL) into its header and its list of logical events.

Physical rows come in three layouts: one event per line; packed rows (a run of same-block delta
chunks stored in one line, expanded here into one `assistant/chunk` event per member); and
projected rows (no `seq`/`time`, given contiguous seq from 0). A file is projected or not, never
both. Unknown event types are kept with their data undecoded: the format grows, readers must not
break on it.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec

from mockllm.dsh.chunks import ReasoningDelta, StreamChunk, TextDelta, ToolCallDelta
from mockllm.dsh.header import SessionHeader, parse_header
from mockllm.dsh.names import CHUNK_EVENT, PACKED_TYPES, TEXT_CHUNKS, TOOL_CALL_CHUNKS
from mockllm.errors import HeaderError, RecordingError

Layout = Literal["full", "projected"]


class CallChunk(msgspec.Struct, gc=False):
    """`data` of an `assistant/chunk` event: one chunk of the model call made in (turn, step)."""

    turn: int
    step: int
    chunk: StreamChunk


class Event(msgspec.Struct, gc=False):
    """One logical event. `data` is a CallChunk for chunk events, else the undecoded JSON."""

    type: str
    seq: int
    time: int | float | None
    line: int
    data: CallChunk | msgspec.Raw


class _Row(msgspec.Struct, gc=False):
    type: str
    seq: int | None = None
    time: int | float | None = None
    seq0: int | None = None
    time0: int | float | None = None
    data: msgspec.Raw = msgspec.Raw(b"null")


class _PackedTexts(msgspec.Struct, gc=False):
    turn: int
    step: int
    index: int
    texts: list[str]
    dt: list[int | float] = []


class _PackedToolCall(msgspec.Struct, gc=False):
    turn: int
    step: int
    index: int
    args: list[str]
    id: str | None = None
    name: str | None = None
    dt: list[int | float] = []


_row_decoder = msgspec.json.Decoder(_Row)
_chunk_decoder = msgspec.json.Decoder(CallChunk)
_texts_decoder = msgspec.json.Decoder(_PackedTexts)
_tool_call_decoder = msgspec.json.Decoder(_PackedToolCall)


@dataclass(slots=True)
class SessionLog:
    path: Path
    header: SessionHeader
    events: list[Event]
    layout: Layout
    lines: int  # physical body lines, for display: packed rows make this smaller than events


def read_log(path: Path) -> SessionLog:
    """Read and validate one session log; every error names `file:line`."""
    try:
        buf = path.read_bytes()
    except OSError as exc:
        raise RecordingError(path, None, f"cannot read: {exc.strerror}") from None
    return parse_log(buf, path)


def parse_log(buf: bytes, path: Path) -> SessionLog:
    header_end = buf.find(b"\n")
    header_line = buf if header_end < 0 else buf[:header_end]
    if not header_line.strip():
        raise RecordingError(path, 1, 'empty log: expected a session header {"type":"session","version":0,…}')
    try:
        header = parse_header(header_line)
    except HeaderError as exc:
        raise RecordingError(path, 1, str(exc)) from None
    rows, line_numbers = _decode_rows(buf, header_end, path)

    events: list[Event] = []
    append = events.append
    layout: Layout | None = None
    for lineno, row in zip(line_numbers, rows, strict=True):
        row_layout: Layout = "full" if (row.seq is not None or row.seq0 is not None) else "projected"
        if row_layout != layout:
            if layout is not None:
                raise RecordingError(
                    path, lineno,
                    f"mixed layout: this row is {row_layout} but earlier rows are {layout} "
                    "(a file either has seq/time on every row or on none)",
                )
            layout = row_layout
        kind = row.type
        seq = row.seq if row.seq is not None else len(events)
        if kind == CHUNK_EVENT:  # the common row first: this loop runs once per recorded event
            try:
                data = _chunk_decoder.decode(row.data)
            except msgspec.DecodeError as exc:
                expected = f"{CHUNK_EVENT} data {{turn, step, chunk}}"
                raise RecordingError(path, lineno, _describe(exc, expected)) from None
            append(Event(CHUNK_EVENT, seq, row.time, lineno, data))
        elif kind in PACKED_TYPES:
            _expand_packed(row, lineno, path, events)
        else:
            # One shared str per event type: a million events must not hold a million copies of "turn/start".
            append(Event(sys.intern(kind), seq, row.time, lineno, row.data))

    if header.cut > len(events):
        raise RecordingError(
            path, 1,
            f"seedLength {header.cut} is past the end of the log ({len(events)} logical events); "
            "seedLength counts logical events, packed rows expanded",
        )
    return SessionLog(path, header, events, layout or "full", len(rows))


def _decode_rows(buf: bytes, header_end: int, path: Path) -> tuple[list[_Row], Sequence[int]]:
    """Decode every body line, with the 1-based line number of each.

    The fast path decodes the whole body in one call, its raw `data` pointing into `buf` (no
    per-line copies: loading stays near the file's size in memory). Blank lines would shift the
    line numbers and a malformed line needs its own, so those files take the line-by-line path.
    """
    if header_end < 0:
        return [], []
    body = memoryview(buf)[header_end + 1 :]
    decoded: list[_Row] | None
    try:
        decoded = _row_decoder.decode_lines(body)
    except msgspec.DecodeError:
        decoded = None  # the slow path below names the line
    # decode_lines skips blank and whitespace-only lines: numbering is only right when every
    # physical line gave one row.
    if decoded is not None and len(decoded) == _count_lines(buf, header_end + 1):
        return decoded, range(2, 2 + len(decoded))
    rows = []
    numbers: list[int] = []
    for lineno, line in enumerate(bytes(body).splitlines(), start=2):
        if not line.strip():
            continue  # a trailing or stray blank line carries nothing
        try:
            rows.append(_row_decoder.decode(line))
        except msgspec.DecodeError as exc:
            expected = 'an event {"type","seq","time","data"}'
            raise RecordingError(path, lineno, _describe(exc, expected)) from None
        numbers.append(lineno)
    return rows, numbers


def _count_lines(buf: bytes, start: int) -> int:
    """Physical lines in `buf[start:]`; a last line without its newline still counts."""
    unterminated = len(buf) > start and not buf.endswith(b"\n")
    return buf.count(b"\n", start) + unterminated


def _expand_packed(row: _Row, lineno: int, path: Path, events: list[Event]) -> None:
    """Expand a packed row into one assistant/chunk event per member (seq0+k, time0+sum(dt[:k]))."""
    packed: _PackedToolCall | _PackedTexts
    try:
        if row.type == TOOL_CALL_CHUNKS:
            packed = _tool_call_decoder.decode(row.data)
        else:
            packed = _texts_decoder.decode(row.data)
    except msgspec.DecodeError as exc:
        raise RecordingError(path, lineno, _describe(exc, f"{row.type} data")) from None
    pieces = packed.args if isinstance(packed, _PackedToolCall) else packed.texts
    if len(packed.dt) < len(pieces) - 1 and row.time0 is not None:
        raise RecordingError(
            path, lineno,
            f"{row.type}: {len(pieces)} members need at least {len(pieces) - 1} dt values, got {len(packed.dt)}",
        )
    seq = row.seq0 if row.seq0 is not None else len(events)
    turn, step, index = packed.turn, packed.step, packed.index
    times: Iterable[int | float | None]
    if row.time0 is None:
        times = itertools.repeat(None)
    else:
        times = itertools.accumulate(packed.dt[: len(pieces) - 1], initial=row.time0)
    chunks: Iterable[StreamChunk]
    if isinstance(packed, _PackedToolCall):
        call_id, name = packed.id, packed.name
        chunks = (ToolCallDelta(index, piece, call_id, name) for piece in pieces)
    else:
        delta = TextDelta if row.type == TEXT_CHUNKS else ReasoningDelta
        chunks = (delta(index, piece) for piece in pieces)
    events.extend(
        Event(CHUNK_EVENT, seq + k, time, lineno, CallChunk(turn, step, chunk))
        for k, (time, chunk) in enumerate(zip(times, chunks, strict=False))
    )


def _describe(exc: msgspec.DecodeError, expected: str) -> str:
    text = str(exc)
    if text.startswith("JSON is malformed") or text.startswith("Input data was truncated"):
        return f"malformed JSON ({text}); expected {expected}"
    return f"{text}; expected {expected}"
