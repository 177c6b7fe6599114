"""What real agents' harnesses vary between runs, absorbed by default (issue 24): the XML form of a
measured duration, and `<system-reminder>` blocks a harness appends to a tool result (compared
loosely with a notice by default; exactly under `--strict` or `--normalize false`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mockllm.options import RunSettings
from mockllm.replay.normalize import BUILTIN, masked, without_reminders
from mockllm.replay.outcome import Refusal
from mockllm.replay.reporting import build_report
from mockllm.replay.run import Run
from mockllm.scenario.load import Scenario, load_scenario
from mockllm.wire import DEFAULT
from tests.logbuilder import Log, header, text_call, tool_call, write_log

RESULT = "Oslo: -3C and light snow.\nagentId: a6538a2"
REMINDER = "\n\n<system-reminder>\nContext left until auto-compact: 12%.\n</system-reminder>\n"


@pytest.mark.parametrize(("recorded", "live"), [
    ("<duration_ms>287</duration_ms>", "<duration_ms>1043</duration_ms>"),
    ("<elapsed_seconds> 0.4 </elapsed_seconds>", "<elapsed_seconds>12.25</elapsed_seconds>"),
    ('"duration_ms": 287', '"duration_ms": 9'),
])
def test_a_measured_duration_is_masked_in_either_form(recorded: str, live: str) -> None:
    assert masked(recorded, BUILTIN) == masked(live, BUILTIN)
    assert "<duration>" in masked(recorded, BUILTIN)


def test_an_xml_element_that_is_no_duration_is_left_alone() -> None:
    assert masked("<exit_code>1</exit_code>", BUILTIN) == "<exit_code>1</exit_code>"


def test_without_reminders_drops_every_block_and_the_blank_space_around_the_last() -> None:
    assert without_reminders(RESULT + REMINDER) == RESULT
    assert without_reminders("a <system-reminder>x</system-reminder> b") == "a b"
    assert without_reminders(RESULT) == RESULT


def _scenario(folder: Path) -> Scenario:
    """A session that reads a file, then answers: its second call's input is the tool result."""
    rows = Log().turn("read it", tool_call("read", '{"path": "a"}', "call_1"), text_call("DONE")).rows
    at = next(k for k, row in enumerate(rows) if row["type"] == "step/end")
    rows.insert(at, {"type": "tool/result", "data": {"turn": 1, "step": 1, "callId": "call_1",
                                                     "content": [{"type": "text", "text": RESULT}]}})
    write_log(folder, "session.jsonl", header("p"), rows)
    return load_scenario(folder)


def _replay(scenario: Scenario, settings: RunSettings, result: str) -> tuple[Run, object]:
    run = Run("r", scenario, settings)
    first = [{"role": "user", "content": "read it"}]
    second = [*first, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": '{"path": "a"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": result}]
    outcome = None
    for messages in (first, second):
        body = json.dumps({"model": "m", "stream": False, "messages": messages}).encode()
        outcome = run.answer("p", DEFAULT.decode_request(body), DEFAULT, (), body)
    return run, outcome


def test_a_reminder_appended_to_a_tool_result_agrees_by_default_and_is_noted(tmp_path: Path) -> None:
    run, _ = _replay(_scenario(tmp_path / "s"), RunSettings(), RESULT + REMINDER)
    report = build_report(run)
    assert report.divergences == [] and report.failures == []
    [notice] = report.notices
    assert (notice.kind, notice.session, notice.call) == ("reminder_ignored", "session.jsonl", 1)
    assert "<system-reminder>" in notice.message and "--strict" in notice.message


def test_a_result_that_differs_besides_its_reminder_still_diverges(tmp_path: Path) -> None:
    run, _ = _replay(_scenario(tmp_path / "s"), RunSettings(), RESULT.replace("snow", "rain") + REMINDER)
    [divergence] = build_report(run).divergences
    assert divergence.what == "the tool result for call_1"


def test_the_same_result_notes_nothing(tmp_path: Path) -> None:
    run, _ = _replay(_scenario(tmp_path / "s"), RunSettings(), RESULT)
    assert build_report(run).notices == []


def test_under_strict_a_reminder_is_compared_exactly(tmp_path: Path) -> None:
    _, outcome = _replay(_scenario(tmp_path / "s"), RunSettings(strict=True), RESULT + REMINDER)
    assert isinstance(outcome, Refusal) and outcome.code == "request_diverged"


def test_with_normalize_off_a_reminder_is_compared_exactly(tmp_path: Path) -> None:
    run, _ = _replay(_scenario(tmp_path / "s"), RunSettings(normalize=False), RESULT + REMINDER)
    assert [d.what for d in build_report(run).divergences] == ["the tool result for call_1"]
