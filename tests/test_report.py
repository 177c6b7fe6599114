"""The run report with no socket: built from a Run, encoded as the server sends it, and decoded
as the Python API reads it, into the same Structs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mockllm.errors import ReplayFailure
from mockllm.options import ServeOptions
from mockllm.replay.report import (
    HeldCall,
    PacingNote,
    RunNotClean,
    RunReport,
    check,
)
from mockllm.replay.reporting import build_report, build_state
from mockllm.replay.run import Run
from mockllm.replay.runs import Runs
from mockllm.scenario.load import load_scenario
from mockllm.wire import DEFAULT
from tests.logbuilder import fork_tree, text_call

REPORT_KEYS = ["run", "scenario", "consumed", "failures", "failures_more", "sessions", "divergences",
               "diverged_calls", "side_routes", "held", "pacing", "faults", "notices", "divergence", "went_live",
               "recording", "mcp"]
STATE_KEYS = [*REPORT_KEYS, "cwd", "settings", "holding", "bindings", "cursors", "journal", "journal_dropped"]


def new_run(folder: Path, **overrides: Any) -> Run:
    scenario = load_scenario(folder)
    return Runs({scenario.name: scenario}, ServeOptions()).create(scenario.name, overrides)


def decoded(answer: RunReport) -> tuple[dict[str, Any], RunReport]:
    """The JSON a client gets, and the report the Python API makes of it."""
    body = json.loads(msgspec.json.encode(answer))
    return body, RunReport.from_json(body)


def without_state(report: RunReport) -> RunReport:
    return msgspec.structs.replace(report, state=msgspec.UNSET)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A primary (three calls) with a fork child (one call) and a title model's side route."""
    folder = fork_tree(tmp_path / "tree")
    (folder / "title.json").write_text(json.dumps([{"kind": "chunks", "chunks": text_call("A title")}]))
    (folder / "mockllm.json").write_text(json.dumps({"side_routes": [{"model": "title", "script": "title.json"}]}))
    return folder


def test_a_report_round_trips_through_its_json(tree: Path) -> None:
    run = new_run(tree)
    for _ in range(3):
        run.take("agent")
    with pytest.raises(ReplayFailure):  # one call past the end of the primary's script
        run.take("agent")
    body, report = decoded(built := build_report(run))

    assert list(body) == REPORT_KEYS  # and no "state": that is the API side's own
    assert without_state(report) == built
    assert report.state == body
    assert (report.run, report.scenario, report.consumed) == (run.id, "tree", False)
    assert [(f.code, f.session, f.call) for f in report.failures] == [("script_exhausted", "agent", 3)]
    assert [(s.file, s.kind, s.live_id, s.served, s.entries, s.remaining) for s in report.sessions] == [
        ("session.jsonl", "primary", "agent", 3, 3, 0), ("session.1.jsonl", "fork", None, 0, 1, 1)]
    assert [(r.model, r.repeat, r.calls, r.served, r.remaining) for r in report.side_routes] == [
        ("title", False, 0, 0, 1)]
    assert body["sessions"][1] == {"id": "c", "file": "session.1.jsonl", "kind": "fork", "live_id": None,
                                   "served": 0, "entries": 1, "remaining": 1, "retries": 0}


def test_the_failing_words_are_the_same_on_both_sides(tree: Path) -> None:
    run = new_run(tree)
    run.take("agent")
    built = build_report(run)
    _, report = decoded(built)

    assert report.describe() == built.describe()
    assert report.problems() == [
        "unconsumed: session session.jsonl (primary, recorded id p) served call 0 (0-based); calls 1-2 (0-based) of 3 "
        "not requested",
        "unconsumed: session session.1.jsonl (fork, recorded id c) never called; call 0 (0-based) of 1 not requested",
        "unconsumed: side route 'title' (title.json) served 0 of 1",
    ]
    with pytest.raises(RunNotClean) as caught:
        check(report)
    assert str(caught.value) == built.describe()
    check(report, require_consumed=False)  # no failures: calls left are fine then


def test_divergences_holds_and_pacing_notes(tree: Path) -> None:
    run = new_run(tree)
    request = DEFAULT.decode_request(b'{"messages": [{"role": "user", "content": "bye"}]}')
    run.answer("agent", request, DEFAULT, (), b"{}")  # nothing alike: bound in recorded order
    # As the server notes them: a hang that names no ready file, one that does.
    run.held += [{"session": "agent", "script": "session.jsonl", "call": 1},
                 {"session": "x", "script": "session.1.jsonl", "call": 0, "ready_file": "ready",
                  "ready_file_written": False}]
    run.pacing[("session.jsonl", 0)] = PacingNote("session.jsonl", 0, "recorded", "a clock jump")
    body, report = decoded(build_report(run))

    (divergence,) = report.divergences
    assert (divergence.kind, divergence.session, divergence.live_id, divergence.call) == (
        "input", "session.jsonl", "agent", 0)
    assert [(n.kind, n.session) for n in report.notices] == [("bound_in_order", "session.jsonl")]
    assert (divergence.expected, divergence.got) == ("hello", "bye")
    assert report.diverged_calls == 1
    # A ready file's keys appear only on the hang that has one.
    assert body["held"] == [{"session": "agent", "script": "session.jsonl", "call": 1},
                            {"session": "x", "script": "session.1.jsonl", "call": 0, "ready_file": "ready",
                             "ready_file_written": False}]
    assert report.held[1] == HeldCall("x", "session.1.jsonl", 0, "ready", False)
    assert body["pacing"] == [{"file": "session.jsonl", "call": 0, "served": "recorded", "note": "a clock jump"}]
    assert "where requests first differed from the recording" in report.describe()


def test_the_live_state_is_the_report_then_the_run(tree: Path) -> None:
    run = new_run(tree, cwd="/w", ignore_input=["\\d+"])
    run.take("agent")
    run.journal.record("chat", "agent", True, ((b"X-Request-Id", b"n"),), b"{}")
    body, report = decoded(build_state(run))

    assert list(body) == STATE_KEYS
    assert body["settings"] == {"pace": "burst", "speed": 1.0, "strict": False, "ignore_input": ["\\d+"],
                                "bind": "content", "normalize": True, "divergence": "fail"}
    assert (body["cwd"], body["holding"], body["bindings"], body["cursors"]) == ("/w", 0, {"agent": "p"},
                                                                                 {"agent": 1})
    assert body["journal"][0]["headers"] == {"x-request-id": "n"}
    assert body["journal_dropped"] == 0
    # The API reads a live answer as a report, keeping the rest of it in `state`.
    assert without_state(report) == build_report(run)
    assert report.state == body


def test_a_partial_answer_decodes_with_defaults() -> None:
    report = RunReport.from_json({"run": "run-1", "scenario": "s", "consumed": True})
    assert (report.failures, report.sessions, report.side_routes, report.held) == ([], [], [], [])
    assert report.describe() == "mockllm run run-1 of scenario 's': replayed as recorded\n" \
                                "  sessions (calls served / recorded):"
