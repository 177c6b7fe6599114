"""The pure checks behind `mockllm check`: load errors for every broken file, tree warnings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mockllm.cli.validate import Diagnostic, check_scenario, check_suite
from mockllm.dsh.reader import read_log
from mockllm.scenario.load import load_scenario, load_suite
from tests.logbuilder import Row, fork_tree, header, text_call, tool_call, turn_rows, write_log


def warnings_of(folder: Path) -> list[str]:
    diagnostics = check_scenario(load_scenario(folder, keep_logs=True))
    assert all(d.severity == "warning" for d in diagnostics)
    return [str(d) for d in diagnostics]


def line_of(path: Path, needle: str) -> int:
    """1-based line of the first line of `path` containing `needle`."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), start=1) if needle in line)


@pytest.mark.parametrize("seed", [None, 0], ids=["seed-after-turn-end", "seed-0"])
def test_a_consistent_fork_tree_has_no_warnings(tmp_path: Path, seed: int | None) -> None:
    fork_tree(tmp_path, seed=seed)
    assert warnings_of(tmp_path) == []


def test_a_cut_inside_a_turn_is_a_warning(tmp_path: Path) -> None:
    fork_tree(tmp_path, seed=10)  # event 9 is the first turn's step/end, not its turn/end
    child = tmp_path / "session.1.jsonl"
    assert warnings_of(tmp_path) == [
        f"{child}:1: warning: seedLength 10 does not fall right after a turn/end: logical event 9 (line 11) is "
        "step/end; a fork inherits whole turns, so check seedLength (it counts logical events, packed rows expanded)"
    ]


def seeded_child(folder: Path, seed_rows: list[Row], *, seed: int | None = None, projected: bool = False) -> Path:
    """A primary whose first turn answers `parent answer one`, and a fork child seeded with `seed_rows`."""
    first = turn_rows(1, "hello", text_call("parent answer one"))
    write_log(folder, "session.jsonl", header("p"), [*first, *turn_rows(2, "fork", tool_call("subagent_fork"))],
              projected=projected)
    child = [*seed_rows, *turn_rows(2, "child task", text_call("child answer"))]
    head = header("c", parent="p", seed=len(seed_rows) if seed is None else seed)
    return write_log(folder, "session.1.jsonl", head, child, projected=projected)


@pytest.mark.parametrize(("seed_rows", "needle", "what"), [
    pytest.param(turn_rows(1, "HELLO?", text_call("parent answer one")), "HELLO?",
                 "inherited event 1 (user/message) has other data than the parent's event 1 (session.jsonl:3)",
                 id="other-prompt"),
    pytest.param(turn_rows(1, "hello", text_call("parent answer two")), '"two"',
                 "inherited event 6 (assistant/chunk) has other data than the parent's event 6 (session.jsonl:8)",
                 id="other-chunk"),
    pytest.param(turn_rows(1, "hello", tool_call("bash")), "block-start",
                 "inherited event 3 (assistant/chunk) has other data", id="other-call"),
    pytest.param([{"type": "turn/start", "data": {"turn": 1}}, {"type": "agent/note", "data": {}},
                  {"type": "turn/end", "data": {"turn": 1}}], "agent/note",
                 "inherited event 1 is agent/note but the parent's event 1 (session.jsonl:3) is user/message",
                 id="other-type"),
])
def test_a_seed_that_is_not_the_parents_log_is_a_warning_at_the_first_difference(
        tmp_path: Path, seed_rows: list[Row], needle: str, what: str) -> None:
    child = seeded_child(tmp_path, seed_rows)
    [warning] = warnings_of(tmp_path)
    assert warning.startswith(f"{child}:{line_of(child, needle)}: warning: {what}")


def test_a_seed_longer_than_the_parents_log_is_a_warning(tmp_path: Path) -> None:
    write_log(tmp_path, "session.jsonl", header("p"), turn_rows(1, "hello", text_call("hi")))
    longer = [*turn_rows(1, "hello", text_call("hi")), *turn_rows(2, "more", text_call("there"))]
    child = write_log(tmp_path, "session.1.jsonl", header("c", parent="p", seed=len(longer)), longer)
    assert [w.split(": warning: ")[0] for w in warnings_of(tmp_path)] == [f"{child}:1"]
    assert "longer than the parent's log (session.jsonl has 10 logical events)" in warnings_of(tmp_path)[0]


def test_a_packed_seed_equals_the_unpacked_parent_it_copies(tmp_path: Path) -> None:
    """Packing is physical: the child's packed row stands for the parent's separate delta lines."""
    first = turn_rows(1, "hello", text_call("parent answer one"))
    deltas = [r for r in first if r["data"].get("chunk", {}).get("type") == "text-delta"]
    packed: Row = {"type": "text-chunks", "data": {"turn": 1, "step": 1, "index": 0, "dt": [0, 0],
                                                   "texts": [r["data"]["chunk"]["text"] for r in deltas]}}
    at = first.index(deltas[0])
    seed = [*first[:at], packed, *first[at + len(deltas):]]
    # seedLength counts logical events: the packed row is 3 of them.
    child = seeded_child(tmp_path, seed, seed=len(first), projected=True)
    log = read_log(child)
    assert len(log.events) - log.lines == 2
    assert warnings_of(tmp_path) == []


@pytest.mark.parametrize(("parent", "message"), [
    pytest.param("ghost", "parentSession ghost names no session in this tree (recorded: p (session.jsonl), "
                          "c (session.1.jsonl))", id="unknown-parent"),
    pytest.param(None, "a child log with no parentSession", id="no-parent"),
])
def test_a_child_whose_parent_is_not_in_the_tree_is_a_warning(tmp_path: Path, parent: str | None,
                                                               message: str) -> None:
    write_log(tmp_path, "session.jsonl", header("p"), turn_rows(1, "go", tool_call("subagent")))
    child = write_log(tmp_path, "session.1.jsonl", header("c", parent=parent), turn_rows(1, "task", text_call("ok")))
    [warning] = warnings_of(tmp_path)
    assert warning.startswith(f"{child}:1: warning: {message}")


def test_duplicate_recorded_session_ids_are_a_warning(tmp_path: Path) -> None:
    write_log(tmp_path, "session.jsonl", header("p"), turn_rows(1, "go", tool_call("subagent")))
    one_call = turn_rows(1, "task", text_call("ok"))
    write_log(tmp_path, "session.1.jsonl", header("s", parent="p", created_at=2), one_call)
    dup = write_log(tmp_path, "session.2.jsonl", header("s", parent="p", created_at=3), one_call)
    [warning] = warnings_of(tmp_path)
    assert warning.startswith(f"{dup}:1: warning: session id s is also recorded by session.1.jsonl")


def test_check_suite_reports_every_broken_file_and_keeps_the_good_scenarios(tmp_path: Path) -> None:
    good = fork_tree(tmp_path / "a-good", seed=10)  # loads, with one warning
    bad = tmp_path / "b-bad"
    write_log(bad, "session.jsonl", header("p"), turn_rows(1, "go", text_call("fine")))
    (bad / "session.1.jsonl").write_text('{"type":"session","version":0,"id":"x","createdAt":0}\n{"type":\n')
    (bad / "replay.override.json").write_text(json.dumps([{"kind": "explode"}]))
    (tmp_path / "c-notes").mkdir()  # not a scenario: skipped, not an error
    suite = load_suite(tmp_path, keep_logs=True)
    assert suite.skipped == ["c-notes"]
    got = [(d.severity, d.path, d.line) for d in check_suite(suite)]
    assert got == [
        ("error", bad / "replay.override.json", 1),
        ("error", bad / "session.1.jsonl", 2),
        ("warning", good / "session.1.jsonl", 1),
    ]


@pytest.mark.parametrize(("diagnostic", "text"), [
    pytest.param(Diagnostic(Path("s/session.jsonl"), 3, "bad"), "s/session.jsonl:3: bad", id="error"),
    pytest.param(Diagnostic(Path("s/session.jsonl"), 1, "odd", "warning"), "s/session.jsonl:1: warning: odd",
                 id="warning"),
    pytest.param(Diagnostic(Path("s/session.jsonl"), None, "unreadable"), "s/session.jsonl: unreadable",
                 id="no-line"),
])
def test_diagnostic_format(diagnostic: Diagnostic, text: str) -> None:
    assert str(diagnostic) == text
