"""openai-agents, agents as tools: a coordinator Agent consults three specialist Agents, exposed with
`.as_tool()`, in parallel; recorded through `mockllm record` with no mockllm header, then replayed
with the default settings, run after run, each subagent starting after a random pause.

Over the Responses API (streamed: the subagents stream too; or whole, the coordinator chaining its
calls by `previous_response_id`) and over chat completions (whole answers). Two teams: each
specialist asked about its own city, and all three asked the same question (the framework's
classic translators example: the subagents differ only by their instructions, so their first
requests' inputs are equal).
"""

from __future__ import annotations

from typing import Any

import pytest

import mockllm
from tests.agent_teams import Outcome, Pauses, Team, openai_client, pause, record_team, replay_team
from tests.scripted_llm import fact

agents = pytest.importorskip("agents")

ROLES = ("historian", "geographer", "chef")


def team(api: str, prompt: str) -> Team:
    async def run(base: str, pauses: Pauses | None) -> Outcome:
        from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner

        agents.set_tracing_disabled(True)
        client = openai_client(base)
        model: Any = (OpenAIChatCompletionsModel("gpt-4.1", client) if api == "chat"
                      else OpenAIResponsesModel("gpt-4.1", client))
        streamed = api == "responses"
        heard: dict[str, str] = {}
        tools = []
        for role in ROLES:
            specialist = Agent(name=role, instructions=f"You are the {role}. Answer in one sentence.", model=model)
            tool = specialist.as_tool(tool_name=f"ask_{role}", tool_description=f"Ask the {role} about a city.",
                                      on_stream=(lambda event: None) if streamed else None)
            tools.append(_paused(tool, role, pauses, heard))
        coordinator = Agent(name="coordinator", model=model, tools=tools,
                            instructions="You are the coordinator: consult the specialists, then summarise.",
                            model_settings=ModelSettings(parallel_tool_calls=True))
        try:
            if streamed:
                result: Any = Runner.run_streamed(coordinator, prompt)
                async for _ in result.stream_events():
                    pass
            else:  # chained: each next call sends only its new items, after `previous_response_id`
                result = await Runner.run(coordinator, prompt, auto_previous_response_id=api == "responses-chained")
        finally:
            await client.close()
        return Outcome(str(result.final_output), heard)

    return run


def _paused(tool: Any, role: str, pauses: Pauses | None, heard: dict[str, str]) -> Any:
    """The specialist's tool, starting after a pause and noting what the specialist answered."""
    invoke = tool.on_invoke_tool

    async def invoke_after_a_pause(context: Any, arguments: str) -> Any:
        await pause(pauses)
        output = await invoke(context, arguments)
        heard[role] = str(output)
        return output

    tool.on_invoke_tool = invoke_after_a_pause
    return tool


A_CITY_EACH = ("Topics: Oslo, Rome, Lima", dict(zip(ROLES, ("Oslo", "Rome", "Lima"), strict=True)))
ONE_CITY_FOR_ALL = ("Topics: Oslo", dict.fromkeys(ROLES, "Oslo"))


@pytest.mark.parametrize(("api", "prompt", "asked"), [
    ("responses", *A_CITY_EACH), ("responses", *ONE_CITY_FOR_ALL), ("chat", *A_CITY_EACH), ("chat", *ONE_CITY_FOR_ALL),
    ("responses-chained", *A_CITY_EACH),
], ids=["responses-a-city-each", "responses-one-city-for-all", "chat-a-city-each", "chat-one-city-for-all",
        "responses-chained-a-city-each"])
async def test_agents_as_tools_replay_exactly_and_cleanly(tmp_path, api, prompt, asked):
    out = tmp_path / "coordinator"
    what = team(api, prompt)
    recorded = await record_team(what, out)
    expected = {role: fact(role, city) for role, city in asked.items()}
    assert recorded.outcome.subagents == expected
    assert recorded.outcome.final == "Summary: " + " | ".join(expected.values())
    assert recorded.llm.most_in_flight >= 2, "the specialists ran concurrently"
    chained = [body for _, body in recorded.llm.received if body.get("previous_response_id")]
    assert len(chained) == (api == "responses-chained"), "only the chained coordinator's second call continues"
    assert [(s.kind, len(s.entries)) for s in recorded.scenario.sessions] == [("primary", 2)] + [("spawn", 1)] * 3
    await replay_team(what, out, recorded.outcome)


async def test_a_real_divergence_fails_the_run_with_a_readable_diff(tmp_path):
    """The other side of "clean": the same team asked about another city replays what it can, and the
    run fails by default, saying where and how the request differed."""
    out = tmp_path / "coordinator"
    recorded = await record_team(team("chat", A_CITY_EACH[0]), out)
    async with mockllm.AsyncServer(out) as server, await server.run(out.name) as run:
        await team("chat", "Topics: Oslo, Rome, Peru")(run.base_url.removesuffix("/v1"), None)
        with pytest.raises(mockllm.RunNotClean) as failed:
            await run.assert_consumed()
    message = str(failed.value)
    assert "session.jsonl" in message and "call 0 (0-based), the last user message" in message
    assert "[-Lima][+Peru]" in message, message
    assert "Lima" in recorded.outcome.final
