"""The Gemini dialect through the official `google-genai` SDK, over real sockets.

Every real dsh tree, every session, streamed (`generate_content_stream`) and not
(`generate_content`): what the client assembles equals each session's own script. Then both API
versions under every base, errors raising the SDK's own classes, exhaustion in Google's shape,
header-less routing with `functionResponse` tool results, golden bytes and the decoder's round trip.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import httpx
import msgspec
import pytest
from google.genai import errors, types

from mockllm.dsh.chunks import BlockEnd, FinishChunk, UsageChunk
from mockllm.scenario.load import load_scenario
from mockllm.script.entries import ChunksEntry, HangEntry, ThrowEntry
from mockllm.wire.envelope import Envelope
from mockllm.wire.gemini.dialect import Gemini
from mockllm.wire.render import read
from mockllm.wire.sse_reader import SSEReader
from tests.conftest import http, new_run
from tests.gemini_client import client, close_all, expected_from_entry, generate, generate_stream, root, whole
from tests.logbuilder import (
    FORK_ID,
    FORK_TASK,
    MIXED_ANSWERS,
    PRIMARY_ID,
    PRIMARY_PROMPTS,
    SPAWN_ID,
    SPAWN_TASK,
    SYSTEM,
    corpus_or_skip,
    corpus_scenarios,
    text_call,
    write_mixed_tree,
    write_override,
    write_sessions,
)

MODES = {"stream": generate_stream, "whole": generate}
GEMINI = Gemini()


@pytest.fixture(autouse=True)
async def close_clients() -> Any:
    """Every client a test makes is closed after it, on its own loop."""
    yield
    await close_all()



@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("scenario_dir", corpus_scenarios())
async def test_every_session_gets_its_own_recorded_calls(serve, scenario_dir, mode):
    corpus_or_skip()
    scenario = load_scenario(scenario_dir)
    server = await serve(scenario_dir)
    run, base = await new_run(server.base_url, scenario.name)
    ask = MODES[mode]
    for number, session in enumerate(scenario.sessions):
        headers = {"x-mockllm-session": f"live-{number}"}
        sdk = client(root(base), headers)
        for call, entry in enumerate(session.entries):
            contents = f"{session.file} call {call}"
            where = f"{session.file} call {call}"
            if isinstance(entry, ChunksEntry):
                received = await ask(sdk, contents)
                expected = expected_from_entry(entry)
                if mode == "whole":
                    expected["fragments"] = whole(expected["fragments"])
                assert received == expected, where
            elif isinstance(entry, ThrowEntry):
                with pytest.raises(errors.APIError) as caught:
                    await ask(sdk, contents)
                assert caught.value.code == (entry.status or 500), where
                assert caught.value.message == entry.message
            else:
                assert isinstance(entry, HangEntry)
                with pytest.raises(httpx.TimeoutException):
                    await ask(client(root(base), headers, timeout=0.3), contents)
    status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
    assert status == 200 and isinstance(report, dict)
    assert report["failures"] == []
    assert report["consumed"] is True


@pytest.mark.parametrize("version", ["v1beta", "v1"])
@pytest.mark.parametrize("base", ["root", "scenario", "run"])
async def test_both_api_versions_under_every_base(serve, tmp_path, version, base):
    server = await serve(write_sessions(tmp_path / "one", {"p": [text_call("hello there")]}))
    urls = {"root": server.base_url, "scenario": f"{server.base_url}/scenarios/one",
            "run": root((await new_run(server.base_url, "one"))[1])}
    received = await generate_stream(client(urls[base], api_version=version), "task of p")
    assert "".join(t for _, t in received["fragments"]) == "hello there"
    assert received["finish"] == "STOP"


# -- errors ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(("throw", "status", "name", "kind"), [
    ({"code": "RATE_LIMIT"}, 429, "RESOURCE_EXHAUSTED", errors.ClientError),
    ({"code": "SERVER"}, 500, "INTERNAL", errors.ServerError),
    ({"code": "NOT_FOUND", "status": 404}, 404, "NOT_FOUND", errors.ClientError),
], ids=["429", "500", "recorded-status-name"])
async def test_a_throw_raises_the_sdks_class_with_googles_status(serve, tmp_path, mode, throw, status, name, kind):
    server = await serve(write_override(tmp_path / "err", [{"kind": "throw", "message": "provider said no",
                                                             **throw}]).parent)
    _, base = await new_run(server.base_url, "err")
    with pytest.raises(errors.APIError) as caught:
        await MODES[mode](client(root(base)), "q")
    assert type(caught.value) is kind
    assert (caught.value.code, caught.value.status, caught.value.message) == (status, name, "provider said no")


async def test_a_throw_after_chunks_is_an_error_event_mid_stream(serve, tmp_path):
    chunks = [{"type": "block-start", "index": 0, "blockType": "text"},
              {"type": "text-delta", "index": 0, "text": "par"}, {"type": "text-delta", "index": 0, "text": "tial"}]
    server = await serve(write_override(tmp_path / "mid", [
        {"kind": "throw", "message": "overloaded", "code": "HTTP_503", "chunks": chunks}]).parent)
    _, base = await new_run(server.base_url, "mid")
    seen: list[str] = []
    with pytest.raises(errors.ServerError) as caught:
        async for response in await client(root(base)).aio.models.generate_content_stream(model="m", contents="q"):
            seen.append(response.text or "")
    assert seen == ["par", "tial"]
    assert (caught.value.code, caught.value.status) == (503, "UNAVAILABLE")


@pytest.mark.parametrize("mode", list(MODES))
async def test_one_call_past_the_end_is_410_in_googles_shape(serve, tmp_path, mode):
    server = await serve(write_sessions(tmp_path / "one", {"p": [text_call("only")]}))
    run, base = await new_run(server.base_url, "one")
    sdk = client(root(base), {"x-mockllm-session": "p"})
    await MODES[mode](sdk, "q")
    with pytest.raises(errors.ClientError) as caught:
        await MODES[mode](sdk, "again")
    error = caught.value
    assert (error.code, error.status) == (410, "FAILED_PRECONDITION")
    assert error.message.startswith("script_exhausted: ")
    for part in (run, "session.jsonl", "call 1 (0-based)", "1 entries"):
        assert part in error.message
    assert error.details["error"]["details"][0]["reason"] == "script_exhausted"
    assert error.response.headers["x-should-retry"] == "false"


async def test_an_unknown_verb_or_path_answers_in_googles_shape(serve, tmp_path):
    server = await serve(write_sessions(tmp_path / "one", {"p": [text_call("only")]}))
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{server.base_url}/v1beta/models/m:countTokens", json={"contents": []}) as response:
            body = await response.json()
            assert response.status == 400 and body["error"]["status"] == "INVALID_ARGUMENT"
            assert "generateContent" in body["error"]["message"]
        async with session.get(f"{server.base_url}/v1beta/cachedContents") as response:
            body = await response.json()
            assert response.status == 404 and body["error"]["status"] == "NOT_FOUND"


# -- header-less: routing by conversation ---------------------------------------------------------

class GeminiConversation:
    """Requests built the way a Gemini agent builds them: `systemInstruction` apart, the served
    content sent back as the SDK parsed it, tool results as `functionResponse` parts."""

    def __init__(self, *contents: types.Content) -> None:
        self.contents = list(contents)

    async def ask(self, sdk: Any) -> tuple[str, str]:
        response = await sdk.aio.models.generate_content(
            model="m", contents=self.contents, config=types.GenerateContentConfig(system_instruction=SYSTEM))
        content = response.candidates[0].content
        self.contents.append(content)
        calls = [p.function_call for p in content.parts if p.function_call]
        return ("tool", calls[0].name) if calls else ("text", response.text or "")

    def tool_result(self, text: str) -> None:
        call = next(p.function_call for p in self.contents[-1].parts if p.function_call)
        self.contents.append(types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
            id=call.id, name=call.name, response={"result": text}))]))

    def user(self, text: str) -> None:
        self.contents.append(user(text))


def user(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


async def test_headerless_tree_routes_by_conversation(serve, tmp_path):
    server = await serve(write_mixed_tree(tmp_path / "mixed"))
    run, base = await new_run(server.base_url, "mixed")
    sdk = client(root(base))
    got: dict[str, list[tuple[str, str]]] = {PRIMARY_ID: [], SPAWN_ID: [], FORK_ID: []}
    primary = GeminiConversation(user(PRIMARY_PROMPTS[0]))
    spawn = GeminiConversation(user(SPAWN_TASK))
    got[PRIMARY_ID].append(await primary.ask(sdk))
    primary.user(PRIMARY_PROMPTS[1])
    got[PRIMARY_ID].append(await primary.ask(sdk))
    got[SPAWN_ID].append(await spawn.ask(sdk))
    spawn.tool_result("alpha file contents")
    primary.tool_result("ALPHA")
    got[PRIMARY_ID].append(await primary.ask(sdk))
    got[SPAWN_ID].append(await spawn.ask(sdk))
    fork = GeminiConversation(*primary.contents[:2], user(FORK_TASK))
    got[FORK_ID].append(await fork.ask(sdk))
    fork.tool_result("codeword: SAFFRON")
    primary.tool_result("SAFFRON")
    got[PRIMARY_ID].append(await primary.ask(sdk))
    got[FORK_ID].append(await fork.ask(sdk))
    assert got == MIXED_ANSWERS
    status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
    assert status == 200 and isinstance(report, dict)
    assert report["consumed"] is True and report["failures"] == []
    assert not report.get("divergences"), report.get("divergences")


# -- golden bytes, the decoder --------------------------------------------------------------------

def test_golden_bytes():
    entry = msgspec.json.decode(msgspec.json.encode({"kind": "chunks", "chunks": [
        {"type": "block-start", "index": 0, "blockType": "reasoning"},
        {"type": "reasoning-delta", "index": 0, "text": "hm"},
        {"type": "block-start", "index": 1, "blockType": "text"},
        {"type": "text-delta", "index": 1, "text": "Hi"},
        {"type": "block-start", "index": 2, "blockType": "tool-call"},
        {"type": "tool-call-delta", "index": 2, "id": "call_1", "name": "ls", "argumentsDelta": "{\"a\":"},
        {"type": "tool-call-delta", "index": 2, "id": "call_1", "name": "ls", "argumentsDelta": "1}"},
        {"type": "block-end", "index": 2, "block": {"type": "tool-call", "id": "call_1", "name": "ls",
                                                    "arguments": "{\"a\":1}"}},
        {"type": "usage", "usage": {"inputTokens": 5, "outputTokens": 3, "cacheReadTokens": 2,
                                    "reasoningTokens": 1}},
        {"type": "finish", "reason": {"kind": "tool-calls"}}]}), type=ChunksEntry)
    reply = GEMINI.render(read(entry), Envelope("r-1", 0, "m"))
    tail = b',"modelVersion":"m","responseId":"r-1"}\n\n'

    def event(part: bytes) -> bytes:
        return b'data: {"candidates":[{"content":{"parts":[' + part + b'],"role":"model"},"index":0}]' + tail

    assert reply.stream_bytes(True) == (
        event(b'{"text":"hm","thought":true}') + event(b'{"text":"Hi"}')
        + event(b'{"functionCall":{"id":"call_1","name":"ls","args":{"a":1}}}')
        + b'data: {"candidates":[{"content":{"parts":[{"text":""}],"role":"model"},"finishReason":"STOP","index":0}],'
          b'"usageMetadata":{"promptTokenCount":7,"candidatesTokenCount":2,"totalTokenCount":10,'
          b'"thoughtsTokenCount":1,"cachedContentTokenCount":2}' + tail)
    assert msgspec.json.decode(reply.body) == {
        "candidates": [{"content": {"parts": [{"text": "hm", "thought": True}, {"text": "Hi"},
                                              {"functionCall": {"id": "call_1", "name": "ls", "args": {"a": 1}}}],
                                    "role": "model"}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 2, "totalTokenCount": 10,
                          "thoughtsTokenCount": 1, "cachedContentTokenCount": 2},
        "modelVersion": "m", "responseId": "r-1"}


@pytest.mark.parametrize("scenario_dir", corpus_scenarios())
def test_the_decoder_reads_back_every_rendered_corpus_call(scenario_dir):
    """Render, split into events as they arrive in odd pieces, decode: the recorded call again (its
    blocks, usage and finish), with a tool call's fragments joined (the wire sends it whole)."""
    corpus_or_skip()
    for session in load_scenario(scenario_dir).sessions:
        for entry in session.entries:
            if not isinstance(entry, ChunksEntry):
                continue
            stream = GEMINI.render(read(entry), Envelope("r", 0, "m")).stream_bytes(True)
            reader, decoder = SSEReader(), GEMINI.stream_decoder()
            chunks = []
            for start in range(0, len(stream), 7):
                for name, data in reader.feed(stream[start:start + 7]):
                    chunks += decoder.feed(name, data)
            chunks += decoder.close()
            assert _shape(chunks) == _shape(entry.chunks)


def _shape(chunks: Any) -> list[Any]:
    out: list[Any] = []
    for chunk in chunks:
        if isinstance(chunk, BlockEnd) and chunk.block.type == "tool-call":
            args = chunk.block.arguments
            out.append(("tool-call", chunk.block.id, chunk.block.name,
                        msgspec.json.decode(args) if isinstance(args, str) and args.strip() else args or {}))
        elif isinstance(chunk, BlockEnd) and chunk.block.text:
            out.append((chunk.block.type, chunk.block.text))
        elif isinstance(chunk, UsageChunk):
            out.append(chunk.usage)
        elif isinstance(chunk, FinishChunk):
            out.append(chunk.reason.kind)
    return out


async def test_a_side_route_is_chosen_by_the_model_in_the_path(serve, tmp_path):
    """Gemini names the model in the path, not the body: side routes still go by it."""
    folder = write_sessions(tmp_path / "titled", {"p": [text_call("MAIN ONE"), text_call("MAIN TWO")]})
    (folder / "title.json").write_text(json.dumps([{"kind": "chunks", "chunks": [
        {"type": "block-start", "index": 0, "blockType": "text"}, {"type": "text-delta", "index": 0, "text": "A title"},
        {"type": "finish", "reason": {"kind": "stop"}}]}]))
    route = {"model": "gemini-lite", "script": "title.json"}
    (folder / "mockllm.json").write_text(json.dumps({"side_routes": [route]}))
    server = await serve(folder)
    run, base = await new_run(server.base_url, "titled")
    sdk = client(root(base), {"x-mockllm-session": "p"})

    async def say(model: str) -> str:
        return (await sdk.aio.models.generate_content(model=model, contents="go")).text or ""

    assert [await say("gemini-m"), await say("gemini-lite"), await say("gemini-m")] == ["MAIN ONE", "A title",
                                                                                       "MAIN TWO"]
    status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
    assert status == 200 and isinstance(report, dict) and report["consumed"] is True
