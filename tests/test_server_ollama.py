"""The Ollama dialect through the official `ollama` client, over real sockets.

Every real dsh tree, every session, streamed (`chat(stream=True)`) and not: what the client
assembles equals each session's own script. Then errors, exhaustion, the model checks, the
client's `"tools": []`, header-less routing with tool results that carry no ids, faults, golden
bytes and the stream decoder's round trip.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import httpx
import msgspec
import ollama
import pytest

from mockllm.dsh.chunks import BlockEnd
from mockllm.scenario.load import load_scenario
from mockllm.script.entries import ChunksEntry, HangEntry, ThrowEntry
from mockllm.wire.envelope import Envelope
from mockllm.wire.ollama.dialect import Ollama
from mockllm.wire.ollama.ndjson import NDJSONReader
from mockllm.wire.render import read
from tests.conftest import http, new_run, run_state
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
    tool_call,
    write_mixed_tree,
    write_override,
    write_sessions,
)
from tests.ollama_client import chat_stream, chat_whole, client, close_all, expected_from_entry, root

MODES = {"stream": chat_stream, "whole": chat_whole}
HELD = (httpx.TimeoutException,)
OLLAMA = Ollama()


@pytest.fixture(autouse=True)
async def close_clients() -> Any:
    """Every client a test makes is closed after it, on its own loop."""
    yield
    await close_all()



def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("scenario_dir", corpus_scenarios())
async def test_every_session_gets_its_own_recorded_calls(serve, scenario_dir, mode):
    corpus_or_skip()
    scenario = load_scenario(scenario_dir)
    server = await serve(scenario_dir)
    run, base = await new_run(server.base_url, scenario.name)
    ask = MODES[mode]
    for number, session in enumerate(scenario.sessions):
        sdk = client(root(base), headers={"x-mockllm-session": f"live-{number}"})
        for call, entry in enumerate(session.entries):
            messages = [user(f"{session.file} call {call}")]
            where = f"{session.file} call {call}"
            if isinstance(entry, ChunksEntry):
                received = await ask(sdk, messages)
                expected = expected_from_entry(entry)
                if mode == "whole":
                    expected["fragments"] = [(k, expected[k]) for k in ("thinking", "content") if expected[k]]
                assert received == expected, where
            elif isinstance(entry, ThrowEntry):
                with pytest.raises(ollama.ResponseError) as caught:
                    await ask(sdk, messages)
                assert caught.value.status_code == (entry.status or 500), where
                assert caught.value.error == entry.message
            else:
                assert isinstance(entry, HangEntry)
                with pytest.raises(HELD):
                    await ask(client(root(base), headers={"x-mockllm-session": f"live-{number}"}, timeout=0.3),
                              messages)
    status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
    assert status == 200 and isinstance(report, dict)
    assert report["failures"] == []
    assert report["consumed"] is True


# -- errors ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(("throw", "status"), [({"code": "RATE_LIMIT"}, 429), ({"code": "SERVER"}, 500),
                                               ({"code": "AUTH", "status": 403}, 403)], ids=["429", "500", "403"])
async def test_a_throw_is_ollamas_error_body_raising_response_error(serve, tmp_path, mode, throw, status):
    server = await serve(write_override(tmp_path / "err", [{"kind": "throw", "message": "provider said no",
                                                             **throw}]).parent)
    _, base = await new_run(server.base_url, "err")
    with pytest.raises(ollama.ResponseError) as caught:
        await MODES[mode](client(root(base)), [user("q")])
    assert (caught.value.status_code, caught.value.error) == (status, "provider said no")


async def test_a_throw_after_chunks_is_an_error_line_mid_stream(serve, tmp_path):
    chunks = [{"type": "block-start", "index": 0, "blockType": "text"},
              {"type": "text-delta", "index": 0, "text": "par"}, {"type": "text-delta", "index": 0, "text": "tial"}]
    server = await serve(write_override(tmp_path / "mid", [
        {"kind": "throw", "message": "overloaded", "code": "HTTP_503", "chunks": chunks}]).parent)
    _, base = await new_run(server.base_url, "mid")
    seen: list[str] = []
    with pytest.raises(ollama.ResponseError) as caught:
        async for part in await client(root(base)).chat(model="m", messages=[user("q")], stream=True):
            seen.append(part.message.content or "")
    assert seen == ["par", "tial"]
    assert caught.value.error == "overloaded"


@pytest.mark.parametrize("mode", list(MODES))
async def test_one_call_past_the_end_is_410_in_ollamas_shape(serve, tmp_path, mode):
    server = await serve(write_sessions(tmp_path / "one", {"p": [text_call("only")]}))
    run, base = await new_run(server.base_url, "one")
    sdk = client(root(base), headers={"x-mockllm-session": "p"})
    assert (await MODES[mode](sdk, [user("q")]))["content"] == "only"
    with pytest.raises(ollama.ResponseError) as caught:
        await MODES[mode](sdk, [user("q"), {"role": "assistant", "content": "only"}, user("again")])
    assert caught.value.status_code == 410
    assert caught.value.error.startswith("script_exhausted: ")
    for part in (run, "session.jsonl", "call 1 (0-based)", "1 entries"):
        assert part in caught.value.error
    async with aiohttp.ClientSession() as session, session.post(
            f"{root(base)}/api/chat", headers={"x-mockllm-session": "p"},
            json={"model": "m", "messages": [user("x")]}) as response:
        raw = await response.json()
    assert response.status == 410 and response.headers["x-should-retry"] == "false"
    assert set(raw) == {"error", "code"} and raw["code"] == "script_exhausted"


async def test_a_bad_request_and_an_unknown_api_path_answer_in_ollamas_shape(serve, tmp_path):
    server = await serve(write_sessions(tmp_path / "one", {"p": [text_call("only")]}))
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{server.base_url}/api/chat", data=b'{"model":"m","messages":[]}') as response:
            assert response.status == 400
            assert (await response.json())["code"] == "invalid_request"
        async with session.post(f"{server.base_url}/api/generate", json={"model": "m"}) as response:
            assert response.status == 404
            body = await response.json()
            assert body["code"] == "unknown_path" and isinstance(body["error"], str)


# -- the client's checks and its "tools": [] ----------------------------------------------------

async def test_list_and_show_answer_the_clients_model_checks(serve, tmp_path):
    server = await serve(write_sessions(tmp_path / "one", {"p": [text_call("only")]}))
    for base in (server.base_url, f"{server.base_url}/scenarios/one", (await new_run(server.base_url, "one"))[1]):
        sdk = client(root(base))
        listed = await sdk.list()
        assert [m.model for m in listed.models] == ["deepseek-v4-flash"]
        shown = await sdk.show("any-model:7b")
        assert shown.capabilities and "tools" in shown.capabilities


async def test_the_clients_empty_tool_list_is_no_list_but_a_real_one_still_counts(serve, tmp_path):
    tree = write_sessions(tmp_path / "tools", {"p": [tool_call("read_file", '{"path":"a"}'), text_call("done")]})
    server = await serve(tree)
    run, base = await new_run(server.base_url, "tools")
    sdk = client(root(base))
    first = await chat_stream(sdk, [user("task of p")])  # the client sends "tools": []
    assert first["tool_calls"] == [{"name": "read_file", "arguments": {"path": "a"}}]
    state = await run_state(server.base_url, run)
    assert state["failures"] == [] and not state.get("divergences"), state
    run, base = await new_run(server.base_url, "tools")
    grep = {"type": "function", "function": {"name": "grep", "description": "d", "parameters": {"type": "object"}}}
    await chat_stream(client(root(base)), [user("task of p")], tools=[grep])
    state = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
    assert "read_file" in str(state[1]), "a tool list that lacks the recorded tool is a divergence"


# -- header-less: routing by conversation, tool results with no ids ------------------------------

class OllamaConversation:
    """Requests built the way an Ollama agent builds them: the served message sent back as the
    client parsed it (no tool-call ids), tool results by `tool_name`."""

    def __init__(self, *messages: dict[str, Any]) -> None:
        self.messages = [{"role": "system", "content": SYSTEM}, *messages]

    async def ask(self, sdk: ollama.AsyncClient) -> tuple[str, str]:
        answer = await sdk.chat(model="m", messages=self.messages, stream=False)
        self.messages.append(answer.message.model_dump(exclude_none=True))
        calls = answer.message.tool_calls or []
        return ("tool", calls[0].function.name) if calls else ("text", answer.message.content or "")

    def tool_result(self, text: str) -> None:
        name = self.messages[-1]["tool_calls"][0]["function"]["name"]
        self.messages.append({"role": "tool", "content": text, "tool_name": name})


async def test_headerless_tree_routes_by_conversation_and_tool_results_match_by_position(serve, tmp_path):
    server = await serve(write_mixed_tree(tmp_path / "mixed"))
    run, base = await new_run(server.base_url, "mixed")
    sdk = client(root(base))
    got: dict[str, list[tuple[str, str]]] = {PRIMARY_ID: [], SPAWN_ID: [], FORK_ID: []}
    primary = OllamaConversation(user(PRIMARY_PROMPTS[0]))
    spawn = OllamaConversation(user(SPAWN_TASK))
    got[PRIMARY_ID].append(await primary.ask(sdk))
    primary.messages.append(user(PRIMARY_PROMPTS[1]))
    got[PRIMARY_ID].append(await primary.ask(sdk))
    got[SPAWN_ID].append(await spawn.ask(sdk))
    spawn.tool_result("alpha file contents")
    primary.tool_result("ALPHA")
    got[PRIMARY_ID].append(await primary.ask(sdk))
    got[SPAWN_ID].append(await spawn.ask(sdk))
    fork = OllamaConversation(*primary.messages[1:3], user(FORK_TASK))
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


# -- faults, golden bytes, the decoder -----------------------------------------------------------

async def test_a_cut_fault_counts_ndjson_lines_and_a_status_fault_is_ollamas_shape(serve, tmp_path):
    tree = write_sessions(tmp_path / "two", {"p": [text_call("one two three four"), text_call("five")]})
    server = await serve(tree)
    _, base = await new_run(server.base_url, "two", faults=[{"call": 0, "cut_after": 2},
                                                           {"call": 1, "status": 503}])
    async with aiohttp.ClientSession() as session, session.post(
            f"{root(base)}/api/chat", json={"model": "m", "messages": [user("q")]}) as response:
        assert response.headers["Content-Type"].startswith("application/x-ndjson")
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.read()
    sdk = client(root(base), headers={"x-stainless-retry-count": "1"})
    assert (await chat_stream(sdk, [user("q")]))["content"] == "one two three four"
    with pytest.raises(ollama.ResponseError) as caught:
        await chat_stream(client(root(base)), [user("q"), {"role": "assistant", "content": "x"}, user("r")])
    assert caught.value.status_code == 503 and caught.value.error.startswith("mockllm fault")


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
        {"type": "usage", "usage": {"inputTokens": 5, "outputTokens": 3, "cacheReadTokens": 2}},
        {"type": "finish", "reason": {"kind": "tool-calls"}}]}), type=ChunksEntry)
    reply = OLLAMA.render(read(entry), Envelope("r", 0, "m"))
    head = b'{"model":"m","created_at":"1970-01-01T00:00:00Z","message":'
    assert reply.stream_bytes(True) == (
        head + b'{"role":"assistant","content":"","thinking":"hm"},"done":false}\n'
        + head + b'{"role":"assistant","content":"Hi"},"done":false}\n'
        + head + b'{"role":"assistant","content":"","tool_calls":[{"id":"call_1","function":{"index":0,"name":"ls",'
                 b'"arguments":{"a":1}}}]},"done":false}\n'
        + head + b'{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":7,'
                 b'"eval_count":3}\n')
    assert msgspec.json.decode(reply.body) == {
        "model": "m", "created_at": "1970-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": "Hi", "thinking": "hm",
                    "tool_calls": [{"id": "call_1", "function": {"index": 0, "name": "ls", "arguments": {"a": 1}}}]},
        "done": True, "done_reason": "stop", "prompt_eval_count": 7, "eval_count": 3}


@pytest.mark.parametrize("scenario_dir", corpus_scenarios())
def test_the_decoder_reads_back_every_rendered_corpus_call(scenario_dir):
    """Render, split into lines as they arrive in odd pieces, decode: the recorded call again, with a
    tool call's fragments joined (the wire sends it whole)."""
    corpus_or_skip()
    for session in load_scenario(scenario_dir).sessions:
        for entry in session.entries:
            if not isinstance(entry, ChunksEntry):
                continue
            stream = OLLAMA.render(read(entry), Envelope("r", 0, "m")).stream_bytes(True)
            reader, decoder = NDJSONReader(), OLLAMA.stream_decoder()
            chunks = []
            for start in range(0, len(stream), 7):
                for name, data in reader.feed(stream[start:start + 7]):
                    chunks += decoder.feed(name, data)
            chunks += decoder.close()
            assert _shape(chunks) == _shape(entry.chunks)


def _shape(chunks: Any) -> list[tuple[str, str]]:
    """What the wire keeps of a call: each block's kind and content (tool calls by name and arguments
    object), the usage's prompt and output counts, the finish kind."""
    out: list[tuple[str, str]] = []
    for chunk in chunks:
        if isinstance(chunk, BlockEnd):
            block = chunk.block
            if block.type == "tool-call":
                args = block.arguments if isinstance(block.arguments, str) else msgspec.json.encode(block.arguments)
                out.append(("tool-call", f"{block.name} {msgspec.json.decode(args or b'{}') if args else {}}"))
            elif block.text:
                out.append((block.type, block.text))
    kinds = [c.reason.kind for c in chunks if type(c).__name__ == "FinishChunk"]
    usages = [c.usage for c in chunks if type(c).__name__ == "UsageChunk"]
    if usages:
        u = usages[-1]
        out.append(("usage", f"{u.inputTokens + (u.cacheReadTokens or 0)} {u.outputTokens}"))
    out.append(("finish", kinds[-1] if kinds else "none"))
    return out


async def test_pace_spaces_ndjson_lines(serve, tmp_path):
    """`--pace MS` puts MS between events: an Ollama line is an event."""
    server = await serve(write_sessions(tmp_path / "one", {"p": [text_call("one two three four five")]}), pace="40")
    _, base = await new_run(server.base_url, "one")
    arrived: list[float] = []
    loop = asyncio.get_running_loop()
    async for _ in await client(root(base)).chat(model="m", messages=[user("task of p")], stream=True):
        arrived.append(loop.time())
    assert len(arrived) >= 4
    assert arrived[-1] - arrived[0] >= 0.04 * (len(arrived) - 1) * 0.8
