"""A Strands Agents agent on its default `BedrockModel` with a tool, recorded through mockllm's
record mode against the scripted Bedrock upstream (which checks each call's SigV4 signature), then
replayed with the upstream stopped: the agent runs its tool loop the same way and says the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from strands import Agent, tool
from strands.models import BedrockModel

import mockllm
from mockllm.wire.bedrock import signing
from tests.bedrock_client import UPSTREAM_KEY, UPSTREAM_SECRET, assert_no_secret, fake_aws
from tests.scripted_bedrock import ScriptedBedrock

CALLS: list[str] = []  # the cities the tool was called with, per agent run


@tool
def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: the city's name
    """
    CALLS.append(city)
    return f"sunny in {city}"


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_aws(monkeypatch)  # the agent's own (fake) keys, us-east-1, no IMDS
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", UPSTREAM_KEY)  # the agent and mockllm share this process's environment
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", UPSTREAM_SECRET)
    monkeypatch.setattr(signing, "_session", None)


@pytest.fixture
def upstream() -> Iterator[ScriptedBedrock]:
    with ScriptedBedrock(UPSTREAM_KEY, UPSTREAM_SECRET) as scripted:
        yield scripted


def run_agent(endpoint: str) -> dict[str, Any]:
    CALLS.clear()
    model = BedrockModel(endpoint_url=endpoint, region_name="us-east-1")  # its default model and streaming
    agent = Agent(model=model, tools=[get_weather], callback_handler=None)
    result = agent("What is the weather in Paris?")
    return {"text": str(result).strip(), "stop": result.stop_reason, "calls": list(CALLS),
            "messages": len(agent.messages)}


def test_a_strands_agent_is_recorded_and_replayed_with_the_upstream_stopped(upstream, tmp_path):
    recordings = tmp_path / "recordings"
    with mockllm.Server(recordings, upstream=[f"bedrock={upstream.url}"], record_mode="once") as server:
        with server.run("strands/weather") as run:
            live = run_agent(run.root_url)
        recording = run.end().recording
        assert recording is not None and recording.written, recording
        assert upstream.refused == [] and len(upstream.received) == 2
        assert live == {"text": "The tool said: sunny in Paris", "stop": "end_turn", "calls": ["Paris"],
                        "messages": 4}
        upstream.stop()
        with server.run("strands/weather", record_mode="none") as run:
            assert run_agent(run.root_url) == live
            run.assert_consumed()
            report = run.end()
        assert report.failures == [] and not report.divergences
    assert_no_secret(recordings, upstream)
