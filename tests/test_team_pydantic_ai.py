"""pydantic-ai delegation: a coordinator agent whose tool runs a specialist agent, called three times in
parallel (one city each), or whose three tools each run their own specialist on the same city;
recorded through `mockllm record` with no mockllm header, then replayed with the default settings,
run after run, each specialist starting after a random pause.

Over OpenAI chat completions (whole answers) and Anthropic Messages (streamed: the run is given an
event stream handler, so every agent streams).

Annotations are evaluated as written (no `from __future__ import annotations`): pydantic-ai reads
a tool's `RunContext` parameter from them, imported where the tool is made.
"""

from typing import Any

import pytest

from tests.agent_teams import (
    Outcome,
    Pauses,
    Team,
    anthropic_client,
    openai_client,
    pause,
    record_team,
    replay_team,
)
from tests.scripted_llm import fact

pydantic_ai = pytest.importorskip("pydantic_ai")
# Newer pydantic-ai warns when a model id nears its provider's retirement date; the model is only a
# name to the scripted provider here, so that warning says nothing about the replay.
pytestmark = pytest.mark.filterwarnings("ignore:Model .* is deprecated by its provider")

ROLES = ("historian", "geographer", "chef")


def _model(provider: str, base: str) -> tuple[Any, Any]:
    """The model, and the SDK client it uses (the test closes it: a provider's own would stay open)."""
    if provider == "anthropic":
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        client = anthropic_client(base)
        return AnthropicModel("claude-sonnet-4-5", provider=AnthropicProvider(anthropic_client=client)), client
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = openai_client(base)
    return OpenAIChatModel("gpt-4.1", provider=OpenAIProvider(openai_client=client)), client


def team(provider: str, shape: str) -> Team:
    async def run(base: str, pauses: Pauses | None) -> Outcome:
        from pydantic_ai import Agent, RunContext

        model, client = _model(provider, base)
        heard: dict[str, str] = {}
        streamed = provider == "anthropic"

        async def drain(context: Any, events: Any) -> None:
            async for _ in events:
                pass

        handler = drain if streamed else None

        async def consult(context: RunContext[None], role: str, city: str) -> str:
            await pause(pauses)
            specialist = Agent(model, instructions=f"You are the {role}. Answer in one sentence.", name=role)
            result = await specialist.run(city, usage=context.usage, event_stream_handler=handler)
            heard[f"{role} on {city}"] = result.output
            return result.output

        coordinator = Agent(model, name="coordinator",
                            instructions="You are the coordinator: consult the specialists, then summarise.")
        if shape == "a-city-each":
            @coordinator.tool
            async def ask_historian(context: RunContext[None], city: str) -> str:
                """Ask the historian about a city."""
                return await consult(context, "historian", city)
        else:
            for role in ROLES:
                coordinator.tool(_asking(role, consult), name=f"ask_{role}")
        try:
            result = await coordinator.run("Topics: Oslo, Rome, Lima" if shape == "a-city-each" else "Topics: Oslo",
                                           event_stream_handler=handler)
        finally:
            await client.close()
        return Outcome(result.output, heard)

    return run


def _asking(role: str, consult: Any) -> Any:
    from pydantic_ai import RunContext

    async def ask(context: RunContext[None], city: str) -> str:
        """Ask a specialist about a city."""
        return str(await consult(context, role, city))

    return ask


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("shape", ["a-city-each", "one-city-for-all"])
async def test_delegation_replays_exactly_and_cleanly(tmp_path, provider, shape):
    out = tmp_path / "coordinator"
    what = team(provider, shape)
    recorded = await record_team(what, out)
    asked = ([("historian", city) for city in ("Oslo", "Rome", "Lima")] if shape == "a-city-each"
             else [(role, "Oslo") for role in ROLES])
    assert recorded.outcome.subagents == {f"{role} on {city}": fact(role, city) for role, city in asked}
    assert recorded.outcome.final.startswith("Summary: ")
    assert recorded.llm.most_in_flight >= 2, "the specialists ran concurrently"
    assert [(s.kind, len(s.entries)) for s in recorded.scenario.sessions] == [("primary", 2)] + [("spawn", 1)] * 3
    await replay_team(what, out, recorded.outcome)
