"""The run as a state machine, with no socket: what `Run.answer` decides each call gets.

Binding (by recorded id, by first-call order, by content), cursors, side routes, the journal
record, failures, strict divergence, holds and pacing schedules: a bug in any of them fails here
before any HTTP test.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from mockllm.options import RunSettings
from mockllm.replay.outcome import Hold, Outcome, Refusal, Stream, Whole
from mockllm.replay.reporting import build_report
from mockllm.replay.run import Run
from mockllm.scenario.load import load_scenario
from mockllm.wire import DEFAULT
from tests.logbuilder import Log, header, text_call, write_log, write_override, write_sessions

NO_HEADERS: tuple[tuple[bytes, bytes], ...] = ()


def ask(run: Run, session: str | None, text: str, *, stream: bool = True, model: str = "m",
        history: list[dict[str, Any]] | None = None) -> Outcome:
    """One chat completions call of `session` (None: header-less) whose new input is `text`."""
    body = json.dumps({"model": model, "stream": stream, "stream_options": {"include_usage": True},
                       "messages": [*(history or []), {"role": "user", "content": text}]}).encode()
    return run.answer(session, DEFAULT.decode_request(body), DEFAULT, NO_HEADERS, body)


def served_text(outcome: Outcome) -> str:
    """The text a chat completions answer carries (streamed or whole)."""
    assert isinstance(outcome, Stream | Whole), outcome
    if isinstance(outcome, Whole):
        return str(json.loads(outcome.body)["choices"][0]["message"]["content"])
    text = ""
    for frame in outcome.reply.frames:
        data = frame.removeprefix(b"data: ").strip()
        if data.startswith(b"{"):
            for choice in json.loads(data).get("choices", []):
                text += choice.get("delta", {}).get("content") or ""
    return text


@pytest.fixture
def two(tmp_path: Path) -> Run:
    """A primary `p` (two calls) and a spawn child `c` (one call), each asked `task of <id>` first."""
    return Run("r", load_scenario(write_sessions(tmp_path / "two", {
        "p": [text_call("P0"), text_call("P1")], "c": [text_call("C0")]})))


def test_a_recorded_id_binds_to_its_session_and_each_cursor_moves_on_its_own(two: Run) -> None:
    assert served_text(ask(two, "c", "task of c")) == "C0"
    assert served_text(ask(two, "p", "task of p")) == "P0"
    assert served_text(ask(two, "p", "next")) == "P1"
    assert {live: b.cursor for live, b in two.bindings.items()} == {"c": 1, "p": 2}
    assert two.consumed and not two.failures


async def test_requests_are_compared_once_the_loop_is_free_or_when_a_report_drains_them_first(two: Run) -> None:
    """Requests are compared off the client's wait: after the answer, when the loop is next free
    (never a wake-up of its own); a report drains the queue first, and the pending review is
    cancelled."""
    served_text(ask(two, "p", "not what p was asked"))
    assert not two.divergences  # not on the answer's path
    await asyncio.sleep(0)  # the loop is free: compared
    assert [d.what for d in two.divergences.values()] == ["the last user message"]
    assert two._review_soon is None
    served_text(ask(two, "c", "not what c was asked"))
    pending = two._review_soon
    assert pending is not None and not pending.cancelled()
    assert len(build_report(two).divergences) == 2  # drained by the report itself
    assert pending.cancelled() and two._review_soon is None


def test_fresh_ids_bind_in_first_call_order_under_bind_order(two: Run) -> None:
    run = Run("r", two.scenario, RunSettings(bind="order"))
    assert served_text(ask(run, "second", "task of c")) == "P0"  # the first script, whatever it asks
    assert served_text(ask(run, "first", "task of p")) == "C0"


def test_content_binding_is_the_default_and_follows_the_first_inputs_whatever_the_arrival_order(
        tmp_path: Path) -> None:
    scenario = load_scenario(write_sessions(tmp_path / "two", {
        "p": [text_call("P0")], "c1": [text_call("C1")], "c2": [text_call("C2")]}))
    run = Run("r", scenario)
    assert served_text(ask(run, "late", "task of c2")) == "C2"
    assert served_text(ask(run, "early", "task of c1")) == "C1"
    assert served_text(ask(run, "lead", "task of p")) == "P0"
    run.review_pending()
    assert not run.divergences and not run.notices


def test_twins_bind_among_themselves_in_recorded_order(tmp_path: Path) -> None:
    scenario = load_scenario(write_sessions(tmp_path / "twins", {
        "p": [text_call("P0")], "a": [text_call("A0")], "b": [text_call("B0")]}))
    for session in scenario.sessions[1:]:  # both children were asked the same
        session.inputs[0] = scenario.sessions[1].inputs[0]
    run = Run("r", scenario)
    assert [served_text(ask(run, live, "task of a")) for live in ("x", "y")] == ["A0", "B0"]


def _specialists(folder: Path, systems: dict[str, str | None]) -> Path:
    """A coordinator and one specialist per `systems` key, all asked "Oslo" first, each log naming
    its system prompt in a `request/header` as the recorder writes it (None: no header)."""
    write_log(folder, "session.jsonl", header("p"), Log().turn("Topics: Oslo", text_call("P0")).rows)
    for number, (name, system) in enumerate(systems.items(), 1):
        rows = Log().turn("Oslo", text_call(f"{name} on Oslo")).rows
        if system is not None:  # before the call's step/start, as dsh writes it
            step = next(k for k, row in enumerate(rows) if row["type"] == "step/start")
            rows.insert(step, {"type": "request/header", "data": {"header": {"system": system}, "reason": "initial"}})
        write_log(folder, f"session.{number}.jsonl", header(name, created_at=1 + number, parent="p"), rows)
    return folder


def test_twins_are_told_apart_by_the_system_prompt_their_logs_name(tmp_path: Path) -> None:
    """Specialists asked the same question differ only by their instructions: each binds to the twin
    whose recorded system prompt is its own, whatever order they start in (masked as inputs are:
    a date may differ, `{{cwd}}` is the run's cwd)."""
    scenario = load_scenario(_specialists(tmp_path / "same-question", {
        "historian": "You are the historian. Today is 2026-01-05.", "chef": "You are the chef. Cook in {{cwd}}.",
        "geographer": "You are the geographer."}))
    assert [s.system for s in scenario.sessions] == [None, "You are the historian. Today is 2026-01-05.",
                                                     "You are the chef. Cook in {{cwd}}.", "You are the geographer."]
    for order in (("geographer", "chef", "historian"), ("chef", "historian", "geographer")):
        run = Run("r", scenario, RunSettings(cwd="/srv/app"))
        prompts = {"historian": "You are the historian. Today is 2027-03-09.",
                   "chef": "You are the chef. Cook in /srv/app.", "geographer": "You are the geographer."}
        served = {role: served_text(ask(run, None, "Oslo", history=[{"role": "system", "content": prompts[role]}]))
                  for role in order}
        assert served == {role: f"{role} on Oslo" for role in order}
        run.review_pending()
        assert not run.divergences and not run.notices


def test_twins_with_no_system_prompt_that_matches_bind_in_recorded_order(tmp_path: Path) -> None:
    scenario = load_scenario(_specialists(tmp_path / "same-question", {
        "a": "You are the historian.", "b": None, "c": "{{system}}"}))
    assert [s.system for s in scenario.sessions[1:]] == ["You are the historian.", None, None], (
        "a templated prompt (dsh's fixtures) names none")
    run = Run("r", scenario)
    systems = {"x": "You are the chef.", "y": "You are the historian.", "z": "You are the chef."}
    asked = [ask(run, live, "Oslo", history=[{"role": "system", "content": text}]) for live, text in systems.items()]
    assert [served_text(o) for o in asked] == ["a on Oslo", "b on Oslo", "c on Oslo"]


def test_content_binding_with_nothing_alike_binds_in_script_order_and_notes_it(two: Run) -> None:
    # Nothing alike: no script is close, so the first unbound one in script order, noted.
    assert served_text(ask(two, "x", "something never recorded")) == "P0"
    (notice,) = two.notices
    assert notice.kind == "bound_in_order" and "no unbound recording is alike" in notice.message
    assert "session.jsonl" in notice.message
    two.review_pending()  # and the difference itself is a divergence of its first call
    assert two.divergences[0].what == "the last user message"


def test_the_journal_record_says_what_was_served(two: Run) -> None:
    outcome = ask(two, "p", "task of p")
    record = outcome.record
    assert (record.session, record.script, record.call, record.kind, record.status) == (
        "p", "session.jsonl", 0, "ChunksEntry", 200)
    assert [r.session for r in two.journal] == ["p"]


def test_past_the_end_is_a_410_refusal_recorded_as_a_failure(two: Run) -> None:
    ask(two, "c", "task of c")
    outcome = ask(two, "c", "again")
    assert isinstance(outcome, Refusal) and (outcome.status, outcome.code) == (410, "script_exhausted")
    assert "session.1.jsonl" in outcome.message and "1 entries" in outcome.message
    assert [(f.code, f.session, f.call) for f in two.failures.first] == [("script_exhausted", "c", 1)]
    assert outcome.record.error == "script_exhausted"


def test_a_new_session_when_every_script_is_bound_is_a_404(two: Run) -> None:
    ask(two, "a", "task of p")
    ask(two, "b", "task of c")
    outcome = ask(two, "stranger", "hi")
    assert isinstance(outcome, Refusal) and (outcome.status, outcome.code) == (404, "unrecorded_session")
    assert "session.jsonl<-a" in outcome.message


def test_strict_refuses_a_diverged_call_and_moves_nothing(two: Run) -> None:
    run = Run("r", two.scenario, RunSettings(strict=True))
    outcome = ask(run, "p", "not what was recorded")
    assert isinstance(outcome, Refusal) and (outcome.status, outcome.code) == (409, "request_diverged")
    assert "expected 'task of p'" in outcome.message
    assert run.bindings == {}  # no binding, no cursor
    assert served_text(ask(run, "p", "task of p")) == "P0"


def test_a_diverged_call_is_reviewed_after_it_is_answered(two: Run) -> None:
    outcome = ask(two, "p", "changed prompt")
    assert served_text(outcome) == "P0" and not two.divergences  # answered first, compared later
    two.review_pending()
    assert two.divergences[0].what == "the last user message" and outcome.record.diverged


def test_a_side_route_has_its_own_cursor_and_never_binds(tmp_path: Path) -> None:
    folder = write_sessions(tmp_path / "s", {"p": [text_call("P0")]})
    write_override(folder / "side", [{"kind": "chunks", "chunks": text_call("TITLE")}])
    routes = [{"model": "title", "script": "side/replay.override.json"}]
    (folder / "mockllm.json").write_text(json.dumps({"side_routes": routes}))
    run = Run("r", load_scenario(folder))
    assert served_text(ask(run, None, "name this chat", model="title")) == "TITLE"
    assert run.bindings == {} and run.side_calls == [1]
    refused = ask(run, None, "again", model="title")
    assert isinstance(refused, Refusal) and refused.status == 410 and "repeat" in refused.message


def test_a_hang_holds_a_stream_after_its_prefix_and_a_whole_request_outright(tmp_path: Path) -> None:
    write_override(tmp_path / "h", [{"kind": "hang", "readyFile": "ready"}, {"kind": "hang"}])
    run = Run("r", load_scenario(tmp_path / "h"), RunSettings(cwd="/work"))
    streamed = ask(run, "agent", "go")
    assert isinstance(streamed, Stream) and streamed.held == {"session": "agent",
                                                              "script": "replay.override.json", "call": 0}
    assert (streamed.ready_file, streamed.cwd) == ("ready", "/work")
    whole = ask(run, "agent", "go", stream=False)
    assert isinstance(whole, Hold) and whole.held["call"] == 1
    with run.holding_call(whole.held):
        assert run.holding == 1 and run.held == [whole.held]
    assert run.holding == 0 and run.held == []


def test_a_fixed_pace_plans_a_schedule_and_recorded_pace_notes_what_it_cannot_pace(tmp_path: Path) -> None:
    folder = write_sessions(tmp_path / "t", {"p": [text_call("a b c")]})
    paced = ask(Run("r", load_scenario(folder), RunSettings(pace="10")), "p", "task of p")
    assert isinstance(paced, Stream) and paced.schedule is not None
    assert paced.schedule.offsets == [k * 0.01 for k in range(len(paced.schedule.events))]
    write_override(tmp_path / "o", [{"kind": "chunks", "chunks": text_call("x")}])
    run = Run("r", load_scenario(tmp_path / "o"), RunSettings(pace="recorded"))
    burst = ask(run, None, "go")
    assert isinstance(burst, Stream) and burst.schedule is None
    assert [n.served for n in run.pacing.values()] == ["burst"]


def test_an_unmatched_template_is_a_422_failure(tmp_path: Path) -> None:
    write_override(tmp_path / "t", [{"kind": "chunks", "chunks": text_call("{{fromRequest:NOPE-(\\d+)}}")}])
    run = Run("r", load_scenario(tmp_path / "t"))
    outcome = ask(run, None, "no such marker")
    assert isinstance(outcome, Refusal) and (outcome.status, outcome.code) == (422, "from_request_unmatched")
    assert [f.code for f in run.failures.first] == ["from_request_unmatched"]


def test_a_fork_child_is_served_its_own_calls_not_its_seed(tmp_path: Path) -> None:
    first = Log().turn("hello", text_call("parent answer"))
    write_log(tmp_path / "f", "session.jsonl", header("p", created_at=1),
              Log().turn("hello", text_call("parent answer")).turn("fork it", text_call("parent done")).rows)
    child = [*first.rows, *Log(model=None).turn("child task", text_call("child answer")).rows]
    write_log(tmp_path / "f", "session.1.jsonl", header("c", created_at=2, parent="p", seed=len(first.rows)), child)
    run = Run("r", load_scenario(tmp_path / "f"))
    assert served_text(ask(run, "c", "child task")) == "child answer"
