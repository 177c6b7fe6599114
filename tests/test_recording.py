"""Reading one log: packed rows expanded, projected rows numbered, every error at file:line."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from mockllm.dsh.chunks import ReasoningDelta, TextDelta, ToolCallDelta
from mockllm.dsh.reader import CallChunk, SessionLog, read_log
from mockllm.errors import RecordingError
from tests.logbuilder import CORPUS, CORPUS_MISSING

HEAD = '{"type":"session","version":0,"id":"p","createdAt":0}'


def write(tmp_path: Path, *body: str, head: str = HEAD) -> Path:
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join([head, *body]) + "\n", encoding="utf-8")
    return path


def read(tmp_path: Path, *body: str, head: str = HEAD) -> SessionLog:
    return read_log(write(tmp_path, *body, head=head))


def chunk_data(log: SessionLog, index: int) -> CallChunk:
    data = log.events[index].data
    assert isinstance(data, CallChunk)
    return data


START = '{"type":"assistant/chunk","seq":4,"time":90,"data":{"turn":2,"step":3,"chunk":{"type":"block-start","index":1,"blockType":"text"}}}'  # noqa: E501

PACKED = [
    pytest.param('{"type":"text-chunks","seq0":5,"time0":100,"data":{"turn":2,"step":3,"index":1,"dt":[1,2,3],'
                 '"texts":["a","b","c","d"]}}', TextDelta, id="text-chunks"),
    pytest.param('{"type":"reasoning-chunks","seq0":5,"time0":100,"data":{"turn":2,"step":3,"index":1,"dt":[1,2,3],'
                 '"texts":["a","b","c","d"]}}', ReasoningDelta, id="reasoning-chunks"),
    pytest.param('{"type":"tool-call-chunks","seq0":5,"time0":100,"data":{"turn":2,"step":3,"index":1,"dt":[1,2,3],'
                 '"id":"call_9","name":"bash","args":["a","b","c","d"]}}', ToolCallDelta, id="tool-call-chunks"),
]


@pytest.mark.parametrize(("row", "delta"), PACKED)
def test_packed_row_expands_to_one_chunk_event_per_member(tmp_path: Path, row: str, delta: type) -> None:
    log = read(tmp_path, START, row)
    assert [e.type for e in log.events] == ["assistant/chunk"] * 5
    members = log.events[1:]
    assert [e.seq for e in members] == [5, 6, 7, 8]  # seq0 + k
    assert [e.time for e in members] == [100, 101, 103, 106]  # time0 + dt[0] + … + dt[k-1]
    assert {e.line for e in members} == {3}  # all from the packed physical line
    assert log.lines == 2
    for k, piece in enumerate("abcd", start=1):
        data = chunk_data(log, k)
        assert (data.turn, data.step) == (2, 3)
        assert type(data.chunk) is delta
        assert data.chunk.index == 1
        if isinstance(data.chunk, ToolCallDelta):
            # Every member of a packed tool call carries the call's id and name.
            assert (data.chunk.id, data.chunk.name, data.chunk.argumentsDelta) == ("call_9", "bash", piece)
        else:
            assert isinstance(data.chunk, TextDelta | ReasoningDelta)
            assert data.chunk.text == piece


def test_projected_rows_get_contiguous_seq_from_zero_packed_rows_included(tmp_path: Path) -> None:
    log = read(
        tmp_path,
        '{"type":"turn/start","data":{"turn":1}}',
        '{"type":"text-chunks","data":{"turn":1,"step":1,"index":0,"dt":[0,5],"texts":["x","y","z"]}}',
        '{"type":"assistant/chunk","data":{"turn":1,"step":1,"chunk":{"type":"finish","reason":{"kind":"stop"}}}}',
        '{"type":"turn/end","data":{"turn":1}}',
    )
    assert log.layout == "projected"
    assert [e.seq for e in log.events] == [0, 1, 2, 3, 4, 5]
    assert [e.type for e in log.events] == ["turn/start", *["assistant/chunk"] * 4, "turn/end"]
    assert all(e.time is None for e in log.events)


EV = '{{"type":"step/start","seq":{seq},"time":1,"data":{{"turn":1,"step":1}}}}'
PROJ = '{"type":"step/start","data":{"turn":1,"step":1}}'
PACKED_FULL = '{"type":"text-chunks","seq0":1,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[0,0],"texts":["a","b","c"]}}'  # noqa: E501


@pytest.mark.parametrize(("body", "bad_line", "layouts"), [
    pytest.param([EV.format(seq=0), PROJ], 3, "projected but earlier rows are full", id="full-then-projected"),
    pytest.param([PROJ, PROJ, EV.format(seq=2)], 4, "full but earlier rows are projected", id="projected-then-full"),
    pytest.param([PROJ, PACKED_FULL], 3, "full but earlier rows are projected", id="projected-then-packed-full"),
])
def test_mixed_layout_is_rejected_at_the_first_odd_row(tmp_path: Path, body: list[str], bad_line: int,
                                                       layouts: str) -> None:
    path = write(tmp_path, *body)
    with pytest.raises(RecordingError, match="mixed layout") as caught:
        read_log(path)
    assert (caught.value.path, caught.value.line) == (path, bad_line)
    assert layouts in caught.value.message


def test_unknown_event_types_are_kept_with_their_data(tmp_path: Path) -> None:
    log = read(
        tmp_path,
        '{"type":"future/thing","seq":0,"time":1,"data":{"x":[1,2]}}',
        '{"type":"no-data-at-all","seq":1,"time":2}',
    )
    assert [e.type for e in log.events] == ["future/thing", "no-data-at-all"]
    assert msgspec.json.decode(log.events[0].data) == {"x": [1, 2]}  # type: ignore[arg-type]
    assert log.events[1].line == 3


@pytest.mark.parametrize(("body", "bad_line", "text"), [
    pytest.param([EV.format(seq=0), '{"type":"step/end","seq":1,'], 3, "malformed JSON", id="truncated"),
    # A blank line is skipped but still counted, so the error points at the real line.
    pytest.param([EV.format(seq=0), "", "not json"], 4, "malformed JSON", id="after-blank-line"),
    pytest.param(['{"seq":0,"time":1}'], 2, "type", id="no-type"),
    pytest.param(['{"type":"assistant/chunk","seq":0,"time":1,"data":{"turn":1,"step":1,'
                  '"chunk":{"type":"bogus-chunk"}}}'], 2, "bogus-chunk", id="unknown-chunk-type"),
])
def test_malformed_line_error_names_file_and_line(tmp_path: Path, body: list[str], bad_line: int, text: str) -> None:
    path = write(tmp_path, *body)
    with pytest.raises(RecordingError) as caught:
        read_log(path)
    assert str(caught.value).startswith(f"{path}:{bad_line}: ")
    assert text in caught.value.message


@pytest.mark.parametrize("gap", ["", "   ", "\t"], ids=["empty-line", "spaces-line", "tab-line"])
def test_blank_lines_are_skipped_but_keep_the_line_numbers(tmp_path: Path, gap: str) -> None:
    path = write(tmp_path, EV.format(seq=0), gap, EV.format(seq=1), PROJ)
    with pytest.raises(RecordingError, match="mixed layout") as caught:
        read_log(path)
    assert caught.value.line == 5
    log = read(tmp_path, EV.format(seq=0), gap, EV.format(seq=1))
    assert ([e.line for e in log.events], log.lines) == ([2, 4], 2)


@pytest.mark.parametrize(("seed", "ok"), [(2, True), (3, False)], ids=["cut-at-end", "cut-past-end"])
def test_cut_past_the_end_is_rejected(tmp_path: Path, seed: int, ok: bool) -> None:
    head = f'{{"type":"session","version":0,"id":"c","createdAt":0,"parentSession":"p","seedLength":{seed}}}'
    path = write(tmp_path, EV.format(seq=0), EV.format(seq=1), head=head)
    if ok:
        assert read_log(path).header.cut == seed
        return
    with pytest.raises(RecordingError, match="past the end of the log") as caught:
        read_log(path)
    assert caught.value.line == 1


def test_seed_length_counts_logical_events_not_lines(tmp_path: Path) -> None:
    head = '{"type":"session","version":0,"id":"c","createdAt":0,"parentSession":"p","seedLength":4}'
    log = read(tmp_path, PACKED_FULL.replace('"seq0":1', '"seq0":0'), EV.format(seq=3), head=head)
    assert (log.lines, len(log.events), log.header.cut) == (2, 4, 4)


@pytest.mark.skipif(not CORPUS.is_dir(), reason=CORPUS_MISSING)
def test_real_packed_fork_child_cut_counts_logical_events() -> None:
    path = CORPUS / "v0-packed" / "acp-agent--subagent-fork-in-process" / "session.1.jsonl"
    body = [line for line in path.read_bytes().splitlines()[1:] if line.strip()]
    log = read_log(path)
    assert len(body) == log.lines == 41
    assert log.header.cut == 42
    assert log.events[42].type == "session/end-seed"
    assert log.events[41].type == "turn/end"
