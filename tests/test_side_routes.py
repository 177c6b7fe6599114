"""Side routes (a title model beside the conversation) and ready files, through the openai SDK."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from mockllm.cli.tree_view import describe_entry, describe_suite, suite_to_json
from mockllm.cli.validate import check_suite
from mockllm.errors import ScenarioError
from mockllm.scenario.load import load_scenario, load_suite
from tests.conftest import http, new_run, run_state
from tests.logbuilder import (
    CORPUS,
    chunks_entry,
    corpus_or_skip,
    header,
    text_call,
    write_log,
    write_override,
    write_sessions,
)

PRIMARY = "rec-primary"
TITLE = "title-model"


def client(base_url: str, session: str = PRIMARY) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0,
                              default_headers={"x-mockllm-session": session})


async def say(base_url: str, model: str = "deepseek-v4-flash", text: str = "go") -> str:
    async with client(base_url) as c:
        done = await c.chat.completions.create(model=model, messages=[{"role": "user", "content": text}])
    return done.choices[0].message.content or ""


def titled_tree(folder: Path, *, repeat: bool | None = None, titles: tuple[str, ...] = ("A fine title",)) -> Path:
    """A primary with two calls, and a title route whose script is an entry array in title.json."""
    write_sessions(folder, {PRIMARY: [text_call("MAIN ONE"), text_call("MAIN TWO")]})
    (folder / "title.json").write_text(json.dumps([chunks_entry(text_call(t)) for t in titles]))
    route: dict[str, Any] = {"model": TITLE, "script": "title.json"}
    if repeat is not None:
        route["repeat"] = repeat
    (folder / "mockllm.json").write_text(json.dumps({"side_routes": [route]}))
    return folder


async def test_a_title_call_between_two_main_calls_gets_the_routes_script(serve, tmp_path):
    server = await serve(titled_tree(tmp_path / "titled"))
    run, base = await new_run(server.base_url, "titled")
    assert await say(base) == "MAIN ONE"
    assert await say(base, model=TITLE, text="name this session") == "A fine title"
    assert await say(base) == "MAIN TWO"
    status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
    assert status == 200 and isinstance(report, dict)
    assert report["failures"] == [] and report["consumed"] is True
    assert [(s["file"], s["served"]) for s in report["sessions"]] == [("session.jsonl", 2)]
    assert report["side_routes"] == [{"model": TITLE, "file": "title.json", "repeat": False, "calls": 1,
                                      "served": 1, "entries": 1, "remaining": 0}]


async def test_an_unused_title_route_leaves_the_run_unconsumed(serve, tmp_path):
    server = await serve(titled_tree(tmp_path / "titled"))
    run, base = await new_run(server.base_url, "titled")
    assert [await say(base), await say(base)] == ["MAIN ONE", "MAIN TWO"]
    state = await run_state(server.base_url, run)
    assert state["consumed"] is False
    assert state["side_routes"][0]["remaining"] == 1


async def test_a_route_past_its_end_is_410_naming_the_route(serve, tmp_path):
    server = await serve(titled_tree(tmp_path / "titled"))
    run, base = await new_run(server.base_url, "titled")
    assert await say(base, model=TITLE) == "A fine title"
    with pytest.raises(openai.APIStatusError) as caught:
        await say(base, model=TITLE)
    assert caught.value.status_code == 410
    assert caught.value.body["code"] == "script_exhausted"
    assert "side route 'title-model' (title.json) got call 1 (0-based)" in caught.value.message
    assert await say(base) == "MAIN ONE"  # the session's own script is untouched
    state = await run_state(server.base_url, run)
    assert [(f["code"], f["call"]) for f in state["failures"]] == [("script_exhausted", 1)]
    assert state["bindings"] == {PRIMARY: PRIMARY}


async def test_repeat_serves_the_last_entry_again(serve, tmp_path):
    server = await serve(titled_tree(tmp_path / "warm", repeat=True, titles=("warm one", "warm two")))
    run, base = await new_run(server.base_url, "warm")
    got = [await say(base, model=TITLE) for _ in range(4)]
    assert got == ["warm one", "warm two", "warm two", "warm two"]
    assert [await say(base), await say(base)] == ["MAIN ONE", "MAIN TWO"]
    state = await run_state(server.base_url, run)
    assert state["consumed"] is True and state["failures"] == []
    assert (state["side_routes"][0]["calls"], state["side_routes"][0]["served"]) == (4, 2)


async def test_each_run_has_its_own_route_cursor(serve, tmp_path):
    server = await serve(titled_tree(tmp_path / "titled"))
    _, first = await new_run(server.base_url, "titled")
    _, second = await new_run(server.base_url, "titled")
    assert await say(first, model=TITLE) == "A fine title"
    assert await say(second, model=TITLE) == "A fine title"


async def test_a_session_log_can_be_a_routes_script(serve, tmp_path):
    folder = write_sessions(tmp_path / "logged", {PRIMARY: [text_call("MAIN ONE")]})
    write_log(folder, "title.jsonl", header("title-session"),
              [{"type": "assistant/chunk", "seq": n, "time": n, "data": {"turn": 1, "step": 1, "chunk": c}}
               for n, c in enumerate(text_call("Logged title"))])
    (folder / "mockllm.json").write_text(json.dumps({"side_routes": [{"model": TITLE, "script": "title.jsonl"}]}))
    server = await serve(folder)
    _, base = await new_run(server.base_url, "logged")
    assert await say(base, model=TITLE) == "Logged title"
    assert await say(base) == "MAIN ONE"


def _title_fixture(tmp_path: Path) -> Path:
    corpus_or_skip()
    folder = tmp_path / "acp-agent--session-title-after-turn"
    shutil.copytree(CORPUS / "v0-newer" / folder.name, folder)
    return folder


async def test_the_real_title_fixture_with_side_route_on_the_command_line(serve, tmp_path):
    """dsh runs this fixture with a second replay for its title model; one mockllm serves both."""
    corpus_or_skip()
    fixture = CORPUS / "v0-newer" / "acp-agent--session-title-after-turn"
    server = await serve(fixture, side_routes=[f"{TITLE}=replay.override.json"])
    run, base = await new_run(server.base_url, fixture.name)
    # The header carries the session's id for both calls, as dsh sends it.
    assert await say(base) == "TITLE_DONE"
    assert await say(base, model=TITLE) == "Late durable session title"
    status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
    assert status == 200 and isinstance(report, dict) and report["consumed"] is True


def test_a_sidecar_named_by_a_route_is_the_routes_not_the_primarys(tmp_path):
    folder = _title_fixture(tmp_path)
    # Read plainly (DESIGN.md §1), the sidecar replaces the primary's script.
    assert [describe_entry(e) for e in load_scenario(folder).primary.entries] == [
        '"Late durable session title"; finish stop']
    (folder / "mockllm.json").write_text(json.dumps({"side_routes": [{"model": TITLE,
                                                                       "script": "replay.override.json"}]}))
    routed = load_scenario(folder)
    assert [describe_entry(e) for e in routed.primary.entries] == ['"TITLE_DONE"; finish stop']
    assert [describe_entry(e) for e in routed.side_routes[0].entries] == ['"Late durable session title"; finish stop']


def test_inspect_check_and_scenarios_show_side_routes(tmp_path):
    suite = load_suite(titled_tree(tmp_path / "titled"), keep_logs=True)
    assert suite_to_json(suite)["scenarios"][0]["side_routes"] == [
        {"model": TITLE, "file": "title.json", "repeat": False, "entries": 1}]
    assert "  side route: model title-model <- title.json  (1 entry)" in describe_suite(suite)
    assert check_suite(suite) == []


@pytest.mark.parametrize("manifest, problem", [
    ({"side_routes": [{"model": TITLE, "script": "missing.json"}]}, "its script missing.json is not a file"),
    ({"side_routes": [{"model": TITLE}]}, 'side_routes[0]: expected {"model"'),
    ({"side_routes": [{"model": TITLE, "script": "title.json"}, {"model": TITLE, "script": "title.json"}]},
     "declared twice: title-model"),
], ids=["missing-script", "no-script", "model-twice"])
def test_a_broken_manifest_is_a_clear_error(tmp_path, manifest, problem):
    folder = titled_tree(tmp_path / "titled")
    (folder / "mockllm.json").write_text(json.dumps(manifest))
    with pytest.raises(ScenarioError) as caught:
        load_scenario(folder)
    assert problem in str(caught.value)


# -- ready files -----------------------------------------------------------------------------------

async def _first_event_then_wait(url: str, ready: Path, body: dict[str, Any]) -> tuple[bool, bytes, bool]:
    """Stream a hang: (ready file existed before, first event, ready file exists after it)."""
    before = ready.exists()
    async with aiohttp.ClientSession() as session, session.post(
        url, json=body, headers={"x-mockllm-session": "live"}) as response:
        assert response.status == 200
        first = await response.content.readuntil(b"\n\n")
        # The server writes the file right after that delta's write; allow it a moment to land.
        for _ in range(200):
            if ready.exists():
                break
            await asyncio.sleep(0.005)
        return before, first, ready.exists()


async def test_a_hangs_ready_file_appears_in_the_runs_cwd_after_the_first_delta(serve, tmp_path):
    corpus_or_skip()
    fixture = CORPUS / "v0-newer" / "acp-agent--cancel"
    work = tmp_path / "work"
    work.mkdir()
    server = await serve(fixture)
    run, base = await new_run(server.base_url, fixture.name, cwd=str(work))
    ready = work / ".dsh-snapshot-stream-ready"
    body = {"model": "m", "messages": [{"role": "user", "content": "start"}], "stream": True}
    before, first, after = await _first_event_then_wait(f"{base}/chat/completions", ready, body)
    assert before is False
    assert b'"content":"partial"' in first
    assert after is True
    state = await run_state(server.base_url, run)
    # The client left: the hang is released and nothing is held any more.
    for _ in range(200):
        if not state["held"]:
            break
        await asyncio.sleep(0.005)
        state = await run_state(server.base_url, run)
    assert state["held"] == [] and state["holding"] == 0


async def test_without_a_run_cwd_nothing_is_written_and_the_report_says_the_hang_is_held(serve, tmp_path):
    folder = write_sessions(tmp_path / "hang", {PRIMARY: [text_call("x")]})
    write_override(folder, [{"kind": "hang", "readyFile": "ready.flag"}])
    server = await serve(folder)
    run, base = await new_run(server.base_url, "hang")
    async with aiohttp.ClientSession() as session, session.post(
        f"{base}/chat/completions", json={"messages": [{"role": "user", "content": "go"}], "stream": True},
        headers={"x-mockllm-session": PRIMARY},
    ) as response:
        await response.content.readuntil(b"\n\n")
        state = await run_state(server.base_url, run)
        assert state["held"] == [{"session": PRIMARY, "script": "session.jsonl", "call": 0,
                                  "ready_file": "ready.flag", "ready_file_written": False}]
    assert not any(p.name == "ready.flag" for p in tmp_path.rglob("*"))


@pytest.mark.parametrize("ready_file, problem", [
    ("../outside", "leaves the run's cwd"),
    ("/etc/ready", "is absolute"),
], ids=["traversal", "absolute"])
def test_a_ready_file_outside_the_cwd_is_refused_at_load_naming_file_and_line(tmp_path, ready_file, problem):
    folder = write_sessions(tmp_path / "bad", {PRIMARY: [text_call("x")]})
    (folder / "replay.override.json").write_text(
        '[\n  {"kind": "chunks", "chunks": []},\n  {"kind": "hang", "readyFile": ' + json.dumps(ready_file) + "}\n]")
    suite = load_suite(folder, keep_logs=True)
    [diagnostic] = check_suite(suite)
    assert f"{folder / 'replay.override.json'}:3" in str(diagnostic)
    assert problem in str(diagnostic)


def test_inspect_and_check_take_side_route_as_serve_does(tmp_path, capsys):
    from mockllm.cli.main import main

    folder = _title_fixture(tmp_path)
    assert main(["inspect", str(folder), "--json", "--side-route", f"{TITLE}=replay.override.json"]) == 0
    [scenario] = json.loads(capsys.readouterr().out)["scenarios"]
    assert scenario["side_routes"] == [{"model": TITLE, "file": "replay.override.json", "repeat": False,
                                        "entries": 1}]
    assert main(["check", str(folder), "--side-route", f"{TITLE}=replay.override.json"]) == 0
    assert capsys.readouterr().out.startswith("OK: 1 scenario")
