"""Issue 25, losing a recording: hostile or unlucky input never costs what was recorded.

4. a session header that is not UTF-8 gets a clear 400 from `mockllm record`; the rest is recorded;
5. the same header on a served run is a 400, and the run's pages and report stay readable;
6. a recorder killed while it finishes leaves a tree that loads whole, or one that refuses to load;
7. a recorder killed under load keeps every call answered before the last moment (bounded lag);
9. `mockllm record --out SUITE` is refused when SUITE holds scenarios.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import openai
import pytest

from mockllm.cli.validate import check_suite
from mockllm.errors import RecordError
from mockllm.record.command import RecordOptions, closing_line, start_recorder
from mockllm.scenario.load import load_suite
from tests.conftest import http, new_run
from tests.logbuilder import RECORDINGS
from tests.raw_http import json_of, raw_request
from tests.scripted_upstream import ScriptedUpstream

LATIN1_SESSION = b"x-mockllm-session: agent-caf\xe9"  # what Python's urllib sends for `agent-café`
CHAT = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hello"}]}).encode()


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as up:
        yield up


async def chat(base_url: str, session: str, text: str) -> str:
    async with openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0,
                                  default_headers={"x-mockllm-session": session}) as client:
        stream = await client.chat.completions.create(model="m", stream=True,
                                                      messages=[{"role": "user", "content": text}])
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])


async def test_a_session_header_that_is_not_utf8_is_a_400_and_the_rest_is_recorded(upstream, tmp_path):
    out = tmp_path / "out"
    async with await start_recorder(RecordOptions(upstream.url, out, port=0)) as recorder:
        assert await chat(recorder.base_url + "/v1", "lead", "first") == "echo: first"
        status, _headers, body = await raw_request(recorder.base_url, b"/v1/chat/completions",
                                                  headers=(LATIN1_SESSION, b"Content-Type: application/json"),
                                                  body=CHAT)
        assert status == 400, body
        message = json_of(body)["error"]["message"]
        assert "x-mockllm-session" in message and "UTF-8" in message
        assert await chat(recorder.base_url + "/v1", "lead", "second") == "echo: second"
        assert await chat(recorder.base_url + "/v1", "helper", "third") == "echo: third"
    assert recorder.tree.failures == []
    assert sorted(p.name for p in out.iterdir()) == ["envelopes.jsonl", "session.1.jsonl", "session.jsonl"], \
        "no .partial left"
    suite = load_suite(out, keep_logs=True)
    assert [len(s.entries) for s in suite.scenarios["out"].sessions] == [2, 1]
    assert check_suite(suite) == []
    assert closing_line(recorder.tree) == f"mockllm stopped; recorded session.jsonl, session.1.jsonl in {out}"


def test_the_closing_line_names_only_files_written(tmp_path):
    """A write that failed is said, and its file is not claimed."""
    from mockllm.record.tree import SessionTree

    tree = SessionTree(tmp_path / "out")
    tree.close()
    assert closing_line(tree) == f"mockllm stopped; recorded no sessions in {tmp_path / 'out'}"
    tree.failures.append(OSError("disk full"))
    assert "1 write(s) failed" in closing_line(tree) and "disk full" in closing_line(tree)


async def test_a_session_header_that_is_not_utf8_leaves_the_runs_pages_readable(serve):
    server = await serve(RECORDINGS / "text-turn")
    run, base = await new_run(server.base_url, "text-turn")
    root = base.removesuffix("/v1")
    status, _, body = await raw_request(server.base_url, root.removeprefix(server.base_url).encode()
                                        + b"/v1/chat/completions",
                                        headers=(LATIN1_SESSION, b"Content-Type: application/json"), body=CHAT)
    assert status == 400, body
    assert "x-mockllm-session" in json_of(body)["error"]["message"]
    async with aiohttp.ClientSession() as client:
        for path in ("/_mockllm/", f"/_mockllm/runs/{run}", f"/_mockllm/runs/{run}/report.html",
                     f"/_mockllm/runs/{run}/view", "/_mockllm/runs"):
            async with client.get(server.base_url + path) as page:
                assert page.status == 200, (path, await page.text())
    status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
    assert status == 200 and isinstance(report, dict) and report["run"] == run


def test_record_refuses_a_suite_folder_as_its_out(tmp_path):
    """Point 9: recording into a suite would make the suite load as one scenario."""
    from mockllm.record.tree import SessionTree

    suite = tmp_path / "suite"
    (suite / "case").mkdir(parents=True)
    (suite / "case" / "session.jsonl").write_text((RECORDINGS / "text-turn" / "session.jsonl").read_text())
    with pytest.raises(RecordError, match="suite"):
        SessionTree(suite)
    assert sorted(p.name for p in suite.iterdir()) == ["case"], "nothing written into the suite"
    one = tmp_path / "group" / "case"  # a scenario folder one level down in a group is a suite too
    one.mkdir(parents=True)
    (one / "replay.override.json").write_text("[]")
    with pytest.raises(RecordError, match="suite"):
        SessionTree(tmp_path / "group")


def test_record_into_a_folder_of_plain_files_is_still_allowed(tmp_path):
    from mockllm.record.tree import SessionTree

    (tmp_path / "notes").mkdir()
    (tmp_path / "README.md").write_text("x")
    SessionTree(tmp_path).close()


def files_of(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


async def record_three_sessions(upstream: ScriptedUpstream, out: Path) -> None:
    async with await start_recorder(RecordOptions(upstream.url, out, port=0)) as recorder:
        for session in ("lead", "helper-1", "helper-2"):
            await chat(recorder.base_url + "/v1", session, f"hi from {session}")


@pytest.mark.parametrize("unfinished", ["session.2.jsonl", "session.jsonl"], ids=["a-child", "the-primary"])
async def test_a_tree_killed_while_it_finished_does_not_load_with_sessions_missing(upstream, tmp_path, unfinished):
    """Point 6: `kill -9` while the logs are renamed leaves some finished and some `.partial`."""
    out = tmp_path / "suite" / "killed"
    await record_three_sessions(upstream, out)
    (out / "replay.override.json").write_text('{"patches": []}')  # a sidecar is no excuse to load it either
    (out / unfinished).rename(out / (unfinished + ".partial"))
    suite = load_suite(tmp_path / "suite")
    assert "killed" not in suite.scenarios and "killed" in suite.broken
    assert ".partial" in str(suite.broken["killed"]) and "did not finish" in str(suite.broken["killed"])
    from mockllm.cli.main import main

    assert main(["check", str(tmp_path / "suite")]) != 0


async def test_a_recording_killed_before_it_finished_never_loads_as_an_override_only_scenario(upstream, tmp_path):
    """Killed while recording: every log `.partial`, and the provisional primary's sidecar written."""
    out = tmp_path / "suite" / "killed"
    await record_three_sessions(upstream, out)
    for log in out.glob("session*.jsonl"):
        log.rename(log.with_name(log.name + ".partial"))
    (tmp_path / "suite" / "ok").mkdir()
    (tmp_path / "suite" / "ok" / "session.jsonl").write_bytes((RECORDINGS / "text-turn" / "session.jsonl").read_bytes())
    suite = load_suite(tmp_path / "suite")
    assert "killed" in suite.skipped, "no log: not a scenario (DESIGN §1)"
    (out / "replay.override.json").write_text('{"patches": []}')
    suite = load_suite(tmp_path / "suite")
    assert "killed" in suite.broken, "a sidecar beside unfinished logs is no override-only scenario"


async def test_the_recorder_falls_behind_by_a_bounded_number_of_calls(upstream, tmp_path, monkeypatch):
    """Point 7: with a slow disk (each write 100 ms), the calls answered but not yet on disk stay few,
    so a recorder killed at any moment loses at most those (and the calls still streaming)."""
    import asyncio
    import time

    from mockllm.record import proxy, tree

    original = tree._append_rows

    def slow_append(*args: object) -> None:
        time.sleep(0.1)
        original(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(tree, "_append_rows", slow_append)
    monkeypatch.setattr(proxy, "LAG_BOUND", 2)
    out = tmp_path / "out"
    clients, calls = 4, 8
    async with await start_recorder(RecordOptions(upstream.url, out, port=0)) as recorder:
        backlog: list[int] = []

        async def agent(name: str) -> None:
            for k in range(calls):
                assert await chat(recorder.base_url + "/v1", name, f"{name} call {k}") == f"echo: {name} call {k}"
                backlog.append(recorder.recorder.backlog())

        await asyncio.gather(*(agent(f"agent-{n}") for n in range(clients)))
        on_disk = sum(p.read_bytes().count(b'"finish"') for p in out.glob("*.partial"))  # as if killed now
        # With the bound, each client adds at most its call in flight, its log write (two for a first
        # call) and its envelopes.jsonl line: a bound that does not grow with the calls made.
        allowed = proxy.LAG_BOUND + 3 * clients
        assert max(backlog) <= allowed, backlog
        assert on_disk >= clients * calls - allowed
    assert recorder.tree.failures == []
