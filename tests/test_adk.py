"""A Google ADK agent with two sub-agents (as agent tools), recorded through the proxy from a
scripted Gemini upstream, then replayed by base URL alone: the agent sees the same events, the tree
is the one that ran (the coordinator primary, each sub-agent a child found by its answer), and the
replay run is consumed with no failure and no divergence. ADK sends no session header: every call
routes by its `systemInstruction` + `contents`.

Skipped where google-adk is not installed (it pins google-genai below 3, so the test extra leaves
it out; `pip install google-adk` to run it).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from mockllm.cli.validate import check_suite
from mockllm.record.command import RecordOptions, start_recorder
from mockllm.scenario.load import load_scenario, load_suite
from tests.conftest import http, new_run

adk = pytest.importorskip("google.adk")

from google import genai  # noqa: E402
from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.models.google_llm import Gemini  # noqa: E402
from google.adk.runners import InMemoryRunner  # noqa: E402
from google.adk.tools.agent_tool import AgentTool  # noqa: E402
from google.genai import types  # noqa: E402

# ADK's own code warns about its own deprecations (AgentTool passes `plugins` to a Runner).
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


def _answer(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"candidates": [{"content": {"parts": parts, "role": "model"}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 40, "candidatesTokenCount": 6, "totalTokenCount": 46}}


async def _gemini_upstream(request: web.Request) -> web.StreamResponse:
    """A scripted Gemini: each agent answers by who it is (its system instruction) and where it is."""
    body = await request.json()
    system, contents = json.dumps(body.get("systemInstruction")), json.dumps(body["contents"])
    if "Oslo agent" in system:
        parts = [{"text": "Sunny, 21 C in Oslo"}]
    elif "Rome agent" in system:
        parts = [{"text": "Rainy, 14 C in Rome"}]
    elif "functionResponse" in contents:
        parts = [{"text": "Oslo is sunny; Rome is rainy."}]
    else:
        parts = [{"functionCall": {"id": "adk-1", "name": "oslo", "args": {"request": "weather now"}}},
                 {"functionCall": {"id": "adk-2", "name": "rome", "args": {"request": "weather now"}}}]
    return web.Response(body=json.dumps(_answer(parts)).encode(), content_type="application/json")


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", _gemini_upstream)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    await runner.cleanup()


async def run_agent(base: str) -> list[tuple[str, str]]:
    """The coordinator and its two sub-agents, once: every event's author and parts, as ADK saw them."""
    async with httpx.AsyncClient() as transport:
        # httpx, not aiohttp: google-genai's aiohttp session subclass is deprecated by aiohttp (a warning).
        client = genai.Client(api_key="x", http_options=types.HttpOptions(base_url=base, httpx_async_client=transport))
        oslo = LlmAgent(name="oslo", model=Gemini(model="gemini-m", client=client),
                        instruction="You are the Oslo agent.", description="The weather in Oslo")
        rome = LlmAgent(name="rome", model=Gemini(model="gemini-m", client=client),
                        instruction="You are the Rome agent.", description="The weather in Rome")
        coordinator = LlmAgent(name="coordinator", model=Gemini(model="gemini-m", client=client),
                               instruction="Ask each city's agent, then compare.",
                               tools=[AgentTool(oslo), AgentTool(rome)])
        runner = InMemoryRunner(agent=coordinator, app_name="weather")
        session = await runner.session_service.create_session(app_name="weather", user_id="u")
        seen: list[tuple[str, str]] = []
        message = types.Content(role="user", parts=[types.Part(text="Compare the weather in Oslo and Rome")])
        async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message):
            for part in event.content.parts if event.content and event.content.parts else ():
                said = part.text or (part.function_call and f"call {part.function_call.name}") or (
                    part.function_response and f"result {part.function_response.response}")
                seen.append((event.author, str(said)))
        return seen


async def test_an_adk_agent_with_two_sub_agents_records_and_replays_exactly(serve, upstream, tmp_path: Path):
    out = tmp_path / "adk-weather"
    async with await start_recorder(RecordOptions(upstream, out, port=0)) as recorder:
        live = await run_agent(recorder.base_url)
    assert live[-1] == ("coordinator", "Oslo is sunny; Rome is rainy.")
    assert [str(d) for d in check_suite(load_suite(out, keep_logs=True))] == []
    tree = load_scenario(out)
    assert [(len(s.entries), s.kind) for s in tree.sessions] == [(2, "primary"), (1, "spawn"), (1, "spawn")]
    assert {s.parent for s in tree.sessions[1:]} == {tree.sessions[0].id}

    replay = await serve(out)
    run, base = await new_run(replay.base_url, out.name)
    assert await run_agent(base.removesuffix("/v1")) == live
    status, report = await http("DELETE", f"{replay.base_url}/_mockllm/runs/{run}")
    assert status == 200 and isinstance(report, dict)
    assert report["consumed"] is True and report["failures"] == []
    assert not report.get("divergences"), report.get("divergences")
