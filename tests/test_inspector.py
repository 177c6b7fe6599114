"""The inspector's views with no socket: runs driven directly (`Run.answer`), their report Structs
rendered as the one-file report and the live page's run view, and the text asserted."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from mockllm.cli.main import main
from mockllm.inspector.markup import run_html
from mockllm.inspector.pages import live_page, report_page
from mockllm.inspector.tree import draw_tree
from mockllm.inspector.view import Outcome, outcome_of, run_view
from mockllm.options import RunSettings
from mockllm.replay.faults import Fault
from mockllm.replay.reporting import build_state
from mockllm.replay.run import Run
from mockllm.scenario.load import load_scenario
from mockllm.scenario.summary import ScenarioSummary, SessionSummary, SideRouteSummary, summarize
from mockllm.wire import DEFAULT
from tests.logbuilder import FORK_ID, PRIMARY_ID, SPAWN_ID, fork_tree, text_call, write_mixed_tree, write_override

HELLO = {"role": "user", "content": "hello"}
PARENT = {"role": "assistant", "content": "parent answer"}


def ask(run: Run, session: str, messages: list[dict[str, Any]], **headers: str) -> None:
    body = json.dumps({"model": "m", "stream": True, "messages": messages}).encode()
    raw = ((b"x-mockllm-session", session.encode()), *((k.encode(), v.encode()) for k, v in headers.items()))
    run.answer(session, DEFAULT.decode_request(body), DEFAULT, raw, body)


def text_of(html: str) -> str:
    """The page's text, roughly as a reader sees it: tags out, entities decoded, spaces collapsed."""
    without = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.DOTALL)
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", without)).split())


@pytest.fixture
def fork(tmp_path: Path) -> Run:
    """A fork tree replayed with the primary's second call diverged and its last call not made."""
    run = Run("run-7", load_scenario(fork_tree(tmp_path / "fork")))
    ask(run, "lead", [HELLO], **{"x-api-key": "sk-secret-1", "x-request-id": "t-1"})
    ask(run, "lead", [HELLO, PARENT, {"role": "user", "content": "fork that <b>now</b>"}])
    ask(run, "forked", [HELLO, PARENT, {"role": "user", "content": "child task"}])
    return run


def report_of(run: Run, *, ended: bool = True) -> str:
    summary = summarize(run.scenario)
    return report_page(run_view(build_state(run), summary, ended=ended), summary)


def test_the_report_says_which_session_diverged_where_and_how(fork: Run) -> None:
    text = text_of(report_of(fork))
    assert "mockllm report: run-7 of fork 2 problems" in text
    assert ("diverged: session session.jsonl (live id lead) call 1 (0-based), the last user message: expected "
            "'fork it', got 'fork that <b>now</b>'") in text
    assert ("unconsumed: session session.jsonl (primary, recorded id p) served calls 0-1 (0-based); call 2 (0-based) "
            "of 3 not requested") in text
    assert ("Where requests first differed from the recording session.jsonl call 1 (0-based) (live id lead): "
            "diverged at the last user message") in text
    assert "expected fork it got fork that <b>now</b> diff …fork [-it][+that <b>now</b>]…" in text


def test_the_report_draws_the_tree_and_a_lane_per_session_with_its_cursor(fork: Run) -> None:
    text = text_of(report_of(fork))
    cut = summarize(fork.scenario).sessions[1].cut
    assert f"primary session.jsonl 3 entries · id p fork session.1.jsonl cut {cut} 1 entry · id c" in text
    assert "primary session.jsonl recorded id p · live id lead · by content: its first request matched served 2 / 3" \
        in text
    assert (f"fork session.1.jsonl cut {cut} recorded id c · live id forked · by content: its first request matched "
            "served 1 / 1") in text
    assert "Calls: 3 calls" in text
    assert "#1 session.jsonl call 1 (0-based) of 3 diverged 200 · chunks" in text


def test_every_call_shows_its_request_as_the_journal_keeps_it_and_nothing_secret(fork: Run) -> None:
    html = report_of(fork)
    text = text_of(html)
    assert "x-request-id t-1" in text and "x-api-key [redacted]" in text
    assert "sk-secret-1" not in html
    assert '"content": "fork that <b>now</b>"' in text  # the body, indented, escaped in the HTML
    assert "<b>now</b>" not in html.replace("&lt;b&gt;now&lt;/b&gt;", "")  # nothing from a request is markup


def test_the_report_reads_with_no_script_and_carries_its_data(fork: Run) -> None:
    html = report_of(fork)
    assert "<link" not in html and "src=" not in html and "http://" not in html and "https://" not in html
    # The diverged call's details are open as written, not opened by a script.
    assert re.search(r'<details class="call o-diverged" id="run-7-call-1"[^>]* open>', html)
    blob = re.search(r'<script type="application/json" id="mockllm-report">(.*?)</script>', html, re.DOTALL)
    assert blob is not None and "</" not in blob.group(1)
    data = json.loads(blob.group(1))
    assert data["divergences"][0]["got"] == "fork that <b>now</b>"
    assert data["journal"][1]["body"] is None  # the bodies are in the HTML once, not twice


def test_a_live_run_is_in_progress_and_its_view_fetches_bodies_on_demand(fork: Run) -> None:
    view = run_view(build_state(fork, bodies=False), summarize(fork.scenario))
    html = run_html(view, body_url=lambda run, n: f"/calls/{run}/{n}", actions=True)
    text = text_of(html)
    assert "run-7 of fork live 1 problem" in text and "diverged: session session.jsonl" in text
    assert "unconsumed" not in text  # calls left are no problem while it runs
    assert 'data-src="/calls/run-7/1"' in html and "&quot;messages&quot;" not in html  # no body inline
    assert 'data-action="reset"' in html and 'data-action="end"' in html


def test_faults_retries_failures_side_routes_and_strangers_each_get_a_lane_and_a_colour(tmp_path: Path) -> None:
    folder = write_override(tmp_path / "o", [{"kind": "chunks", "chunks": text_call("one")}]).parent
    write_override(folder / "side", [{"kind": "chunks", "chunks": text_call("TITLE")}])
    (folder / "mockllm.json").write_text(json.dumps({"side_routes": [{"model": "title",
                                                                       "script": "side/replay.override.json"}]}))
    run = Run("r", load_scenario(folder), RunSettings(faults=(Fault(call=0, status=429),)))
    ask(run, "agent", [HELLO])  # the fault
    ask(run, "agent", [HELLO])  # its retry
    ask(run, "agent", [HELLO])  # past the end
    ask(run, "other", [HELLO])  # every script is bound
    body = json.dumps({"model": "title", "stream": True, "messages": [HELLO]}).encode()
    run.answer(None, DEFAULT.decode_request(body), DEFAULT, (), body)
    view = run_view(build_state(run), summarize(run.scenario), ended=True)
    assert [(c.lane, c.outcome) for c in view.calls] == [
        ("replay.override.json", "fault"), ("replay.override.json", "retry"), ("replay.override.json", "failed"),
        ("live:other", "failed"), ("side/replay.override.json", "served")]
    assert [c.failure.code if c.failure else None for c in view.calls] == [
        None, None, "script_exhausted", "unrecorded_session", None]
    text = text_of(run_html(view))
    assert "fault at replay.override.json call 0 (0-based) (live id agent): status 429" in text
    assert "unrecorded live session other" in text and "side route side/replay.override.json model title" in text
    assert "primary replay.override.json recorded id" in text and "1 retry served 1 / 1" in text


@pytest.mark.parametrize(("record", "outcome"), [
    ({}, "served"),
    ({"diverged": "the last user message"}, "diverged"),
    ({"error": "request_diverged", "diverged": "…"}, "failed"),
    ({"fault": "status 429", "diverged": "…"}, "fault"),
    ({"retry": True}, "retry"),
    ({"live": True}, "live"),
], ids=["served", "diverged", "refused-under-strict", "fault-first", "retry", "live"])
def test_one_colour_per_call(record: dict[str, Any], outcome: Outcome) -> None:
    assert outcome_of(record) == outcome


def test_the_live_page_lists_scenarios_broken_ones_and_runs(fork: Run) -> None:
    summary = summarize(fork.scenario)
    views = [run_view(build_state(fork, bodies=False), summary)]
    html = live_page([summary], {"bad": ["/x/bad/session.jsonl:2: malformed JSON"]}, views,
                     base_urls={"fork": "http://127.0.0.1:1/scenarios/fork/v1"}, body_url=lambda r, n: "", server="s")
    text = text_of(html)
    assert "fork 2 sessions · 4 entries http://127.0.0.1:1/scenarios/fork/v1" in text
    assert "bad broken: not served /x/bad/session.jsonl:2: malformed JSON" in text
    assert 'new EventSource(ADMIN + "/events")' in html  # the live script, inline


def test_the_tree_is_drawn_as_a_person_would() -> None:
    def s(sid: str, parent: str | None, kind: Any = "spawn", cut: int = 0) -> SessionSummary:
        return SessionSummary(sid, f"{sid}.jsonl", parent, kind, cut, 9, 2)

    summary = ScenarioSummary("t", [s("p", None, "primary"), s("a", "p"), s("f", "a", "fork", 14), s("b", "p"),
                                    s("lost", "gone")], [SideRouteSummary("title", "t.json", True, 1)])
    assert draw_tree(summary) == [
        "t",
        "├─ p.jsonl  primary  2 entries  id p",
        "│  ├─ a.jsonl  spawn  2 entries  id a",
        "│  │  └─ f.jsonl  fork, cut 14  2 entries  id f",
        "│  └─ b.jsonl  spawn  2 entries  id b",
        "├─ lost.jsonl  spawn  2 entries  id lost  (its parent gone is not in this scenario)",
        "└─ side route: model title <- t.json  1 entry  (its last entry repeats)",
    ]


def test_inspect_tree_draws_each_scenario_then_what_is_broken(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    write_mixed_tree(tmp_path / "suite" / "mixed")
    (tmp_path / "suite" / "bad").mkdir()
    (tmp_path / "suite" / "bad" / "session.jsonl").write_text('{"type":"session","version":1}\n')
    assert main(["inspect", str(tmp_path / "suite"), "--tree"]) == 1  # a broken scenario, as the text form
    lines = capsys.readouterr().out.splitlines()
    assert lines[:4] == [
        "mixed",
        f"└─ session.jsonl  primary  4 entries  id {PRIMARY_ID}",
        f"   ├─ session.1.jsonl  spawn  2 entries  id {SPAWN_ID}",
        f"   └─ session.2.jsonl  fork, cut 18  2 entries  id {FORK_ID}",
    ]
    assert lines[5] == "broken: bad" and "session.jsonl:1" in lines[6]
    with pytest.raises(SystemExit):
        main(["inspect", str(tmp_path / "suite"), "--tree", "--json"])  # one shape at a time
