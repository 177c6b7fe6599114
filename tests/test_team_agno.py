"""agno: a coordinator agent whose tools each run a specialist agent, called in parallel; recorded
through `mockllm record` with no mockllm header, then replayed with the default settings, run after
run, each specialist starting after a random pause.

agno's OpenAI chat model sends an agent's instructions as a `developer` message (its default role
map), so in the "one-city-for-all" shape three specialists start with the same user message and
differ by their developer prompt only: they replay right only because a chat `developer` message
is read as the system prompt (recorded as the session's, and compared when binding).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

import mockllm
from tests.agent_teams import NO_TLS, REPLAYS, Outcome, Pauses, Team, pause, record_team, replay_team
from tests.scripted_llm import fact

agno = pytest.importorskip("agno")

ROLES = ("historian", "geographer", "chef")


def _model(base: str) -> Any:
    import httpx
    from agno.models.openai import OpenAIChat

    return OpenAIChat(id="gpt-4.1", base_url=base + "/v1", api_key="sk-test", max_retries=0,
                      http_client=httpx.AsyncClient(verify=NO_TLS))


def team(shape: str, edited: str | None = None) -> Team:
    """The team; `edited` names a city whose specialist is now asked differently (`<city>, briefly`)."""
    async def run(base: str, pauses: Pauses | None) -> Outcome:
        from agno.agent import Agent

        heard: dict[str, str] = {}
        models: list[Any] = []

        def model() -> Any:
            made = _model(base)
            models.append(made)
            return made

        def asking(role: str) -> Any:
            async def ask(city: str) -> str:
                """Ask a specialist about a city."""
                await pause(pauses)
                specialist = Agent(model=model(), name=role, telemetry=False,
                                   instructions=f"You are the {role}. Answer in one sentence.")
                answer = str((await specialist.arun(f"{city}, briefly" if city == edited else city)).content)
                heard[f"{role} on {city}"] = answer
                return answer

            ask.__name__ = f"ask_{role}"
            return ask

        roles = ROLES if shape == "one-city-for-all" else ("historian",)
        coordinator = Agent(model=model(), name="coordinator", telemetry=False, tools=[asking(r) for r in roles],
                            instructions="You are the coordinator: consult the specialists, then summarise.")
        topics = "Topics: Oslo" if shape == "one-city-for-all" else "Topics: Oslo, Rome, Lima"
        try:
            result = await coordinator.arun(topics)
        finally:
            for made in models:
                await made.http_client.aclose()
        return Outcome(str(result.content), heard)

    return run


@pytest.mark.parametrize("shape", ["one-city-for-all", "a-city-each"])
async def test_agno_specialists_replay_exactly_and_cleanly_in_any_order(tmp_path, shape):
    out = tmp_path / "coordinator"
    what = team(shape)
    recorded = await record_team(what, out)
    asked = ([(role, "Oslo") for role in ROLES] if shape == "one-city-for-all"
             else [("historian", city) for city in ("Oslo", "Rome", "Lima")])
    assert recorded.outcome.subagents == {f"{role} on {city}": fact(role, city) for role, city in asked}
    assert recorded.outcome.final.startswith("Summary: ")
    assert recorded.llm.most_in_flight >= 2, "the specialists ran concurrently"
    sessions = recorded.scenario.sessions
    assert [(s.kind, len(s.entries)) for s in sessions] == [("primary", 2)] + [("spawn", 1)] * 3
    if shape == "one-city-for-all":  # the developer prompts were recorded as the system prompts
        assert sorted(s.system.split(".")[0] for s in sessions[1:] if s.system) == [
            f"You are the {role}" for role in sorted(ROLES)], [s.system for s in sessions]
    await replay_team(what, out, recorded.outcome)


async def test_an_edited_specialist_is_the_one_divergence_in_every_replay(tmp_path):
    """Three specialists run concurrently; one is now asked differently. Whatever order they start
    in, that one binds to its own recording (the closest) and the report says one divergence, on it."""
    out = tmp_path / "coordinator"
    recorded = await record_team(team("a-city-each"), out)
    rome = next(s.file for s in recorded.scenario.sessions if s.inputs and s.inputs[0] is not None
                and [i.text for i in s.inputs[0].items] == ["Rome"])
    edited = team("a-city-each", edited="Rome")
    seen = []
    async with mockllm.AsyncServer(out) as server:
        for number in range(REPLAYS):
            async with await server.run(out.name) as run:
                outcome = await edited(run.base_url.removesuffix("/v1"), Pauses(random.Random(number)))
                report = await run.end()
            assert outcome == recorded.outcome, report.describe()  # every specialist got its own answers
            assert [(d.session, d.call, d.got) for d in report.divergences] == [(rome, 0, "Rome, briefly")], \
                report.describe()
            assert [(n.kind, n.session) for n in report.notices] == [("bound_to_closest", rome)]
            assert report.failures == [] and not report.unconsumed
            seen.append(tuple(s.live_id for s in report.sessions))
    assert len(set(seen)) > 1, f"every replay started the specialists in the same order: {seen}"
