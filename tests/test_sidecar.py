"""The `replay.override.json` sidecar: replace or patch the primary's script; errors at file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from mockllm.dsh.names import SIDECAR_FILE
from mockllm.scenario.load import Scenario, ScenarioError, load_scenario
from mockllm.script.entries import ChunksEntry, HangEntry, ThrowEntry
from tests.logbuilder import header, text_call, turn_rows, write_log


def scenario(folder: Path, sidecar: str, calls: int = 2) -> Path:
    """A primary with `calls` recorded calls and the given sidecar text."""
    write_log(folder, "session.jsonl", header(), turn_rows(1, "go", *(text_call(f"call {i}") for i in range(calls))))
    (folder / SIDECAR_FILE).write_text(sidecar, encoding="utf-8")
    return folder


def load(folder: Path) -> Scenario:
    return load_scenario(folder)


def test_an_array_replaces_the_whole_script(tmp_path: Path) -> None:
    scenario(tmp_path, '[\n  {"kind": "hang", "readyFile": "out/ready"}\n]')
    assert load(tmp_path).primary.entries == [HangEntry("out/ready")]


def test_patches_swap_a_call_and_append_one(tmp_path: Path) -> None:
    scenario(tmp_path, """{"patches": [
  {"at": 2, "entry": {"kind": "hang"}},
  {"at": 0, "entry": {"kind": "throw", "message": "boom", "code": "RATE_LIMIT", "status": 429}}
]}""")
    entries = load(tmp_path).primary.entries
    assert len(entries) == 3
    assert entries[0] == ThrowEntry("boom", "RATE_LIMIT", 429)
    assert isinstance(entries[1], ChunksEntry)  # derived call 1 untouched
    assert entries[2] == HangEntry()


def test_an_override_only_scenario_is_the_sidecar_array(tmp_path: Path) -> None:
    stop = '{"type": "finish", "reason": {"kind": "stop"}}'
    (tmp_path / SIDECAR_FILE).write_text(f'[{{"kind": "chunks", "chunks": [{stop}]}}]')
    primary = load(tmp_path).primary
    assert (primary.file, primary.kind, len(primary.entries)) == (SIDECAR_FILE, "primary", 1)


ERRORS = [
    pytest.param("""{"patches": [
  {"at": 0, "entry": {"kind": "hang"}},
  {"at": 3, "entry": {"kind": "hang"}}
]}""", 3, "patch at 3 is past the end", id="patch-past-the-end"),
    # Only `at == derived length` appends: at 2 and at 3 must not both append to 2 derived calls.
    pytest.param("""{"patches": [
  {"at": 2, "entry": {"kind": "hang"}},
  {"at": 3, "entry": {"kind": "hang"}}
]}""", 3, "patch at 3 is past the end", id="second-append-past-the-end"),
    pytest.param("""{"patches": [
  {"at": 1, "entry": {"kind": "hang"}},
  {"at": 1, "entry": {"kind": "hang"}}
]}""", 3, "call 1 is patched twice", id="duplicate-at"),
    pytest.param("""[
  {"kind": "hang"},
  {"kind": "explode"}
]""", 3, "unknown kind 'explode'", id="unknown-kind"),
    pytest.param("""[
  {"kind": "chunks", "chunks": []},

  {"kind": "throw", "code": "AUTH"}
]""", 4, "missing required field `message`", id="throw-without-message"),
    pytest.param("""{"patches": [
  {"at": -1, "entry": {"kind": "hang"}}
]}""", 2, "expected {\"at\": K >= 0", id="negative-at"),
    pytest.param("""{"patches": [
  {"at": 0}
]}""", 2, "expected {\"at\": K >= 0", id="patch-without-entry"),
    pytest.param("""[
  {"kind": "chunks", "chunks": [{"type": "nope"}]}
]""", 2, "entry 0 (chunks)", id="bad-chunk"),
    pytest.param('[\n  {"kind": "hang"},\n  {"kind": "hang"\n]', 4, "malformed JSON", id="malformed-json"),
    pytest.param('{"entries": []}', 1, "expected an array of entries", id="wrong-shape"),
]


@pytest.mark.parametrize(("text", "line", "message"), ERRORS)
def test_sidecar_errors_name_the_entrys_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    scenario(tmp_path, text)
    with pytest.raises(ScenarioError) as caught:
        load(tmp_path)
    [problem] = caught.value.problems
    assert str(problem).startswith(f"{tmp_path / SIDECAR_FILE}:{line}: ")
    assert message in problem.message
