"""A header-less Claude Code run recorded through the proxy, then replayed by mockllm's server.

The requests are Claude Code's shapes (`tests/claude_code.py`): a title call first, the main
conversation starting two subagents in parallel, the subagents' answers finishing in the reverse of
the order they started (the scripted upstream holds Oslo's first answer until Rome's is sent), and
the coordinator's next request bringing their results back, Rome's first. No mockllm header at all.
The recorded tree must have the shape of what happened: the main conversation as primary, the
subagents its children numbered in the order their first calls arrived, `createdAt` strictly
increasing in that order, the title call beside it (a side route with `--side-route`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from mockllm.cli.validate import check_suite
from mockllm.dsh.chunks import BlockEnd
from mockllm.dsh.reader import read_log
from mockllm.record.command import RecordOptions, start_recorder
from mockllm.scenario.load import load_scenario, load_suite
from tests.claude_code import CWD, HAIKU, OSLO, REQUESTS, ROME, SUMMARY, answer, body, heard
from tests.conftest import http, new_run, run_state
from tests.fake_upstream import FakeUpstream, running_upstream

Post = Callable[[str], Awaitable[bytes]]


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def run_claude_code(post: Post, arrived: Callable[[int], Awaitable[None]]) -> dict[str, bytes]:
    """Send Claude Code's requests as it does: the title call and the main call together, the two
    subagents together (Oslo's first), then Oslo's second step and the coordinator's next call.
    `arrived(n)` returns once n requests have arrived, so that those sent together arrive in order."""
    heard_back: dict[str, bytes] = {}

    async def send(name: str) -> None:
        heard_back[name] = await post(name)

    title = asyncio.create_task(send("title"))
    await arrived(1)
    await send("main-1")
    await title
    oslo = asyncio.create_task(send("agent-oslo-1"))
    await arrived(3)
    await send("agent-rome-1")
    await oslo
    await send("agent-oslo-2")
    await send("main-2")
    return heard_back


async def record_claude_code(out: Path, **options: Any) -> tuple[dict[str, bytes], FakeUpstream]:
    async with running_upstream() as upstream:
        answers = {name: answer(name) for name in REQUESTS}
        rome = answers["agent-rome-1"]
        rome_sent = rome.sent[len(rome.pieces) - 1] = asyncio.Event()
        answers["agent-oslo-1"].before[1] = rome_sent  # Oslo started first and ends last
        upstream.answers += [answers[name] for name in REQUESTS]
        async with await start_recorder(RecordOptions(upstream.base_url, out, port=0, **options)) as recorder, \
                aiohttp.ClientSession() as client:
            async def post(name: str) -> bytes:
                async with client.post(recorder.base_url + "/v1/messages", data=body(name),
                                       headers={"content-type": "application/json", "x-api-key": "sk-ant-live",
                                                "anthropic-version": "2023-06-01"}) as response:
                    assert response.status == 200, await response.text()
                    return await response.read()

            async def arrived(count: int) -> None:
                await _until(lambda: len(upstream.received) >= count)

            live = await run_claude_code(post, arrived)
    assert [json.loads(r["body"])["messages"][-1] == json.loads(body(n))["messages"][-1]
            for r, n in zip(upstream.received, REQUESTS, strict=True)] == [True] * len(REQUESTS)
    return live, upstream


def _headers(out: Path) -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text().splitlines()[0]) for p in sorted(out.glob("session*.jsonl"))}


def _texts(out: Path, file: str) -> list[str]:
    """The text each recorded call of a log answered with."""
    scenario = load_scenario(out)
    session = next(s for s in scenario.sessions if s.file == file)
    return ["".join(c.block.text or "" for c in getattr(e, "chunks", []) if isinstance(c, BlockEnd)
                    and c.block.type == "text") for e in session.entries]


async def replay(serve: Any, out: Path, **run: Any) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Claude Code's requests again, header-less, against the recording; what it heard and the run's report."""
    server = await serve(out)
    run_id, base = await new_run(server.base_url, out.name, **run)
    async with aiohttp.ClientSession() as client:
        async def post(name: str) -> bytes:
            async with client.post(base + "/messages", data=body(name),
                                   headers={"content-type": "application/json"}) as response:
                assert response.status == 200, (name, await response.text())
                return await response.read()

        async def arrived(count: int) -> None:
            async def journal() -> int:
                return len((await run_state(server.base_url, run_id))["journal"])

            for _ in range(500):
                if await journal() >= count:
                    return
                await asyncio.sleep(0.01)
            raise AssertionError("timed out")

        heard_back = await run_claude_code(post, arrived)
    status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run_id}")
    assert status == 200 and isinstance(report, dict)
    return heard_back, report


async def test_title_call_and_concurrent_subagents_record_as_the_tree_that_ran(serve, tmp_path):
    out = tmp_path / "claude-code"
    live, _ = await record_claude_code(out, cwd=CWD)
    assert [str(d) for d in check_suite(load_suite(out, keep_logs=True))] == []
    headers = _headers(out)
    assert sorted(headers) == ["session.1.jsonl", "session.2.jsonl", "session.3.jsonl", "session.jsonl"]
    main = headers["session.jsonl"]
    assert "parentSession" not in main, "the conversation the others hang from is the primary"
    assert _texts(out, "session.jsonl")[-1] == SUMMARY
    # The title call arrived first: the first child, beside the conversation; then the subagents in
    # the order their first calls arrived (Oslo, then Rome), though Rome's answer ended first.
    assert [_texts(out, f"session.{n}.jsonl")[-1] for n in (1, 2, 3)] == [
        '{"isNewTopic": true, "title": "Oslo vs Rome weather"}', OSLO, ROME]
    assert [headers[f"session.{n}.jsonl"].get("parentSession") for n in (1, 2, 3)] == [main["id"]] * 3
    assert all("seedLength" not in h for h in headers.values()), "header-less children are spawns"
    order = [headers[f] for f in ("session.1.jsonl", "session.jsonl", "session.2.jsonl", "session.3.jsonl")]
    created = [h["createdAt"] for h in order]
    assert created == sorted(created) and len(set(created)) == 4, "strictly increasing in arrival order"
    # --cwd: the working folder is written as {{cwd}}, in answers and inputs alike, and in the headers.
    oslo_log = (out / "session.2.jsonl").read_text()
    assert CWD not in oslo_log and "{{cwd}}/oslo.txt" in oslo_log
    assert {h["cwd"] for h in headers.values()} == {"{{cwd}}"}
    assert not any(b"sk-ant-live" in p.read_bytes() for p in out.iterdir())

    # Replayed header-less by content: the title call, though it comes first, gets the title.
    replayed, report = await replay(serve, out, bind="content", cwd=CWD)
    assert {name: heard(s) for name, s in replayed.items()} == {name: heard(s) for name, s in live.items()}
    assert report["failures"] == [] and report["consumed"], report


async def test_side_route_takes_the_title_model_out_of_the_tree_and_replays_it_by_model(serve, tmp_path):
    out = tmp_path / "claude-code"
    live, _ = await record_claude_code(out, side_routes=(HAIKU,))
    assert [str(d) for d in check_suite(load_suite(out, keep_logs=True))] == []
    script = f"side.{HAIKU}.json"
    assert {p.name for p in out.iterdir()} == {"mockllm.json", script, "session.jsonl", "session.1.jsonl",
                                               "session.2.jsonl", "envelopes.jsonl"}
    assert json.loads((out / "mockllm.json").read_text()) == {"side_routes": [{"model": HAIKU, "script": script}]}
    (entry,) = json.loads((out / script).read_text())
    assert entry["kind"] == "chunks" and entry["chunks"][-1] == {"type": "finish", "reason": {"kind": "stop"}}
    scenario = load_scenario(out)
    assert [(s.file, s.kind, len(s.entries)) for s in scenario.sessions] == [
        ("session.jsonl", "primary", 2), ("session.1.jsonl", "spawn", 2), ("session.2.jsonl", "spawn", 1)]
    assert [_texts(out, f)[-1] for f in ("session.jsonl", "session.1.jsonl", "session.2.jsonl")] == [
        SUMMARY, OSLO, ROME]
    assert [r.model for r in scenario.side_routes] == [HAIKU]
    assert "cwd" not in read_log(out / "session.jsonl").header.key_order, "no --cwd: no cwd written"

    # Order binding agrees with what happened once the title call is out of the tree: the main
    # conversation first, then Oslo, then Rome.
    replayed, report = await replay(serve, out, bind="order")
    assert {name: heard(s) for name, s in replayed.items()} == {name: heard(s) for name, s in live.items()}
    assert report["failures"] == [] and report["consumed"], report


async def test_a_session_header_names_sessions_and_lineage_is_still_read_from_the_answers(tmp_path):
    """`--session-header`: Claude Code-like agents that name themselves but not their parents."""
    out = tmp_path / "named"
    names = {"title": "t", "main-1": "main", "main-2": "main", "agent-oslo-1": "oslo", "agent-oslo-2": "oslo",
             "agent-rome-1": "rome"}
    async with running_upstream() as upstream:
        upstream.answers += [answer(name) for name in REQUESTS]
        options = RecordOptions(upstream.base_url, out, port=0, session_headers=("x-agent",))
        async with await start_recorder(options) as recorder, aiohttp.ClientSession() as client:
            for name in REQUESTS:
                async with client.post(recorder.base_url + "/v1/messages", data=body(name),
                                       headers={"content-type": "application/json", "x-agent": names[name]}) as r:
                    assert r.status == 200
                    await r.read()
    scenario = load_scenario(out)
    assert [(s.id, s.file, s.parent) for s in scenario.sessions] == [
        ("main", "session.jsonl", None), ("t", "session.1.jsonl", "main"), ("oslo", "session.2.jsonl", "main"),
        ("rome", "session.3.jsonl", "main")]
