"""`mockllm inspect` and `mockllm check`, run in-process through `mockllm.cli.main.main`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from mockllm.cli.main import main
from tests.logbuilder import (
    corpus_or_skip,
    corpus_params,
    fork_tree,
    header,
    text_call,
    tool_call,
    turn_rows,
    write_log,
)

SESSION_KEYS = ["id", "file", "parent", "kind", "cut", "events", "entries"]


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def mixed_tree(folder: Path) -> Path:
    """A primary, a spawn child and a fork child: every kind, a nonzero cut."""
    fork_tree(folder)
    write_log(folder, "session.2.jsonl", header("s", created_at=3, parent="p"), turn_rows(1, "task", text_call("ok")))
    return folder


# --- inspect --------------------------------------------------------------------------------------


def test_inspect_json_is_exactly_the_documented_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "inspect", "--json", mixed_tree(tmp_path / "tree"))
    assert code == 0
    assert json.loads(out) == {"scenarios": [{"name": "tree", "sessions": [
        {"id": "p", "file": "session.jsonl", "parent": None, "kind": "primary", "cut": 0, "events": 28, "entries": 3},
        {"id": "c", "file": "session.1.jsonl", "parent": "p", "kind": "fork", "cut": 11, "events": 22, "entries": 1},
        {"id": "s", "file": "session.2.jsonl", "parent": "p", "kind": "spawn", "cut": 0, "events": 10, "entries": 1},
    ]}]}
    # Key order is part of the shape people read.
    assert list(json.loads(out)["scenarios"][0]["sessions"][0]) == SESSION_KEYS


@pytest.mark.parametrize("folder", corpus_params("*/"))
def test_inspect_json_on_a_corpus_suite(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "inspect", "--json", folder)
    doc = json.loads(out)
    assert code == 0
    assert list(doc) == ["scenarios"]
    assert [s["name"] for s in doc["scenarios"]] == sorted(p.name for p in folder.iterdir() if p.is_dir())
    for scenario in doc["scenarios"]:
        assert list(scenario) == ["name", "sessions"]
        assert all(list(session) == SESSION_KEYS for session in scenario["sessions"])
        assert scenario["sessions"][0]["kind"] == "primary"


def test_inspect_json_lists_broken_scenarios_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mixed_tree(tmp_path / "good")
    write_log(tmp_path / "bad", "session.jsonl", header(), turn_rows(1, "go", text_call("x")[:-1]))
    code, out, _ = run(capsys, "inspect", "--json", tmp_path)
    doc = json.loads(out)
    assert code == 1
    assert [s["name"] for s in doc["scenarios"]] == ["good"]
    [broken] = doc["broken"]
    assert broken["name"] == "bad"
    [error] = broken["errors"]
    assert (error["file"], error["line"]) == (str(tmp_path / "bad" / "session.jsonl"), 8)
    assert "(turn 1, step 1)" in error["message"]


def test_inspect_human_output_shows_the_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "inspect", mixed_tree(tmp_path / "tree"))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "tree  (3 sessions, 5 entries)"
    sessions = [line.split() for line in lines if line.startswith("  session")]
    assert [(s[0], s[1], s[2], s[3]) for s in sessions] == [
        ("session.jsonl", "primary", "cut", "0"), ("session.1.jsonl", "fork", "cut", "11"),
        ("session.2.jsonl", "spawn", "cut", "0")]
    assert "22 events" in lines[5] and "1 entry" in lines[5] and "id c" in lines[5] and "parent p" in lines[5]
    assert [line.strip() for line in lines if line.startswith("    #")] == [
        '#0  "parent answer"; finish stop',
        "#1  tools subagent_fork; finish tool-calls",
        '#2  "parent done"; finish stop',
        '#0  "child answer"; finish stop',
        '#0  "ok"; finish stop',
    ]


def test_inspect_human_output_lists_skipped_and_broken(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mixed_tree(tmp_path / "good")
    (tmp_path / "notes").mkdir()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "session.jsonl").write_text('{"type":"session","version":0,"id":"p","createdAt":0}\n{oops\n')
    code, out, _ = run(capsys, "inspect", tmp_path)
    assert code == 1
    assert "skipped (not scenarios: no session.jsonl, no replay.override.json): notes" in out
    assert f"broken: bad\n  {bad / 'session.jsonl'}:2: malformed JSON" in out


@pytest.mark.parametrize("verb", [["inspect"], ["inspect", "--json"], ["check"]], ids=" ".join)
def test_a_path_that_is_not_a_scenario_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   verb: list[str]) -> None:
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "empty", tmp_path / "missing"):
        code, out, err = run(capsys, *verb, path)
        assert (code, out) == (1, "")
        assert f"error: {path}: " in err


# --- check ----------------------------------------------------------------------------------------

HEAD = '{"type":"session","version":0,"id":"p","createdAt":0}'
STEP = '{"type":"step/start","seq":0,"time":0,"data":{"turn":1,"step":1}}'


def malformed_line(folder: Path) -> tuple[Path, int, str]:
    (folder / "session.jsonl").write_text(f"{HEAD}\n{STEP}\n{{oops\n")
    return folder / "session.jsonl", 3, "malformed JSON"


def cut_past_the_end(folder: Path) -> tuple[Path, int, str]:
    fork_tree(folder, seed=999)
    return folder / "session.1.jsonl", 1, "seedLength 999 is past the end of the log (22 logical events)"


def mixed_layout(folder: Path) -> tuple[Path, int, str]:
    (folder / "session.jsonl").write_text(f'{HEAD}\n{STEP}\n{STEP}\n{{"type":"step/end","data":{{}}}}\n')
    return folder / "session.jsonl", 4, "mixed layout"


def no_finish(folder: Path) -> tuple[Path, int, str]:
    calls = (tool_call("bash", minimal=True), text_call("x y")[:-1])  # minimal: the line number below counts rows
    log = write_log(folder, "session.jsonl", header(), turn_rows(1, "go", *calls))
    return log, 15, "the model call of (turn 1, step 2) (call 1, 0-based) has no final finish chunk"


def unknown_sidecar_kind(folder: Path) -> tuple[Path, int, str]:
    write_log(folder, "session.jsonl", header(), turn_rows(1, "go", text_call("x")))
    (folder / "replay.override.json").write_text('{"patches": [\n  {"at": 0, "entry": {"kind": "explode"}}\n]}\n')
    return folder / "replay.override.json", 2, "patch 0 (at 0): unknown kind 'explode'"


def version_1(folder: Path) -> tuple[Path, int, str]:
    fork_tree(folder)
    (folder / "session.1.jsonl").write_text('{"type":"session","version":1,"id":"c","createdAt":0}\n')
    return folder / "session.1.jsonl", 1, "unsupported session log version 1"


@pytest.mark.parametrize("broken", [malformed_line, cut_past_the_end, mixed_layout, no_finish,
                                    unknown_sidecar_kind, version_1], ids=lambda f: f.__name__)
def test_check_fails_with_file_line_on_a_broken_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     broken: Callable[[Path], tuple[Path, int, str]]) -> None:
    folder = tmp_path / "scenario"
    folder.mkdir()
    file, line, message = broken(folder)
    code, out, _ = run(capsys, "check", folder)
    assert code == 1
    first, *rest = out.splitlines()
    assert first.startswith(f"{file}:{line}: {message}")
    assert rest == ["FAILED: 1 error in 1 broken scenario (scenario); 0 scenarios (0 sessions, 0 entries) loaded"]


def test_check_reports_every_broken_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fork_tree(tmp_path / "a")
    malformed_line(tmp_path / "a")  # the primary breaks ...
    (tmp_path / "a" / "session.1.jsonl").write_text(f"{HEAD}\n{STEP}\nnope\n")  # ... and so does the child
    mixed_tree(tmp_path / "b")
    code, out, _ = run(capsys, "check", tmp_path)
    assert code == 1
    assert [line.split(": ")[0] for line in out.splitlines()[:-1]] == [
        f"{tmp_path / 'a' / 'session.jsonl'}:3", f"{tmp_path / 'a' / 'session.1.jsonl'}:3"]
    assert out.splitlines()[-1].startswith("FAILED: 2 errors in 1 broken scenario (a); 1 scenario")


def test_check_passes_with_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fork_tree(tmp_path / "tree", seed=10)
    code, out, _ = run(capsys, "check", tmp_path / "tree")
    assert code == 0
    assert out.splitlines()[0].startswith(f"{tmp_path / 'tree' / 'session.1.jsonl'}:1: warning: seedLength 10 ")
    assert out.splitlines()[-1] == "OK: 1 scenario (2 sessions, 4 entries), 1 warning"


def test_check_passes_a_clean_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "check", mixed_tree(tmp_path / "tree")) == (0, "OK: 1 scenario (3 sessions, 5 entries)\n", "")


@pytest.mark.parametrize("folder", corpus_params("*/*/"))
def test_check_passes_every_corpus_scenario(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", folder)
    assert code == 0
    assert out.startswith("OK: 1 scenario (") and "warning" not in out


def test_check_passes_the_corpus_suites(capsys: pytest.CaptureFixture[str]) -> None:
    for suite in sorted(p for p in corpus_or_skip().iterdir() if p.is_dir()):
        code, out, _ = run(capsys, "check", suite)
        assert (code, out.startswith("OK: ")) == (0, True), out
