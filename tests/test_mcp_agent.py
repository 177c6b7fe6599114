"""An agent whose tools are an MCP server, recorded whole (model and tools) and replayed offline:
through `mockllm serve --mcp … --record-mode once` (the API's `mcp` and `record_mode`), then with
both upstreams stopped, run after run; a changed tool call fails the run with the change shown.
Under `new_episodes` a call the recording lacks goes to the server and is kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import MCPError

import mockllm
from mockllm.mcp.log import read_log
from tests.mcp_helpers import agent_loop, counter_server
from tests.scripted_llm import ScriptedLLM

TOPICS = ["alpha, beta", "gamma, delta"]


def leaves(group: BaseException) -> list[BaseException]:
    if isinstance(group, BaseExceptionGroup):
        return [leaf for e in group.exceptions for leaf in leaves(e)]
    return [group]


async def record_agent(suite: Path, topics: list[str] = TOPICS, mode: str = "auto") -> list[str]:
    """Record scenario `agent` with a record-mode run; both upstreams stop when it is done."""
    with counter_server() as url:
        async with ScriptedLLM(seed=3).serving() as llm, mockllm.AsyncServer(
                suite, upstream=f"{llm.base_url}/v1", mcp=[f"counter={url}"]) as server:
            run = await server.run("agent", record_mode="once")
            answers = await agent_loop(run.base_url, run.mcp_url("counter"), topics, mode=mode)
            report = await run.end()
            assert report.recording is not None and report.recording.written, report.recording
            assert "mcp.counter.jsonl" in report.recording.message
    return answers


async def test_an_agent_replays_model_and_tools_offline(tmp_path: Path) -> None:
    recorded = await record_agent(tmp_path)
    assert len(recorded) == 2 and recorded[0].startswith("Summary: ")
    log = read_log(tmp_path / "agent" / "mcp.counter.jsonl")
    counts = [e.answer["result"]["structuredContent"]["result"] for e in log.exchanges
              if e.method == "tools/call" and e.request["params"]["name"] == "count"]
    assert len(counts) == 2 and counts[1] == counts[0] + 1  # the counter drifted while it was recorded
    async with mockllm.AsyncServer(tmp_path) as server:  # no upstream, no MCP server: offline
        for _ in range(2):
            run = await server.run("agent")
            replayed = await agent_loop(run.base_url, run.mcp_url("counter"), TOPICS)
            assert replayed == recorded
            html = await run.report_html()  # MCP calls on the agent's lane, beside its model calls, and listed
            lane = html[html.index('data-lane="session.jsonl"'):]
            lane = lane[:lane.index('<div class="lane ') if '<div class="lane ' in lane else None]
            assert lane.count('class="mark mcp o-served"') == 6  # server/discover, tools/list, four tools/call
            assert "MCP calls: 6" in html and "tools/call echo {&quot;text&quot;:&quot;beta&quot;}" in html
            report = await run.end()
            assert report.problems() == [], report.describe()
            assert sum(c.method == "tools/call" for c in report.mcp) == 4
            assert all(c.session == "agent" for c in report.mcp)


async def test_a_changed_tool_call_fails_the_run_showing_the_change(tmp_path: Path) -> None:
    await record_agent(tmp_path)
    async with mockllm.AsyncServer(tmp_path) as server:
        run = await server.run("agent")
        def shout(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:  # the agent's new code
            return {k: v.upper() for k, v in arguments.items()} if tool == "echo" else arguments

        errors: list[str] = []
        try:
            await agent_loop(run.base_url, run.mcp_url("counter"), TOPICS, change=shout)
        except* MCPError as raised:  # the SDK's task groups wrap it
            errors = [str(e) for e in leaves(raised)]
        assert errors == ['mockllm: tools/call echo {"text":"BETA"}: no recorded call matches it; nearest recorded '
                          'call: tools/call echo {"text":"beta"} (mcp.counter.jsonl:5)']
        report = await run.end()
        problems = "\n".join(report.problems(require_consumed=False))
        assert 'diverged: session mcp.counter.jsonl (live id agent)' in problems
        assert '{"text":"BETA"}' in problems and '{"text":"beta"}' in problems


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_new_episodes_sends_a_miss_to_the_server_and_keeps_it(tmp_path: Path, mode: str) -> None:
    """Over the 2025 handshake the miss goes in an MCP session opened upstream as the recorded one was."""
    await record_agent(tmp_path, ["alpha, beta"], mode)
    recorded = read_log(tmp_path / "agent" / "mcp.counter.jsonl")
    before = len(recorded.exchanges)
    # The handshake's session opened the server's stream (GET); kept, whether or not it had ended.
    assert any(e.http == "GET" and e.status == 200 for e in recorded.exchanges) == (mode == "legacy")
    with counter_server() as url:
        async with ScriptedLLM(seed=3).serving() as llm, mockllm.AsyncServer(
                tmp_path, upstream=f"{llm.base_url}/v1", mcp=[f"counter={url}"]) as server:
            run = await server.run("agent", record_mode="new_episodes")
            await agent_loop(run.base_url, run.mcp_url("counter"), TOPICS, mode=mode)
            report = await run.end()
            assert report.recording is not None and report.recording.written, report.recording
            assert [c.what for c in report.mcp if c.live] == ['tools/call count {"input":"gamma"}',
                                                              'tools/call echo {"text":"delta"}']
    log = read_log(tmp_path / "agent" / "mcp.counter.jsonl")
    assert len(log.exchanges) == before + 2
    async with mockllm.AsyncServer(tmp_path) as server:  # the kept calls replay offline
        run = await server.run("agent")
        await agent_loop(run.base_url, run.mcp_url("counter"), TOPICS, mode=mode)
        assert (await run.end()).problems() == []
