"""Recording Bedrock Converse calls: signed again (SigV4) for the upstream, replayed with it gone.

A boto3 client signs its calls for mockllm's host with its own keys; the scripted upstream
(`tests/scripted_bedrock.py`, which knows nothing of mockllm) accepts only calls signed for itself
with the environment's keys, checked with botocore. So a recording that works proves the call was
signed again, and the files written hold neither key nor signature.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import mockllm
from mockllm.record.command import RecordOptions, start_recorder
from mockllm.wire.bedrock import signing
from tests.bedrock_client import (
    FAKE_KEY_ID,
    UPSTREAM_KEY,
    UPSTREAM_SECRET,
    assert_no_secret,
    client,
    converse,
    converse_stream,
    fake_aws,
    user,
)
from tests.scripted_bedrock import ScriptedBedrock

TOOLS = {"tools": [{"toolSpec": {"name": "get_weather", "description": "the weather in a city",
                                 "inputSchema": {"json": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}}]}


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's keys are its own (tests/bedrock_client.py); mockllm signs with the environment's."""
    fake_aws(monkeypatch)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", UPSTREAM_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", UPSTREAM_SECRET)
    monkeypatch.setattr(signing, "_session", None)  # the credential chain is read again from this environment


@pytest.fixture
def upstream() -> Iterator[ScriptedBedrock]:
    with ScriptedBedrock(UPSTREAM_KEY, UPSTREAM_SECRET) as scripted:
        yield scripted


def tool_loop(endpoint: str) -> list[Any]:
    """A tool use streamed, its result sent back, the answer whole: what the agent saw."""
    sdk = client(endpoint)
    first = converse_stream(sdk, user("weather in Paris?"), toolConfig=TOOLS)
    call = first["tool_calls"][0]
    messages = [*user("weather in Paris?"), {"role": "assistant", "content": [{"toolUse": call}]},
                {"role": "user", "content": [{"toolResult": {"toolUseId": call["toolUseId"],
                                                             "content": [{"text": "sunny, 21C"}]}}]}]
    second = converse(sdk, messages, toolConfig=TOOLS)
    return [first, second]


def test_record_mode_signs_each_call_again_and_replays_with_the_upstream_gone(upstream, tmp_path):
    recordings = tmp_path / "recordings"
    with mockllm.Server(recordings, upstream=[f"bedrock={upstream.url}"], record_mode="once") as server:
        with server.run("bedrock/tool_loop") as run:
            live = tool_loop(run.root_url)
        recording = run.end().recording
        assert recording is not None and recording.written, recording
        assert recording.live_calls == 2
        assert upstream.refused == [] and len(upstream.received) == 2
        for seen in upstream.received:  # signed again: the environment's key, never the client's
            assert f"Credential={UPSTREAM_KEY}/" in seen["headers"]["Authorization"]
            assert FAKE_KEY_ID not in str(seen["headers"])
            assert "%3A" in seen["path"], "the model id is percent-encoded again, as botocore sends it"
        assert live[0]["tool_calls"] == [{"toolUseId": "tooluse_scripted_1", "name": "get_weather",
                                          "input": {"city": "Paris"}}]
        assert live[0]["fragments"][:1] == [("reasoning", "I ")] and live[0]["stop"] == "tool_use"
        assert live[1]["fragments"] == [("text", "The tool said: sunny, 21C")]
        assert live[1]["usage"] == {"inputTokens": 22, "outputTokens": 7, "totalTokens": 29}
        upstream.stop()
        with server.run("bedrock/tool_loop", record_mode="none") as run:
            assert tool_loop(run.root_url) == live, "the same fragments, calls, stop reasons and usage"
            run.assert_consumed()
    assert_no_secret(recordings, upstream)


def test_a_call_the_upstream_refuses_is_passed_back_and_not_kept(upstream, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not/the/upstream/secret")
    with mockllm.Server(tmp_path, upstream=[f"bedrock={upstream.url}"], record_mode="once") as server:
        with server.run("refused") as run:
            sdk = client(run.root_url)
            with pytest.raises(sdk.exceptions.ClientError) as caught:
                converse(sdk, user("hello"))
        assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        assert caught.value.response["Error"]["Code"] == "InvalidSignatureException"
        assert upstream.refused == ["signature mismatch"]
        recording = run.end().recording
        assert recording is not None and not recording.written


async def test_mockllm_record_signs_again_too(upstream, tmp_path):
    """`mockllm record --upstream URL`: Bedrock's paths go beside the base's /v1, signed again."""
    import asyncio

    out = tmp_path / "recorded"
    async with await start_recorder(RecordOptions(upstream.url + "/v1", out, port=0)) as recorder:
        live = await asyncio.to_thread(tool_loop, recorder.base_url)
    assert upstream.refused == [] and len(upstream.received) == 2
    assert live[1]["fragments"] == [("text", "The tool said: sunny, 21C")]
    upstream.stop()
    with mockllm.Server(out) as server, server.run(out.name) as run:
        assert await asyncio.to_thread(tool_loop, run.root_url) == live
        run.assert_consumed()
    assert_no_secret(out, upstream)


def test_with_no_credentials_the_call_fails_naming_what_to_set(upstream, tmp_path, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    with mockllm.Server(tmp_path, upstream=[f"bedrock={upstream.url}"], record_mode="once") as server:
        with server.run("no_keys") as run:
            sdk = client(run.root_url)  # the client has keys of its own: they are never sent on
            with pytest.raises(sdk.exceptions.ClientError) as caught:
                converse(sdk, user("hello"))
        assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 502
        assert "AWS_ACCESS_KEY_ID" in caught.value.response["Error"]["Message"]
        assert caught.value.response["ResponseMetadata"]["HTTPHeaders"]["x-amzn-errortype"] == "InternalServerException"
        assert upstream.received == [], "nothing unsigned, nothing signed by the client, went upstream"
        recording = run.end().recording
        assert recording is not None and not recording.written


async def test_a_refusal_is_recorded_and_replayed_as_the_same_exception(upstream, tmp_path):
    import asyncio

    out = tmp_path / "refusal"

    def ask(endpoint: str) -> tuple[str, str, int]:
        sdk = client(endpoint)
        try:
            converse(sdk, user("REFUSE this"))
        except sdk.exceptions.ValidationException as exc:
            return exc.response["Error"]["Code"], exc.response["Error"]["Message"], \
                exc.response["ResponseMetadata"]["HTTPStatusCode"]
        raise AssertionError("no ValidationException")

    async with await start_recorder(RecordOptions(upstream.url, out, port=0)) as recorder:
        live = await asyncio.to_thread(ask, recorder.base_url)
    assert live == ("ValidationException", "The model refused this scripted request.", 400)
    upstream.stop()
    with mockllm.Server(out) as server, server.run(out.name) as run:
        assert await asyncio.to_thread(ask, run.root_url) == live


def test_new_episodes_replays_the_recorded_call_and_signs_only_the_new_one_for_the_upstream(upstream, tmp_path):
    with mockllm.Server(tmp_path, upstream=[f"bedrock={upstream.url}"]) as server:
        with server.run("loop", record_mode="once") as run:  # only the first step: the tool use
            first = converse_stream(client(run.root_url), user("weather in Paris?"), toolConfig=TOOLS)
        assert first["tool_calls"][0]["name"] == "get_weather"
        asked = len(upstream.received)
        with server.run("loop", record_mode="new_episodes") as run:
            live = tool_loop(run.root_url)
            run.assert_consumed()
        report = run.end()
        assert live[0] == first, "the recorded step is replayed, not asked again"
        assert len(upstream.received) == asked + 1, "only the step past the recording goes upstream"
        assert f"Credential={UPSTREAM_KEY}/" in upstream.received[-1]["headers"]["Authorization"]
        assert [(w.session, w.call, w.code) for w in report.went_live] == [("session.jsonl", 1, "script_exhausted")]
        assert report.recording is not None and report.recording.written
        upstream.stop()
        with server.run("loop", record_mode="none") as run:
            assert tool_loop(run.root_url) == live
            run.assert_consumed()
    assert_no_secret(tmp_path, upstream)


def test_rewrite_asks_the_upstream_for_every_call_and_replaces_the_recording(upstream, tmp_path):
    with mockllm.Server(tmp_path, upstream=[f"bedrock={upstream.url}"]) as server:
        with server.run("loop", record_mode="once") as run:
            converse(client(run.root_url), user("hello"))
        asked = len(upstream.received)
        with server.run("loop", record_mode="rewrite") as run:
            live = tool_loop(run.root_url)
        assert run.end().recording.written  # type: ignore[union-attr]
        assert len(upstream.received) == asked + 2, "rewrite replays nothing"
        upstream.stop()
        with server.run("loop", record_mode="none") as run:
            assert tool_loop(run.root_url) == live
            run.assert_consumed()
    assert_no_secret(tmp_path, upstream)
