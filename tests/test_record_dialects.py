"""Record mode for the dialects that send tool calls whole (Gemini, Ollama), through their SDKs.

A tree recorded through such a dialect holds each tool call as one fragment (the wire had no
others), so it is judged in its own dialect: what the agent saw through the recorder equals what
it sees when the new tree is replayed, the tree checks clean, and its shape (sessions, lineage,
kinds, entry counts) is the original's. Then a scripted upstream: NDJSON and SSE pieces, and the
providers' own error bodies, recorded and replayed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ollama
import pytest
from google.genai import errors

from mockllm.cli.tree_view import scenario_to_json
from mockllm.cli.validate import check_suite
from mockllm.record.command import RecordOptions, start_recorder
from mockllm.scenario.load import load_scenario, load_suite
from tests import gemini_client, ollama_client
from tests.agent_drive import plan
from tests.conftest import http, new_run
from tests.dialect_drive import WHOLE_CALL_SENDERS
from tests.fake_upstream import Answer, FakeUpstream, running_upstream
from tests.logbuilder import corpus_or_skip

SCENARIOS = ["v0-unpacked/acp-agent--subagent-mixed", "v0-unpacked/acp-agent--tool-call-turn",
             "v0-packed/acp-agent--subagent-fork-in-process"]


@pytest.fixture(autouse=True)
async def close_clients() -> Any:
    yield
    await gemini_client.close_all()
    await ollama_client.close_all()


def _shape(scenario_dir: Path) -> list[dict[str, object]]:
    """What `inspect --json` says of each session, less what a recorder writes its own way (event counts)."""
    sessions = scenario_to_json(load_scenario(scenario_dir))["sessions"]
    return [{k: v for k, v in s.items() if k not in ("events", "cut")} for s in sessions]


@pytest.mark.parametrize("dialect", sorted(WHOLE_CALL_SENDERS))
@pytest.mark.parametrize("name", SCENARIOS)
async def test_record_then_replay_in_the_same_dialect(serve, tmp_path, name, dialect):
    scenario_dir = corpus_or_skip() / name
    original = load_scenario(scenario_dir, keep_logs=True)
    calls = plan(original)
    send = WHOLE_CALL_SENDERS[dialect]
    upstream = await serve(scenario_dir)
    _, upstream_base = await new_run(upstream.base_url, original.name)
    out = tmp_path / original.name
    async with await start_recorder(RecordOptions(upstream_base, out, port=0)) as recorder:
        live = [await send(recorder.base_url + "/v1", call) for call in calls]
    assert all(answer["fragments"] or answer["tool_calls"] for answer in live)
    suite = load_suite(out, keep_logs=True)
    assert [str(d) for d in check_suite(suite)] == []
    assert _shape(out) == _shape(scenario_dir)
    replay = await serve(out)
    run, replay_base = await new_run(replay.base_url, out.name)
    for call, seen in zip(calls, live, strict=True):
        assert await send(replay_base, call) == seen, f"{call.session.file} call {call.number}"
    status, report = await http("DELETE", f"{replay.base_url}/_mockllm/runs/{run}")
    assert status == 200 and isinstance(report, dict)
    assert report["failures"] == [] and report["consumed"] is True
    assert not report.get("divergences"), report.get("divergences")


# -- a scripted upstream --------------------------------------------------------------------------

def ndjson(*objects: dict[str, Any]) -> list[bytes]:
    return [json.dumps(o).encode() + b"\n" for o in objects]


def gemini_event(parts: list[dict[str, Any]], **extra: Any) -> bytes:
    body = {"candidates": [{"content": {"parts": parts, "role": "model"}, "index": 0, **extra.pop("candidate", {})}],
            **extra}
    return b"data: " + json.dumps(body).encode() + b"\r\n\r\n"


async def _record(upstream: FakeUpstream, out: Path, send: Any) -> list[Any]:
    async with await start_recorder(RecordOptions(upstream.base_url, out, port=0)) as recorder:
        return [await step(recorder.base_url) for step in send]


async def test_ollama_ndjson_and_its_error_body_record_and_replay(serve, tmp_path):
    async with running_upstream() as upstream:
        message = {"role": "assistant", "content": ""}
        upstream.answers += [
            Answer(ndjson({"message": {**message, "thinking": "let me"}, "done": False},
                          {"message": {**message, "thinking": " look"}, "done": False},
                          {"message": {**message, "tool_calls": [{"function": {"name": "ls",
                                                                               "arguments": {"path": "."}}}]},
                           "done": False},
                          {"message": message, "done": True, "done_reason": "stop", "prompt_eval_count": 12,
                           "eval_count": 4}), content_type="application/x-ndjson"),
            Answer([b'{"error":"model \'m\' not found"}'], status=404, content_type="application/json"),
            Answer([json.dumps({"message": {"role": "assistant", "content": "all done"}, "done": True,
                                "done_reason": "stop", "eval_count": 2, "prompt_eval_count": 30}).encode()],
                   content_type="application/json")]
        turn = [{"role": "user", "content": "list it"}]
        after = [*turn, {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "ls", "arguments": {"path": "."}}}]}, {"role": "tool", "content": "a b",
                                                                        "tool_name": "ls"}]

        async def first(base: str) -> Any:
            return await ollama_client.chat_stream(ollama_client.client(base), turn)

        async def failing(base: str) -> Any:
            with pytest.raises(ollama.ResponseError) as caught:
                await ollama_client.chat_stream(ollama_client.client(base), after)
            return (caught.value.status_code, caught.value.error)

        async def whole(base: str) -> Any:
            return await ollama_client.chat_whole(ollama_client.client(base), after)

        out = tmp_path / "ollama"
        live = await _record(upstream, out, [first, failing, whole])
        assert [r["path"] for r in upstream.received] == ["/api/chat"] * 3
    assert live[0]["fragments"] == [("thinking", "let me"), ("thinking", " look")]
    assert live[1] == (404, "model 'm' not found")
    assert [str(d) for d in check_suite(load_suite(out, keep_logs=True))] == []
    replay = await serve(out)
    run, base = await new_run(replay.base_url, "ollama")
    assert [await step(base.removesuffix("/v1")) for step in (first, failing, whole)] == live
    report = (await http("DELETE", f"{replay.base_url}/_mockllm/runs/{run}"))[1]
    assert isinstance(report, dict) and report["consumed"] is True and not report.get("divergences")


async def test_gemini_sse_and_googles_error_body_record_and_replay(serve, tmp_path):
    usage = {"promptTokenCount": 20, "candidatesTokenCount": 5, "thoughtsTokenCount": 3,
             "cachedContentTokenCount": 8, "totalTokenCount": 28}
    async with running_upstream() as upstream:
        upstream.answers += [
            Answer([gemini_event([{"text": "plan", "thought": True}]), gemini_event([{"text": "Hel"}]),
                    gemini_event([{"text": "lo"}]),
                    gemini_event([{"functionCall": {"id": "fc-1", "name": "ls", "args": {"path": "."}}}]),
                    gemini_event([{"text": ""}], candidate={"finishReason": "STOP"}, usageMetadata=usage)]),
            Answer([json.dumps({"error": {"code": 429, "message": "Quota exceeded", "status": "RESOURCE_EXHAUSTED"}})
                    .encode()], status=429, content_type="application/json")]

        async def first(base: str) -> Any:
            return await gemini_client.generate_stream(gemini_client.client(base), "list it")

        async def failing(base: str) -> Any:
            with pytest.raises(errors.ClientError) as caught:
                await gemini_client.generate(gemini_client.client(base), "list it")
            return (caught.value.code, caught.value.status, caught.value.message)

        out = tmp_path / "gemini"
        live = await _record(upstream, out, [first, failing])
        # google-genai 3.x calls /v1, 2.x (what google-adk pins) /v1beta: either is forwarded as it came.
        version = upstream.received[0]["path"].split("/")[1]
        assert version in ("v1", "v1beta")
        assert [(r["path"], r["query"]) for r in upstream.received] == [
            (f"/{version}/models/gemini-m:streamGenerateContent", "alt=sse"),
            (f"/{version}/models/gemini-m:generateContent", "")]
    assert live[0]["fragments"] == [("thought", "plan"), ("text", "Hel"), ("text", "lo")]
    assert live[0]["tool_calls"] == [{"id": "fc-1", "name": "ls", "args": {"path": "."}}]
    assert live[1] == (429, "RESOURCE_EXHAUSTED", "Quota exceeded")
    replay = await serve(out)
    _, base = await new_run(replay.base_url, "gemini")
    assert [await step(base.removesuffix("/v1")) for step in (first, failing)] == live
