"""Write dsh v0 session logs: the counterpart of `reader.py`, used by record mode and by every
generator and test builder, so that no log is written by hand.

The pure part turns a header and a list of events into the log's bytes, in any of the reader's
layouts: one event per line; packed (`pack=True`: a run of 3+ consecutive same-block delta chunks
becomes one `text-chunks` / `reasoning-chunks` / `tool-call-chunks` row with `seq0`, `time0`, `dt`);
projected (`projected=True`: no `seq`/`time`/`seq0`/`time0` on any row). Events are dicts as dsh
writes them (written with their keys in the given order) or the reader's `Event`s.

`SessionWriter` records one live session incrementally; its docstring says what a crash leaves.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import msgspec

from mockllm.dsh.chunks import ToolCallDelta
from mockllm.dsh.header import SessionHeader, encode_header
from mockllm.dsh.names import CHUNK_EVENT, PARTIAL_SUFFIX, REASONING_CHUNKS, TEXT_CHUNKS, TOOL_CALL_CHUNKS
from mockllm.dsh.reader import CallChunk, Event, parse_log
from mockllm.errors import AlreadyRecorded, WriterClosed

Row = Mapping[str, Any]
EventLike = Event | Row

MIN_PACKED_RUN = 3  # shorter runs cost more as a packed row than as plain events

# The delta chunk types a packed row can hold, and which keys each member may carry: a chunk with
# any other key stays a plain event, since a packed row would silently drop it.
_PACKED_TYPE = {"text-delta": TEXT_CHUNKS, "reasoning-delta": REASONING_CHUNKS, "tool-call-delta": TOOL_CALL_CHUNKS}
_TEXT_KEYS = frozenset(("type", "index", "text"))
_PACKABLE_KEYS = {"text-delta": _TEXT_KEYS, "reasoning-delta": _TEXT_KEYS,
                  "tool-call-delta": frozenset(("type", "index", "id", "name", "argumentsDelta"))}
_TIMING = ("seq", "time", "seq0", "time0")

_encoder = msgspec.json.Encoder()


def encode_log(header: SessionHeader, events: Iterable[EventLike], *, pack: bool = False,
               projected: bool = False) -> bytes:
    """The whole log: the header line, then one line per row, each ending in a newline."""
    return encode_header(header) + b"\n" + encode_rows(events, pack=pack, projected=projected)


def encode_rows(events: Iterable[EventLike], *, pack: bool = False, projected: bool = False) -> bytes:
    """Body lines for `events` (no header), packed and/or projected as asked."""
    rows: list[Row] = [_as_row(e) if isinstance(e, Event) else e for e in events]
    if pack:
        rows = pack_rows(rows)
    if projected:
        rows = [{k: v for k, v in row.items() if k not in _TIMING} for row in rows]
    return _encoder.encode_lines(rows)


def pack_rows(rows: Iterable[Row]) -> list[Row]:
    """Replace every run of 3+ consecutive same-block delta chunks with one packed row.

    A run also needs contiguous seq (a packed row's members are seq0+k) and times that the reader's
    running sum time0+dt[0]+…+dt[k-1] gives back exactly (always true for integer ms); otherwise the
    events stay as they are, so packing never changes what a reader gets.
    """
    out: list[Row] = []
    run: list[Row] = []  # consecutive chunk rows of one key
    run_key: tuple[Any, ...] | None = None
    for row in rows:
        key = _run_key(row) if row["type"] == CHUNK_EVENT else None
        if key is not None and key == run_key:
            run.append(row)
            continue
        _end_run(run, out)
        if key is None:
            out.append(row)
            run, run_key = [], None
        else:
            run, run_key = [row], key
    _end_run(run, out)
    return out


def _end_run(run: list[Row], out: list[Row]) -> None:
    if len(run) < MIN_PACKED_RUN:
        out.extend(run)
    elif _one_after_another(run):
        out.append(_packed_row(run))
    else:  # rare: a seq gap, or float times; pack the pieces between the breaks
        start = 0
        for k in range(1, len(run) + 1):
            if k == len(run) or not _follows(run[k - 1], run[k]):
                _end_run(run[start:k], out)
                start = k


def _one_after_another(run: list[Row]) -> bool:
    seqs = [r.get("seq") for r in run]
    first = seqs[0]
    # Checked a run at a time, not a row at a time: this runs for most rows of a large suite.
    if (type(first) is int and seqs == list(range(first, first + len(run)))
            and all(type(r.get("time")) is int for r in run)):
        return True  # integer ms: a running sum of dt is exact
    return all(_follows(a, b) for a, b in itertools.pairwise(run))


def _as_row(event: Event) -> dict[str, Any]:
    # A CallChunk becomes plain data so that packing reads dict and Event rows alike; other data is
    # msgspec.Raw and is written back byte for byte.
    data = _call_chunk_data(event.data) if isinstance(event.data, CallChunk) else event.data
    return {"type": event.type, "seq": event.seq, "time": event.time, "data": data}


def _call_chunk_data(data: CallChunk) -> dict[str, Any]:
    chunk = data.chunk
    if isinstance(chunk, ToolCallDelta):
        # dsh's key order, and `argumentsDelta` even when empty (the struct omits its default): the
        # line then comes back as dsh wrote it.
        out: dict[str, Any] = {"type": "tool-call-delta", "index": chunk.index}
        if chunk.id is not None:
            out["id"] = chunk.id
        if chunk.name is not None:
            out["name"] = chunk.name
        out["argumentsDelta"] = chunk.argumentsDelta
    else:
        out = msgspec.to_builtins(chunk)
    return {"turn": data.turn, "step": data.step, "chunk": out}


def _run_key(row: Row) -> tuple[Any, ...] | None:
    """Chunk rows with equal keys, one after another, may share one packed row."""
    data = row["data"]
    chunk = data["chunk"]
    kind = chunk["type"]
    allowed = _PACKABLE_KEYS.get(kind)
    if allowed is None or not allowed.issuperset(chunk):
        return None
    return data["turn"], data["step"], kind, chunk["index"], chunk.get("id"), chunk.get("name")


def _follows(prev: Row, row: Row) -> bool:
    prev_seq, seq = prev.get("seq"), row.get("seq")
    if seq != (None if prev_seq is None else prev_seq + 1):
        return False
    prev_time, time = prev.get("time"), row.get("time")
    if prev_time is None or time is None:
        return prev_time is time  # both unknown (projected): still one run
    return bool(prev_time + (time - prev_time) == time)  # float ms may not survive a running sum


def _packed_row(run: Sequence[Row]) -> dict[str, Any]:
    first = run[0]
    data0, chunk = first["data"], first["data"]["chunk"]
    time0 = first.get("time")
    dt = [] if time0 is None else [b["time"] - a["time"] for a, b in itertools.pairwise(run)]
    data: dict[str, Any] = {"turn": data0["turn"], "step": data0["step"], "index": chunk["index"], "dt": dt}
    if chunk["type"] == "tool-call-delta":
        if chunk.get("id") is not None:
            data["id"] = chunk["id"]
        if chunk.get("name") is not None:
            data["name"] = chunk["name"]
        data["args"] = [r["data"]["chunk"].get("argumentsDelta", "") for r in run]
    else:
        data["texts"] = [r["data"]["chunk"]["text"] for r in run]
    row: dict[str, Any] = {"type": _PACKED_TYPE[chunk["type"]]}
    if "seq" in first:
        row["seq0"] = first["seq"]
    if "time" in first:
        row["time0"] = time0
    row["data"] = data
    return row


def write_log(path: Path, header: SessionHeader, events: Iterable[EventLike], *, pack: bool = False,
              projected: bool = False) -> Path:
    """Write a whole log at once (generators, tests); it appears under its name only when complete.

    Not fsync'd: this guards readers against a half-written file, not against power loss.
    """
    content = encode_log(header, events, pack=pack, projected=projected)
    partial = partial_path(path)
    partial.write_bytes(content)
    os.replace(partial, path)
    return path


def partial_path(path: Path) -> Path:
    """Where a log is written until it is complete. Loaders ignore it: it is no `session*.jsonl`."""
    return path.with_name(path.name + PARTIAL_SUFFIX)


class SessionWriter:
    """Record one live session's log incrementally (record mode), one batch of events at a time.

    Crash safety. The log is written to `<name>.partial` and renamed to `<name>` by `close()`, after
    its last write. So a file under a session's name is always a complete log: a crash, or an
    exception inside `with SessionWriter(...)`, never leaves a valid-looking truncated log in a tree
    (loaders do not read `.partial` files). Inside the partial file, the header and then every batch
    (normally one whole model call, chunks through `finish`) is written as complete lines in one
    write, flushed and fsync'd before `append` returns: after a crash the partial file holds every
    finished batch intact, followed at most by part of the batch in flight. `recover()` salvages it:
    it drops a torn last line, checks that the rest reads as a log, and renames it into place, so a
    crash loses at most the calls in flight. (Should the system have persisted a line-aligned part of
    the batch in flight, that call lacks its `finish` and deriving the script reports it, naming the
    file and its (turn, step): a loud error, never a silently shorter call.)

    Packing (`pack=True`) works per batch: a packed run never spans two calls anyway, since its
    members share one (turn, step) and one block.

    A recorder that learns a session's place in its tree only at the end (record mode infers
    lineage from what later requests carry) closes it under another name and header:
    `close(path=…, header=…)`. The log is then written anew there (`<name>.finishing`, fsync'd,
    renamed) and the partial file removed, so every named log is still complete.
    """

    def __init__(self, path: Path, header: SessionHeader, *, pack: bool = False, durable: bool = True) -> None:
        """`durable=False`: batches are not fsync'd one by one, only the log when it is closed (a log
        in a folder that is renamed into place once complete, where a crash leaves nothing to salvage)."""
        self.path = path
        self.partial = partial_path(path)
        self.pack = pack
        self.durable = durable
        self.events_written = 0  # logical events so far: the next event's seq, when seq is contiguous
        if path.exists():
            raise AlreadyRecorded(f"{path}: a session log is already recorded there; record into a new folder")
        try:
            # Exclusive: a leftover partial is a crashed recording to recover or delete, not to overwrite.
            self._file = self.partial.open("xb")
        except FileExistsError:
            raise AlreadyRecorded(
                f"{self.partial}: a crashed recording was left here; salvage it with "
                "mockllm.dsh.writer.recover() or delete it") from None
        self._abandoned = False
        self._header = encode_header(header)
        self._write(self._header + b"\n")
        _fsync_dir(self.partial.parent)  # the partial file's name must survive a crash too

    def append(self, events: Sequence[EventLike]) -> None:
        """Write one batch durably (complete lines, one write, fsync'd); normally a whole call."""
        if self._file.closed:
            raise WriterClosed(f"{self.partial}: append after {'abandon' if self._abandoned else 'close'}")
        if events:
            self._write(encode_rows(events, pack=self.pack))
            self.events_written += len(events)

    def close(self, *, path: Path | None = None, header: SessionHeader | None = None) -> Path:
        """End the recording: the log takes its name, or `path` with line 0 replaced by `header` when
        either is given and differs. Closing again does nothing."""
        if self._abandoned:
            raise WriterClosed(f"{self.partial}: the recording was abandoned and may be torn; see recover()")
        if self._file.closed:
            return self.path
        if not self.durable:
            os.fsync(self._file.fileno())
        self._file.close()
        target = path or self.path
        line = encode_header(header) if header is not None else self._header
        if target == self.path and line == self._header:
            os.replace(self.partial, self.path)
        else:
            if target.exists():
                raise AlreadyRecorded(f"{target}: a session log is already recorded there; not replacing it")
            _rewrite(self.partial, target, line)
            self.path = target
        _fsync_dir(self.path.parent)
        return self.path

    def abandon(self) -> None:
        """Stop writing and keep the partial file as it is (what a crash leaves, for `recover`)."""
        self._abandoned = True
        self._file.close()

    def __enter__(self) -> SessionWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        # A session that did not end normally keeps its `.partial` name: it may be incomplete.
        if exc_type is None:
            self.close()
        else:
            self.abandon()

    def _write(self, data: bytes) -> None:
        try:
            self._file.write(data)
            self._file.flush()
            if self.durable:
                os.fsync(self._file.fileno())
        except BaseException:
            # Part of the batch may be in the file (a full disk, an interrupt): it must not be named.
            self.abandon()
            raise


def _rewrite(partial: Path, target: Path, header_line: bytes) -> None:
    """`partial`'s body under a new header line, as `target`; then `partial` is removed.

    Through `<target>.finishing` (never a `.partial` name: another session's log being recorded
    may hold that one), so that `target` appears only complete. Copied in blocks: a log may be large.
    """
    finishing = target.with_name(target.name + ".finishing")
    with partial.open("rb") as source, finishing.open("wb") as out:
        source.readline()  # the old header
        out.write(header_line + b"\n")
        shutil.copyfileobj(source, out, 1 << 20)
        out.flush()
        os.fsync(out.fileno())
    os.replace(finishing, target)
    partial.unlink()


def recover(partial: Path) -> Path:
    """Salvage a crashed recording's `<name>.partial`: keep its complete lines, rename it to `<name>`.

    Raises RecordingError (naming the line) if what is left is not a readable log, e.g. the crash
    came before the header was written; the partial file is then left as it was.
    """
    if not partial.name.endswith(PARTIAL_SUFFIX):
        raise ValueError(f"{partial}: not a partial recording (no {PARTIAL_SUFFIX} suffix)")
    final = partial.with_name(partial.name[: -len(PARTIAL_SUFFIX)])
    buf = partial.read_bytes()
    complete = buf[: buf.rfind(b"\n") + 1]  # a torn last line has no newline yet
    parse_log(complete, final)
    if final.exists():
        raise AlreadyRecorded(f"{final}: already exists; not replacing it with {partial.name}")
    with partial.open("r+b") as f:
        f.truncate(len(complete))
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, final)
    _fsync_dir(final.parent)
    return final


def _fsync_dir(folder: Path) -> None:
    """Make a file's creation or rename durable (POSIX: a directory is fsync'd through an fd)."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

