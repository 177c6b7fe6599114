"""LangGraph: a `Send` fan-out to parallel specialist nodes, each calling the model, then a summary; and
a supervisor whose tool calls (run in parallel by `ToolNode`) each run a specialist. Recorded
through `mockllm record` with no mockllm header, then replayed with the default settings, run
after run, each specialist starting after a random pause.

Through langchain-openai (chat completions, streamed) and langchain-anthropic (Messages, streamed).
Annotations are evaluated as written (no `from __future__ import annotations`): LangGraph reads
node signatures.
"""

import contextlib
import operator
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

import pytest

from tests.agent_teams import NO_TLS, Outcome, Pauses, Team, pause, record_team, replay_team
from tests.scripted_llm import fact

langgraph = pytest.importorskip("langgraph")

CITIES = ("Oslo", "Rome", "Lima")


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    """LangSmith tracing off whatever the environment says: these tests make no call off loopback."""
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2"):
        monkeypatch.setenv(name, "false")


class Findings(TypedDict):
    topics: list[str]
    facts: Annotated[list[str], operator.add]
    summary: str


class Task(TypedDict):
    topic: str


@contextlib.asynccontextmanager
async def _model(provider: str, base: str) -> AsyncIterator[Any]:
    """A chat model for `base`, its HTTP client closed on the way out (langchain caches one per base
    URL and never closes it)."""
    if provider == "anthropic":
        from langchain_anthropic import ChatAnthropic

        model = ChatAnthropic(model_name="claude-sonnet-4-5", base_url=base, api_key="sk-ant-test", streaming=True,
                              max_retries=0, timeout=30, stop=None)
        try:
            yield model
        finally:
            await model._async_client.close()
        return
    import openai
    from langchain_openai import ChatOpenAI

    # Clients of our own: langchain would make one of each (and verify TLS) per base URL.
    with openai.DefaultHttpxClient(verify=NO_TLS) as sync_client:
        async with openai.DefaultAsyncHttpxClient(verify=NO_TLS) as client:
            yield ChatOpenAI(model="gpt-4.1", base_url=base + "/v1", api_key="sk-test", streaming=True,
                             max_retries=0, http_async_client=client, http_client=sync_client)


def fan_out(provider: str) -> Team:
    async def run(base: str, pauses: Pauses | None) -> Outcome:
        from langchain_core.messages import HumanMessage, SystemMessage
        from langgraph.graph import END, START, StateGraph
        from langgraph.types import Send

        heard: dict[str, str] = {}

        def plan(state: Findings) -> list[Send]:
            return [Send("specialist", {"topic": topic}) for topic in state["topics"]]

        async def specialist(task: Task) -> dict[str, Any]:
            await pause(pauses)
            answer = await model.ainvoke([SystemMessage("You are the historian. Answer in one sentence."),
                                          HumanMessage(task["topic"])])
            heard[task["topic"]] = answer.text
            return {"facts": [answer.text]}

        async def summarise(state: Findings) -> dict[str, Any]:
            answer = await model.ainvoke([SystemMessage("You are the coordinator."),
                                          HumanMessage("Summarise:\n" + "\n".join(state["facts"]))])
            return {"summary": answer.text}

        graph = StateGraph(Findings)
        graph.add_node("specialist", specialist)
        graph.add_node("summarise", summarise)
        graph.add_conditional_edges(START, plan, ["specialist"])
        graph.add_edge("specialist", "summarise")
        graph.add_edge("summarise", END)
        async with _model(provider, base) as model:
            state = await graph.compile().ainvoke({"topics": list(CITIES), "facts": [], "summary": ""})
        return Outcome(state["summary"], heard)

    return run


def supervisor(provider: str) -> Team:
    async def run(base: str, pauses: Pauses | None) -> Outcome:
        from langchain_core.messages import HumanMessage, SystemMessage
        from langchain_core.tools import tool
        from langgraph.graph import END, START, MessagesState, StateGraph
        from langgraph.prebuilt import ToolNode, tools_condition

        heard: dict[str, str] = {}

        def specialist(role: str) -> Any:
            async def ask(city: str) -> str:
                await pause(pauses)
                answer = await model.ainvoke([SystemMessage(f"You are the {role}. Answer in one sentence."),
                                              HumanMessage(city)])
                heard[role] = answer.text
                return str(answer.text)

            return tool(f"ask_{role}", description=f"Ask the {role} about a city.")(ask)

        tools = [specialist(role) for role in ("historian", "geographer", "chef")]

        async def coordinate(state: MessagesState) -> dict[str, Any]:
            return {"messages": [await model.bind_tools(tools).ainvoke(state["messages"])]}

        graph = StateGraph(MessagesState)
        graph.add_node("coordinator", coordinate)
        graph.add_node("tools", ToolNode(tools))
        graph.add_edge(START, "coordinator")
        graph.add_conditional_edges("coordinator", tools_condition, ["tools", END])
        graph.add_edge("tools", "coordinator")
        async with _model(provider, base) as model:
            state = await graph.compile().ainvoke({"messages": [
                SystemMessage("You are the coordinator: consult the specialists, then summarise."),
                HumanMessage("Topics: " + ", ".join(CITIES))]})
        return Outcome(state["messages"][-1].text, heard)

    return run


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_send_fan_out_replays_exactly_and_cleanly(tmp_path, provider):
    out = tmp_path / "fan-out"
    what = fan_out(provider)
    recorded = await record_team(what, out)
    assert recorded.outcome.subagents == {city: fact("historian", city) for city in CITIES}
    assert recorded.outcome.final == "Summary: " + " | ".join(fact("historian", city) for city in CITIES)
    assert recorded.llm.most_in_flight >= 2, "the specialists ran concurrently"
    assert len(recorded.scenario.sessions) == 4 and all(len(s.entries) == 1 for s in recorded.scenario.sessions)
    await replay_team(what, out, recorded.outcome)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_supervisor_replays_exactly_and_cleanly(tmp_path, provider):
    out = tmp_path / "supervisor"
    what = supervisor(provider)
    recorded = await record_team(what, out)
    roles = dict(zip(("historian", "geographer", "chef"), CITIES, strict=True))
    assert recorded.outcome.subagents == {role: fact(role, city) for role, city in roles.items()}
    assert recorded.outcome.final.startswith("Summary: ")
    assert recorded.llm.most_in_flight >= 2, "the specialists ran concurrently"
    assert [(s.kind, len(s.entries)) for s in recorded.scenario.sessions] == [("primary", 2)] + [("spawn", 1)] * 3
    await replay_team(what, out, recorded.outcome)
