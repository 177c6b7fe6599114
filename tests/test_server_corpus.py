"""Every real dsh tree, every session, through the official openai SDK over a real socket.

The client-side rebuilt chunks must equal each session's own script: fork children get their own
answers, never the parent's.
"""

from __future__ import annotations

import openai
import pytest

from mockllm.scenario.load import load_scenario
from mockllm.script.entries import ChunksEntry, HangEntry, ThrowEntry
from tests.conftest import http
from tests.logbuilder import CORPUS, corpus_or_skip, corpus_scenarios
from tests.replay_client import expected_from_entry, received_from_stream


@pytest.mark.parametrize("scenario_dir", corpus_scenarios())
async def test_every_session_gets_its_own_recorded_calls(serve, scenario_dir):
    corpus_or_skip()
    scenario = load_scenario(scenario_dir)
    server = await serve(scenario_dir)
    status, created = await http("POST", f"{server.base_url}/_mockllm/runs", {"scenario": scenario.name})
    assert status == 201
    base_url = created["base_url"]
    # Fresh live ids, bound in first-call order: the same way dsh binds when replaying.
    for number, session in enumerate(scenario.sessions):
        client = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0,
                                    default_headers={"x-mockllm-session": f"live-{number}"})
        async with client:
            for call, entry in enumerate(session.entries):
                messages = [{"role": "user", "content": f"{session.file} call {call}"}]
                if isinstance(entry, ChunksEntry):
                    stream = await client.chat.completions.create(
                        model="m", messages=messages, stream=True, stream_options={"include_usage": True})
                    received = await received_from_stream(stream)
                    assert received == expected_from_entry(entry), f"{session.file} call {call}"
                elif isinstance(entry, ThrowEntry):
                    with pytest.raises(openai.APIStatusError) as caught:
                        await client.chat.completions.create(model="m", messages=messages, stream=True)
                    assert caught.value.status_code == (entry.status or 500)
                    assert entry.message in caught.value.message
                else:
                    assert isinstance(entry, HangEntry)
                    stream = await client.chat.completions.create(
                        model="m", messages=messages, stream=True, timeout=0.3)
                    with pytest.raises(openai.APITimeoutError):
                        async for chunk in stream:
                            assert chunk.choices[0].delta.content == "partial"
    status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{created['run']}")
    assert status == 200
    assert report["failures"] == []
    assert report["consumed"] is True
    assert [s["served"] for s in report["sessions"]] == [len(s.entries) for s in scenario.sessions]


async def test_fork_child_is_served_its_own_answer_not_the_parents(serve):
    corpus_or_skip()
    scenario_dir = CORPUS / "v0-packed" / "acp-agent--subagent-fork-in-process"
    server = await serve(scenario_dir)
    base = f"{server.base_url}/scenarios/{scenario_dir.name}/v1"
    texts = {}
    for live in ("parent", "child"):
        client = openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=0,
                                    default_headers={"x-mockllm-session": live})
        async with client:
            completion = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
            texts[live] = completion.choices[0].message.content
    assert texts == {"parent": "OK", "child": "MARMALADE"}
