"""Deriving scripts: calls grouped by (turn, step), split at finish, the fork cut, script order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mockllm.dsh.chunks import (
    Block,
    BlockEnd,
    BlockStart,
    FinishChunk,
    FinishReason,
    StreamChunk,
    TextDelta,
    TokenUsage,
    UsageChunk,
)
from mockllm.dsh.reader import read_log
from mockllm.errors import RecordingError
from mockllm.scenario.load import ScenarioError, load_scenario
from mockllm.script.derive import derive_calls, recorded_calls
from mockllm.script.entries import ChunksEntry, Entry, HangEntry
from tests.logbuilder import chunk_rows, fork_tree, header, text_call, tool_call, turn_rows, write_log


def text_of(entry: Entry) -> str:
    assert isinstance(entry, ChunksEntry)
    return "".join(c.text for c in entry.chunks if isinstance(c, TextDelta))


def finish_kind(entry: Entry) -> str:
    assert isinstance(entry, ChunksEntry)
    last = entry.chunks[-1]
    assert isinstance(last, FinishChunk)
    return last.reason.kind


def test_calls_are_grouped_by_turn_and_step(tmp_path: Path) -> None:
    rows = [
        *turn_rows(1, "one", tool_call("bash"), text_call("turn one done")),
        *turn_rows(2, "two", text_call("turn two")),
    ]
    write_log(tmp_path, "session.jsonl", header(), rows)
    entries = load_scenario(tmp_path).primary.entries
    assert [finish_kind(e) for e in entries] == ["tool-calls", "stop", "stop"]
    assert [text_of(e) for e in entries] == ["", "turn one done", "turn two"]
    assert entries[0] == ChunksEntry(entries[0].chunks)  # chunks kept exactly, nothing added


def test_a_retry_inside_one_step_is_two_calls(tmp_path: Path) -> None:
    failed: list[dict[str, object]] = [
        {"type": "block-start", "index": 0, "blockType": "text"},
        {"type": "finish", "reason": {"kind": "error", "failure": {"message": "overloaded", "code": "SERVER"}}},
    ]
    rows = [
        {"type": "turn/start", "data": {"turn": 1}},
        *chunk_rows(1, 1, failed),
        *chunk_rows(1, 1, text_call("second try")),  # same (turn, step), after a finish: the retry
        {"type": "turn/end", "data": {"turn": 1}},
    ]
    write_log(tmp_path, "session.jsonl", header(), rows)
    entries = load_scenario(tmp_path).primary.entries
    assert [finish_kind(e) for e in entries] == ["error", "stop"]
    assert text_of(entries[1]) == "second try"


def unfinished_tree(folder: Path) -> Path:
    """Call 1 (turn 1, step 2) stops before its finish, like an aborted recording."""
    cut_short = text_call("never finished")[:-1]
    write_log(folder, "session.jsonl", header(), turn_rows(1, "go", text_call("first"), cut_short))
    return folder


def test_a_call_with_no_finish_is_an_error_naming_file_line_and_step(tmp_path: Path) -> None:
    unfinished_tree(tmp_path)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(tmp_path)
    [problem] = caught.value.problems
    log = tmp_path / "session.jsonl"
    usage_line = next(i for i, line in enumerate(log.read_text().splitlines(), start=1) if '"usage"' in line
                      and '"step":2' in line)
    assert (problem.path, problem.line) == (log, usage_line)  # the call's last recorded chunk
    assert "(turn 1, step 2)" in problem.message
    assert "no final finish" in problem.message


@pytest.mark.parametrize("sidecar", [
    pytest.param({"patches": [{"at": 1, "entry": {"kind": "hang"}}]}, id="patch-replaces-it"),
    pytest.param([{"kind": "chunks", "chunks": []}, {"kind": "hang"}], id="array-replaces-all"),
])
def test_a_call_with_no_finish_is_fine_when_the_sidecar_replaces_it(tmp_path: Path, sidecar: object) -> None:
    unfinished_tree(tmp_path)
    (tmp_path / "replay.override.json").write_text(json.dumps(sidecar))
    entries = load_scenario(tmp_path).primary.entries
    assert len(entries) == 2
    assert entries[1] == HangEntry()


def compaction(*, streamed: bool | None, usage: bool = True) -> dict[str, object]:
    data: dict[str, object] = {
        "summary": "earlier turns, summarised",
        "rawOutput": [{"type": "reasoning", "text": "think"}, {"type": "text", "text": "the summary"}],
    }
    if streamed is not None:
        data["llmStreamCall"] = streamed
    if usage:
        data["usage"] = {"inputTokens": 50, "outputTokens": 7}
    return {"type": "compaction/summary", "data": data}


def test_a_streamed_compaction_is_a_call_at_its_position(tmp_path: Path) -> None:
    rows = [*turn_rows(1, "a", text_call("before")), compaction(streamed=True), *turn_rows(2, "b", text_call("after"))]
    write_log(tmp_path, "session.jsonl", header(), rows)
    entries = load_scenario(tmp_path).primary.entries
    assert [text_of(e) for e in entries] == ["before", "", "after"]
    expected: list[StreamChunk] = [
        BlockStart(0, "reasoning"), BlockEnd(0, Block("reasoning", text="think")),
        BlockStart(1, "text"), BlockEnd(1, Block("text", text="the summary")),
        UsageChunk(TokenUsage(50, 7)),
        FinishChunk(FinishReason("stop")),
    ]
    assert entries[1] == ChunksEntry(expected)


def test_a_streamed_compaction_without_usage_has_no_usage_chunk(tmp_path: Path) -> None:
    write_log(tmp_path, "session.jsonl", header(), [compaction(streamed=True, usage=False)])
    [entry] = load_scenario(tmp_path).primary.entries
    assert isinstance(entry, ChunksEntry)
    assert not any(isinstance(c, UsageChunk) for c in entry.chunks)
    assert isinstance(entry.chunks[-1], FinishChunk)


@pytest.mark.parametrize("streamed", [False, None], ids=["llmStreamCall-false", "llmStreamCall-absent"])
def test_a_compaction_not_made_by_a_streamed_call_is_not_a_call(tmp_path: Path, streamed: bool | None) -> None:
    rows = [*turn_rows(1, "a", text_call("before")), compaction(streamed=streamed)]
    write_log(tmp_path, "session.jsonl", header(), rows)
    assert [text_of(e) for e in load_scenario(tmp_path).primary.entries] == ["before"]


def test_script_order_is_primary_then_children_by_created_at_then_id(tmp_path: Path) -> None:
    one_call = turn_rows(1, "task", text_call("ok"))
    # The primary is the newest, and file numbers disagree with creation order: neither may matter.
    write_log(tmp_path, "session.jsonl", header("p", created_at=99), one_call)
    write_log(tmp_path, "session.1.jsonl", header("c", created_at=30, parent="p"), one_call)
    write_log(tmp_path, "session.2.jsonl", header("z", created_at=10, parent="p"), one_call)
    write_log(tmp_path, "session.3.jsonl", header("a", created_at=30, parent="p"), one_call)
    write_log(tmp_path, "session.10.jsonl", header("b", created_at=30, parent="a"), one_call)
    scenario = load_scenario(tmp_path)
    assert [(s.id, s.file) for s in scenario.sessions] == [
        ("p", "session.jsonl"), ("z", "session.2.jsonl"), ("a", "session.3.jsonl"),
        ("b", "session.10.jsonl"), ("c", "session.1.jsonl"),
    ]


def test_the_fork_cut_keeps_the_parents_answers_out_of_the_childs_script(tmp_path: Path) -> None:
    """Regression: the seed holds the parent's chunks; without the cut the child replays them."""
    fork_tree(tmp_path)
    child = load_scenario(tmp_path).sessions[1]
    assert (child.kind, child.cut) == ("fork", 11)
    assert [text_of(e) for e in child.entries] == ["child answer"]

    log = read_log(tmp_path / "session.1.jsonl")
    uncut = recorded_calls(log.events, log)  # what deriving from the whole log would give
    assert ["".join(c.text for c in call.chunks if isinstance(c, TextDelta)) for call in uncut] == [
        "parent answer", "child answer"]
    assert len(derive_calls(log)) == 1


def test_a_spawn_child_is_not_cut(tmp_path: Path) -> None:
    write_log(tmp_path, "session.jsonl", header("p"), turn_rows(1, "go", tool_call("subagent")))
    write_log(tmp_path, "session.1.jsonl", header("s", parent="p"), turn_rows(1, "task", text_call("spawned")))
    child = load_scenario(tmp_path).sessions[1]
    assert (child.kind, child.cut, [text_of(e) for e in child.entries]) == ("spawn", 0, ["spawned"])


def test_a_broken_child_is_reported_with_the_others(tmp_path: Path) -> None:
    fork_tree(tmp_path)
    (tmp_path / "session.2.jsonl").write_text('{"type":"session","version":0,"id":"x","createdAt":0}\nnope\n')
    (tmp_path / "session.3.jsonl").write_text('{"type":"session","version":1,"id":"y","createdAt":0}\n')
    with pytest.raises(ScenarioError) as caught:
        load_scenario(tmp_path)
    assert [(p.path.name, p.line) for p in caught.value.problems] == [("session.2.jsonl", 2), ("session.3.jsonl", 1)]
    assert all(isinstance(p, RecordingError) for p in caught.value.problems)
