"""openai-agents with its own MCP client (`agents.mcp.MCPServerStreamableHttp`, on the `mcp` 2.x SDK:
2026-07-28's `server/discover`, no session): a coordinator consults three specialist agents in
parallel (`.as_tool()`), each specialist with its own connection to the counter MCP server, whose
tools it calls as the model says. Recorded once through `mockllm record --upstream … --mcp …`,
then replayed with the model upstream and the MCP server both stopped, run after run, each
specialist starting after a random pause: the counter's recorded values come back every time."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

import mockllm
from mockllm.mcp.log import read_log
from mockllm.record.command import RecordOptions, start_recorder
from tests.agent_teams import Outcome, Pauses, openai_client, pause
from tests.mcp_helpers import counter_server
from tests.scripted_llm import ScriptedLLM

agents = pytest.importorskip("agents")

ROLES = ("historian", "geographer", "chef")
PROMPT = "Topics: Oslo, Rome, Lima"


async def team(base: str, mcp_url: str, pauses: Pauses | None) -> Outcome:
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner
    from agents.mcp import MCPServerStreamableHttp

    agents.set_tracing_disabled(True)
    client = openai_client(base)
    model = OpenAIChatCompletionsModel("gpt-4.1", client)
    heard: dict[str, str] = {}
    servers = [MCPServerStreamableHttp({"url": mcp_url, "timeout": 30}, name=f"counter-{role}",
                                       client_session_timeout_seconds=30) for role in ROLES]
    try:
        for server in servers:
            await server.connect()
        tools = []
        for role, server in zip(ROLES, servers, strict=True):
            specialist = Agent(name=role, model=model, mcp_servers=[server],
                               instructions=f"You are the {role}. Use your tools, then answer.")
            tool = specialist.as_tool(tool_name=f"ask_{role}", tool_description=f"Ask the {role} about a city.")
            tools.append(_asking_about(tool, role, pauses, heard))
        coordinator = Agent(name="coordinator", model=model, tools=tools,
                            instructions="You are the coordinator: consult the specialists, then summarise.",
                            model_settings=ModelSettings(parallel_tool_calls=True))
        result = await Runner.run(coordinator, PROMPT)
    finally:
        for server in servers:
            await server.cleanup()
        await client.close()
    return Outcome(str(result.final_output), heard)


def _asking_about(tool: Any, role: str, pauses: Pauses | None, heard: dict[str, str]) -> Any:
    """The specialist's tool: after a pause, it hands its specialist `Topics: CITY` (so the scripted
    model calls the MCP server's tools about it), and notes the answer."""
    invoke = tool.on_invoke_tool

    async def invoke_after_a_pause(context: Any, arguments: str) -> Any:
        await pause(pauses)
        city = json.loads(arguments)["input"]
        output = await invoke(context, json.dumps({"input": f"Topics: {city}"}))
        heard[role] = str(output)
        return output

    tool.on_invoke_tool = invoke_after_a_pause
    return tool


async def test_concurrent_subagents_with_mcp_tools_replay_offline(tmp_path: Path) -> None:
    out = tmp_path / "team"
    llm = ScriptedLLM(seed=5)
    with counter_server() as url:
        async with llm.serving(), await start_recorder(RecordOptions(
                llm.base_url + "/v1", out, port=0, mcp=(f"counter={url}",))) as recorder:
            recorded = await team(recorder.base_url, f"{recorder.base_url}/mcp/counter", None)
    assert llm.most_in_flight >= 2, "the specialists ran concurrently"
    log = read_log(out / "mcp.counter.jsonl")
    assert {e.method for e in log.exchanges} >= {"server/discover", "tools/list", "tools/call"}
    counts = sorted(e.answer["result"]["structuredContent"]["result"] for e in log.exchanges
                    if e.method == "tools/call" and e.request["params"]["name"] == "count")
    assert counts == [1, 2, 3], counts  # one count per specialist, the counter drifting between them
    assert all(str(n) in "".join(recorded.subagents.values()) for n in counts)
    assert all("echo: " in said for said in recorded.subagents.values()), recorded.subagents
    orders = set()
    async with mockllm.AsyncServer(out) as server:  # no model upstream, no MCP server: both stopped
        for number in range(3):
            async with await server.run("team") as run:
                replayed = await team(run.root_url, run.mcp_url("counter"), Pauses(random.Random(number)))
                assert replayed == recorded
                await run.assert_consumed()
                report = await run.end()
            assert sum(c.method == "tools/call" for c in report.mcp) == 6
            orders.add(tuple(c.what for c in report.mcp if c.method == "tools/call"))
    assert len(orders) > 1, "the pauses never changed the order the specialists called their tools in"
