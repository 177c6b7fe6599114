"""The log writer: the reader's counterpart, round-tripping real logs, and record mode's crash safety."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mockllm.dsh.chunks import TextDelta
from mockllm.dsh.header import InheritedEventCount, SessionHeader
from mockllm.dsh.names import PACKED_TYPES
from mockllm.dsh.reader import Event, SessionLog, parse_log, read_log
from mockllm.dsh.writer import SessionWriter, encode_log, partial_path, recover, write_log
from mockllm.errors import RecordingError
from mockllm.scenario.load import is_scenario, load_scenario
from mockllm.script.derive import calls_to_entries, derive_calls
from mockllm.script.entries import ChunksEntry
from tests.logbuilder import chunk_rows, corpus_params, header, stamped, text_call, turn_rows

RECORDINGS = Path(__file__).resolve().parents[1] / "recordings"
# Row fields the reader models; a corpus row with others (dsh's `surfaceOp`, `sourceEventSeqs`)
# loses them on reading, so only the logical events can come back for it, not its bytes.
MODELLED_ROW_KEYS = {"type", "seq", "time", "seq0", "time0", "data"}

Row = dict[str, Any]


def logical(log: SessionLog) -> list[tuple[str, int, int | float | None, bytes]]:
    """What a reader gets from a log, with each event's data as JSON."""
    return [(e.type, e.seq, e.time, msgspec.json.encode(e.data)) for e in log.events]


def rewrite(log: SessionLog) -> bytes:
    """Write a log back in its own layout: packed where it had packed rows, projected if it was."""
    packed = log.lines < len(log.events)
    return encode_log(log.header, log.events, pack=packed, projected=log.layout == "projected")


def body(buf: bytes) -> list[Row]:
    return [json.loads(line) for line in buf.splitlines()[1:]]


# --- round trips on real logs ---------------------------------------------------------------------

CORPUS_LOGS = corpus_params("*/*/session*.jsonl")


@pytest.mark.parametrize("path", CORPUS_LOGS)
def test_corpus_log_round_trips(path: Path) -> None:
    log = read_log(path)
    out = rewrite(log)
    again = parse_log(out, path)
    assert out.split(b"\n", 1)[0] == path.read_bytes().split(b"\n", 1)[0]  # the header, byte for byte
    assert (again.header.is_seeded, again.header.cut, again.header.kind) == (
        log.header.is_seeded, log.header.cut, log.header.kind)
    assert logical(again) == logical(log)
    # Same layout, and the packing rule is dsh's: the same runs become packed rows.
    assert (again.layout, again.lines) == (log.layout, log.lines)
    assert rewrite(again) == out


@pytest.mark.parametrize("path", CORPUS_LOGS)
def test_corpus_rows_the_reader_models_come_back_byte_for_byte(path: Path) -> None:
    log = read_log(path)
    original = path.read_bytes().splitlines()[1:]
    written = rewrite(log).splitlines()[1:]
    assert len(written) == len(original)
    for number, (was, now) in enumerate(zip(original, written, strict=True), start=2):
        row = json.loads(was)
        # A projected packed row's dt is dropped on reading (a projected log has no times).
        projected_packed = log.layout == "projected" and row["type"] in PACKED_TYPES
        if set(row) <= MODELLED_ROW_KEYS and not projected_packed:
            assert now == was, f"{path}:{number}"


@pytest.mark.parametrize("path", [pytest.param(p, id=str(p.relative_to(RECORDINGS)))
                                  for p in sorted(RECORDINGS.glob("*/session*.jsonl"))])
def test_project_recordings_round_trip(path: Path) -> None:
    """The generator writes dicts; the same log read into Events is written to the same bytes."""
    log = read_log(path)
    out = rewrite(log)
    if log.layout == "projected":
        assert logical(parse_log(out, path)) == logical(log)  # packed rows' dt is not read back
    else:
        assert out == path.read_bytes()


# --- the header ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("head", "line"), [
    (SessionHeader(id="p", created_at=5, cwd="/w"),
     b'{"type":"session","version":0,"id":"p","createdAt":5,"cwd":"/w"}'),
    (SessionHeader(id="s", created_at=6, parent_session="p", extra={"delegationDepth": 1}),
     b'{"type":"session","version":0,"id":"s","createdAt":6,"parentSession":"p","delegationDepth":1}'),
    (SessionHeader(id="f", created_at=7, parent_session="p", is_seeded=True, inherited=InheritedEventCount(42)),
     b'{"type":"session","version":0,"id":"f","createdAt":7,"parentSession":"p","seedLength":42}'),
    (SessionHeader(id="f", created_at=7, parent_session="p", is_seeded=True),
     b'{"type":"session","version":0,"id":"f","createdAt":7,"parentSession":"p","seedLength":0}'),
], ids=["primary-no-seedLength", "spawn-no-seedLength", "fork-seedLength", "fork-seeded-with-nothing"])
def test_header_line(head: SessionHeader, line: bytes) -> None:
    events = [{"type": "turn/start", "seq": k, "time": k, "data": {}} for k in range(head.cut)]
    out = encode_log(head, events)
    assert out.split(b"\n", 1)[0] == line
    again = parse_log(out, Path("x.jsonl")).header
    assert (again.is_seeded, again.cut, again.kind) == (head.is_seeded, head.cut, head.kind)
    assert encode_log(again, events) == out


# --- packing ----------------------------------------------------------------------------------------


def text(index: int, piece: str) -> Row:
    return {"type": "text-delta", "index": index, "text": piece}


def tool(piece: str, call_id: str | None = "call_1", name: str | None = "bash") -> Row:
    chunk: Row = {"type": "tool-call-delta", "index": 1}
    if call_id is not None:
        chunk["id"] = call_id
    if name is not None:
        chunk["name"] = name
    return chunk | {"argumentsDelta": piece}


def timed(chunks: list[Row], times: list[int | float], seqs: list[int] | None = None) -> list[Row]:
    rows = chunk_rows(1, 1, chunks)
    seqs = seqs if seqs is not None else list(range(len(rows)))
    return [{"type": r["type"], "seq": s, "time": t, "data": r["data"]}
            for r, s, t in zip(rows, seqs, times, strict=True)]


@pytest.mark.parametrize(("events", "shape"), [
    (timed([text(0, "a"), text(0, "b"), text(0, "c")], [10, 10, 35]), ["text-chunks"]),
    (timed([text(0, "a"), text(0, "b")], [10, 11]), ["assistant/chunk"] * 2),
    (timed([{"type": "reasoning-delta", "index": 0, "text": t} for t in "xyzw"], [5, 4, 9, 9]),
     ["reasoning-chunks"]),
    (timed([tool(""), tool("{"), tool("}")], [1, 2, 3]), ["tool-call-chunks"]),
    (timed([tool("", None, None), tool("{", None, None), tool("}", None, None)], [1, 2, 3]), ["tool-call-chunks"]),
    (timed([text(0, "a"), text(0, "b"), text(1, "c"), text(1, "d"), text(1, "e")], [1, 2, 3, 4, 5]),
     ["assistant/chunk"] * 2 + ["text-chunks"]),
    (timed([text(0, p) for p in "abcdef"], [1, 2, 3, 4, 5, 6], seqs=[0, 1, 2, 7, 8, 9]),
     ["text-chunks", "text-chunks"]),
    # 134.36… + (0.08… - 134.36…) is not 0.08… in floating point: the run is packed on each side of it.
    (timed([text(0, p) for p in "abcdef"], [0.5, 1.5, 134.36424411240122, 0.08022650611681836, 0.9, 1.9]),
     ["text-chunks", "text-chunks"]),
    (timed([text(0, "a"), text(0, "b") | {"extra": 1}, text(0, "c"), text(0, "d")], [1, 2, 3, 4]),
     ["assistant/chunk"] * 4),
    (timed([{"type": "block-start", "index": 0, "blockType": "text"}, text(0, "a"), text(0, "b"), text(0, "c"),
            {"type": "block-end", "index": 0, "block": {"type": "text", "text": "abc"}}], [1, 2, 3, 4, 5]),
     ["assistant/chunk", "text-chunks", "assistant/chunk"]),
], ids=["text-run", "two-deltas-stay-plain", "reasoning-run-times-going-back", "tool-call-run",
        "tool-call-run-without-id-or-name", "block-change-ends-a-run", "seq-gap-splits-a-run",
        "float-times-a-running-sum-would-change-split-a-run", "unknown-chunk-key-stays-plain", "inside-a-call"])
def test_packing(events: list[Row], shape: list[str]) -> None:
    out = encode_log(header(), events, pack=True)
    assert [r["type"] for r in body(out)] == shape
    again = parse_log(out, Path("x.jsonl"))
    plain = parse_log(encode_log(header(), events), Path("x.jsonl"))
    assert logical(again) == logical(plain)  # seq and time exactly as recorded, float ms included


def test_packed_row_fields() -> None:
    events = timed([tool(""), tool('{"a"'), tool(":1}")], [100, 100, 127], seqs=[4, 5, 6])
    (row,) = body(encode_log(header(), events, pack=True))
    assert row == {"type": "tool-call-chunks", "seq0": 4, "time0": 100,
                   "data": {"turn": 1, "step": 1, "index": 1, "dt": [0, 27], "id": "call_1", "name": "bash",
                            "args": ["", '{"a"', ":1}"]}}


# --- the projected layout -----------------------------------------------------------------------


def test_projected_log_writes_no_seq_or_time() -> None:
    events = stamped(turn_rows(1, "hi", text_call("one two three four")))
    out = encode_log(header(), events, pack=True, projected=True)
    rows = body(out)
    assert not any(set(r) & {"seq", "time", "seq0", "time0"} for r in rows)
    assert "text-chunks" in [r["type"] for r in rows]
    log = parse_log(out, Path("x.jsonl"))
    assert log.layout == "projected"
    assert [(e.type, e.seq, e.time) for e in log.events] == [(e["type"], e["seq"], None) for e in events]


def test_events_and_dicts_write_the_same_bytes(tmp_path: Path) -> None:
    events = stamped(turn_rows(1, "hi", text_call("one two three four")))
    path = write_log(tmp_path / "session.jsonl", header(), events, pack=True)
    log = read_log(path)
    assert all(isinstance(e, Event) for e in log.events)
    assert encode_log(log.header, log.events, pack=True) == path.read_bytes()
    assert not partial_path(path).exists()


# --- the incremental writer: record mode ----------------------------------------------------------


def call_events(turn: int, first_seq: int, answer: str) -> list[Row]:
    """One recorded model call (its chunk events), seq from `first_seq`, 1 ms apart."""
    rows = chunk_rows(turn, 1, text_call(answer))
    return [{"type": r["type"], "seq": first_seq + k, "time": 5000 + first_seq + k, "data": r["data"]}
            for k, r in enumerate(rows)]


def record_two_calls(path: Path, *, pack: bool = False) -> tuple[SessionWriter, list[Row]]:
    rec = SessionWriter(path, header("live"), pack=pack)
    first = call_events(1, 0, "first answer here")
    second = call_events(2, len(first), "second answer here")
    rec.append(first)
    rec.append(second)
    return rec, first + second


def answers(log: SessionLog) -> list[str]:
    """The text each derived entry streams."""
    entries = calls_to_entries(derive_calls(log), log, set())
    return ["".join(c.text for c in e.chunks if isinstance(c, TextDelta))
            for e in entries if isinstance(e, ChunksEntry)]


@pytest.mark.parametrize("pack", [False, True], ids=["unpacked", "packed"])
def test_a_closed_recording_takes_its_name(tmp_path: Path, pack: bool) -> None:
    path = tmp_path / "session.jsonl"
    rec, events = record_two_calls(path, pack=pack)
    assert not path.exists()  # live: only the partial file
    assert rec.close() == path
    assert not partial_path(path).exists()
    assert path.read_bytes() == encode_log(header("live"), events, pack=pack)  # per-call packing == whole-log
    assert answers(read_log(path)) == ["first answer here", "second answer here"]
    assert rec.events_written == len(events)


def test_every_finished_call_is_on_disk_while_recording(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    rec, events = record_two_calls(path)
    partial = partial_path(path).read_bytes()  # no close: what a crash right now would leave
    assert logical(parse_log(partial, path)) == logical(parse_log(encode_log(header("live"), events), path))
    rec.abandon()


def test_a_crash_mid_call_leaves_no_session_file_and_recover_keeps_the_finished_calls(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    rec, events = record_two_calls(path)
    third = call_events(3, len(events), "third answer cut off")
    rec.abandon()
    first_line = encode_log(header("live"), third).split(b"\n")[1]
    with partial_path(path).open("ab") as f:  # the crash: the third call's write got part of its first line
        f.write(first_line[:-7])

    assert not path.exists()
    assert not is_scenario(tmp_path)  # a tree holds no valid-looking truncated session
    buf = partial_path(path).read_bytes()
    torn_line = buf.count(b"\n") + 1
    with pytest.raises(RecordingError) as info:
        parse_log(buf, path)
    assert info.value.line == torn_line and "malformed JSON" in info.value.message

    assert recover(partial_path(path)) == path
    assert not partial_path(path).exists()
    log = read_log(path)
    assert len(log.events) == len(events)
    assert answers(log) == ["first answer here", "second answer here"]
    assert load_scenario(tmp_path).primary.entries


def test_a_line_aligned_tear_is_a_loud_unfinished_call(tmp_path: Path) -> None:
    """Should the crash keep whole lines of the call in flight, its missing finish is reported."""
    path = tmp_path / "session.jsonl"
    rec, events = record_two_calls(path)
    third = call_events(3, len(events), "third answer cut off")
    rec.abandon()
    with partial_path(path).open("ab") as f:  # the crash: the third call's write got three whole lines
        f.write(encode_log(header("live"), third[:3]).split(b"\n", 1)[1])
    log = read_log(recover(partial_path(path)))
    with pytest.raises(RecordingError, match=r"\(turn 3, step 1\) \(call 2, 0-based\) has no final finish chunk"):
        calls_to_entries(derive_calls(log), log, set())


def test_an_exception_while_recording_keeps_the_partial_name(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    with pytest.raises(RuntimeError), SessionWriter(path, header("live")) as rec:
        rec.append(call_events(1, 0, "one answer"))
        raise RuntimeError("upstream went away")
    assert not path.exists()
    assert partial_path(path).exists()


def test_a_failed_write_is_never_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "session.jsonl"
    rec, _ = record_two_calls(path)

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("mockllm.dsh.writer.os.fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        rec.append(call_events(3, 14, "never durable"))
    with pytest.raises(ValueError, match="abandoned"):
        rec.close()
    assert not path.exists()
    assert partial_path(path).exists()


def test_recover_refuses_a_partial_without_a_header(tmp_path: Path) -> None:
    partial = partial_path(tmp_path / "session.jsonl")
    partial.write_bytes(b'{"type":"session","vers')
    with pytest.raises(RecordingError, match="empty log"):
        recover(partial)
    assert partial.read_bytes() == b'{"type":"session","vers'  # left as it was


@pytest.mark.parametrize("leftover", ["session.jsonl", "session.jsonl.partial"], ids=["final", "partial"])
def test_a_recording_never_overwrites(tmp_path: Path, leftover: str) -> None:
    (tmp_path / leftover).write_bytes(b"keep me")
    with pytest.raises(FileExistsError, match=leftover):
        SessionWriter(tmp_path / "session.jsonl", header("live"))
    assert (tmp_path / leftover).read_bytes() == b"keep me"


@pytest.mark.parametrize("pack", [False, True], ids=["unpacked", "packed"])
def test_a_recording_closed_under_another_name_and_header_is_written_anew_there(tmp_path: Path, pack: bool) -> None:
    """Record mode learns a session's place in its tree only at the end: its log is closed under its
    final name and header, complete there, and nothing is left under the provisional one."""
    provisional = tmp_path / "session.jsonl"
    rec, events = record_two_calls(provisional, pack=pack)
    final = tmp_path / "session.2.jsonl"
    placed = SessionHeader("live", 5001, parent_session="root")
    assert rec.close(path=final, header=placed) == final
    assert final.read_bytes() == encode_log(placed, events, pack=pack)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["session.2.jsonl"], "no partial, no .finishing"
    assert rec.close() == final, "closing again does nothing"


def test_closing_under_the_same_name_and_header_only_renames(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    rec, events = record_two_calls(path)
    assert rec.close(path=path, header=header("live")) == path
    assert path.read_bytes() == encode_log(header("live"), events)


def test_closing_under_a_name_already_taken_refuses_and_keeps_both(tmp_path: Path) -> None:
    rec, _ = record_two_calls(tmp_path / "session.1.jsonl")
    (tmp_path / "session.jsonl").write_bytes(b"keep me")
    with pytest.raises(FileExistsError, match=r"session\.jsonl: a session log is already recorded"):
        rec.close(path=tmp_path / "session.jsonl", header=header("live"))
    assert (tmp_path / "session.jsonl").read_bytes() == b"keep me"
    assert partial_path(tmp_path / "session.1.jsonl").exists()
