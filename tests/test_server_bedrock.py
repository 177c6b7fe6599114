"""The Bedrock Converse dialect through boto3's `bedrock-runtime` client, over real sockets.

Every real dsh tree and every bundled recording, every session, streamed (`converse_stream`) and
not (`converse`): what the client assembles equals each session's own script. Then every base,
model ids botocore percent-encodes, a tool use and its result routed with no header, errors and
faults raising boto3's own classes (a 429 retried as boto3 retries), the event-stream framing
checked with botocore's own parser, golden payloads and the decoder's round trip.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from botocore.eventstream import EventStreamBuffer
from botocore.exceptions import ClientError, EventStreamError

from mockllm.dsh.chunks import BlockEnd, FinishChunk, UsageChunk
from mockllm.errors import RequestError
from mockllm.scenario.load import load_scenario
from mockllm.script.entries import ChunksEntry, HangEntry, ThrowEntry
from mockllm.wire.bedrock.dialect import BedrockConverse
from mockllm.wire.bedrock.eventstream import EventStreamEvents, Leads, event_headers
from mockllm.wire.bedrock.stream import EventStreamReader
from mockllm.wire.envelope import Envelope
from mockllm.wire.render import read
from tests.bedrock_client import (
    MODEL_ID,
    client,
    converse,
    converse_stream,
    expected_from_entry,
    fake_aws,
    off_loop,
    root,
    user,
    whole,
)
from tests.conftest import http, new_run, run_state
from tests.entry_pieces import entry_pieces
from tests.logbuilder import (
    FORK_ID,
    FORK_TASK,
    MIXED_ANSWERS,
    PRIMARY_ID,
    PRIMARY_PROMPTS,
    RECORDINGS,
    SPAWN_ID,
    SPAWN_TASK,
    corpus_or_skip,
    corpus_scenarios,
    text_call,
    tool_call,
    write_mixed_tree,
    write_override,
    write_sessions,
)

MODES = {"stream": converse_stream, "whole": converse}
BEDROCK = BedrockConverse()


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_aws(monkeypatch)

BUNDLED = [pytest.param(p.parent, id=f"recordings/{p.parent.name}")
           for p in sorted(RECORDINGS.glob("*/session.jsonl"))]


async def _replay_every_session(serve: Any, scenario_dir: Path, mode: str) -> None:
    scenario = load_scenario(scenario_dir)
    server = await serve(scenario_dir)
    run, base = await new_run(server.base_url, scenario.name)
    ask = MODES[mode]
    for number, session in enumerate(scenario.sessions):
        sdk = client(root(base), {"x-mockllm-session": f"live-{number}"})
        for call, entry in enumerate(session.entries):
            where = f"{session.file} call {call}"
            if isinstance(entry, ChunksEntry):
                received = await off_loop(ask, sdk, user(where))
                expected = expected_from_entry(entry)
                if mode == "whole":
                    received["fragments"] = whole(received["fragments"])
                    expected["fragments"] = whole(expected["fragments"])
                assert received == expected, where
            elif isinstance(entry, ThrowEntry):
                with pytest.raises(ClientError) as caught:
                    await off_loop(ask, sdk, user(where))
                error = caught.value.response
                assert error["ResponseMetadata"]["HTTPStatusCode"] == (entry.status or 500), where
                assert error["Error"]["Message"] == entry.message
            else:
                assert isinstance(entry, HangEntry)
                with pytest.raises(Exception, match=r"(?i)read timeout|timed out"):
                    await off_loop(ask, client(root(base), {"x-mockllm-session": f"live-{number}"}, timeout=0.3),
                                   user(where))
    status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
    assert status == 200 and isinstance(report, dict)
    assert report["failures"] == []
    assert report["consumed"] is True


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("scenario_dir", corpus_scenarios())
async def test_every_corpus_session_gets_its_own_recorded_calls(serve, scenario_dir, mode):
    corpus_or_skip()
    await _replay_every_session(serve, scenario_dir, mode)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("scenario_dir", BUNDLED)
async def test_every_bundled_recording_replays(serve, scenario_dir, mode):
    await _replay_every_session(serve, scenario_dir, mode)


@pytest.mark.parametrize("model_id", [MODEL_ID, "amazon.nova-lite-v1:0",
                                      "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.amazon.nova-pro-v1:0"],
                         ids=["colon", "dots", "arn"])
@pytest.mark.parametrize("base", ["root", "scenario", "run"])
async def test_every_base_and_model_ids_botocore_encodes(serve, tmp_path, base, model_id):
    server = await serve(write_sessions(tmp_path / "one", {"p": [text_call("hello there"), text_call("again")]}))
    run, run_base = await new_run(server.base_url, "one")
    urls = {"root": server.base_url, "scenario": f"{server.base_url}/scenarios/one", "run": root(run_base)}
    sdk = client(urls[base])
    received = await off_loop(converse_stream, sdk, user("task of p"), modelId=model_id)
    assert "".join(t for _, t in received["fragments"]) == "hello there"
    assert received["stop"] == "end_turn"
    answer = await off_loop(converse, sdk, [*user("task of p"), {"role": "assistant", "content": [
        {"text": "hello there"}]}, *user("more")], modelId=model_id)
    assert answer["fragments"] == [("text", "again")]
    if base == "run":
        journal = (await run_state(server.base_url, run))["journal"]
        assert [(c["dialect"], c["stream"]) for c in journal] == [("bedrock", True), ("bedrock", False)]


async def test_a_tool_use_and_its_result_turn(serve, tmp_path):
    """A tool call streamed with its recorded id and name, then the result turn (`toolResult`)
    routed to the same session by its conversation, with no session header."""
    folder = write_sessions(tmp_path / "tools", {"p": [tool_call("get_weather", '{"city": "Paris"}', "tooluse_1"),
                                                       text_call("It is sunny in Paris.")]})
    server = await serve(folder)
    run, base = await new_run(server.base_url, "tools")
    sdk = client(root(base))
    tools = {"tools": [{"toolSpec": {"name": "get_weather", "description": "weather",
                                     "inputSchema": {"json": {"type": "object"}}}}]}
    first = await off_loop(converse_stream, sdk, user("task of p"), toolConfig=tools)
    assert first["tool_calls"] == [{"toolUseId": "tooluse_1", "name": "get_weather", "input": {"city": "Paris"}}]
    assert first["stop"] == "tool_use"
    messages = [*user("task of p"),
                {"role": "assistant", "content": [{"toolUse": first["tool_calls"][0]}]},
                {"role": "user", "content": [{"toolResult": {"toolUseId": "tooluse_1", "content": [
                    {"json": {"sky": "clear"}}], "status": "success"}}]}]
    second = await off_loop(converse, sdk, messages, toolConfig=tools)
    assert second["fragments"] == [("text", "It is sunny in Paris.")]
    assert second["stop"] == "end_turn"
    status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
    assert status == 200 and isinstance(report, dict)
    assert report["consumed"] is True and report["failures"] == []


async def test_reasoning_streams_with_a_signature_and_comes_whole(serve, tmp_path):
    server = await serve(write_sessions(tmp_path / "think", {"p": [text_call("42", reasoning="let me see"),
                                                                   text_call("43", reasoning="again")]}))
    _, base = await new_run(server.base_url, "think")
    sdk = client(root(base), {"x-mockllm-session": "p"})
    response = await off_loop(sdk.converse_stream, modelId=MODEL_ID, messages=user("q"))
    events = [event for event in response["stream"]]
    deltas = [e["contentBlockDelta"] for e in events if "contentBlockDelta" in e]
    assert [d["delta"] for d in deltas] == [
        {"reasoningContent": {"text": "let "}}, {"reasoningContent": {"text": "me "}},
        {"reasoningContent": {"text": "see"}}, {"reasoningContent": {"signature": "mockllm-unsigned"}},
        {"text": "42"}]
    assert [d["contentBlockIndex"] for d in deltas] == [0, 0, 0, 0, 1]
    assert [next(iter(e)) for e in events] == ["messageStart", *["contentBlockDelta"] * 4, "contentBlockStop",
                                               "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"]
    answer = await off_loop(sdk.converse, modelId=MODEL_ID, messages=user("q2"))
    assert answer["output"]["message"]["content"] == [
        {"reasoningContent": {"reasoningText": {"text": "again", "signature": "mockllm-unsigned"}}}, {"text": "43"}]


async def test_headerless_tree_routes_by_conversation(serve, tmp_path):
    server = await serve(write_mixed_tree(tmp_path / "mixed"))
    run, base = await new_run(server.base_url, "mixed")
    sdk = client(root(base))
    got: dict[str, list[tuple[str, str]]] = {PRIMARY_ID: [], SPAWN_ID: [], FORK_ID: []}
    primary = Conversation(PRIMARY_PROMPTS[0])
    spawn = Conversation(SPAWN_TASK)
    got[PRIMARY_ID].append(await primary.ask(sdk))
    primary.user(PRIMARY_PROMPTS[1])
    got[PRIMARY_ID].append(await primary.ask(sdk))
    got[SPAWN_ID].append(await spawn.ask(sdk))
    spawn.tool_result("alpha file contents")
    primary.tool_result("ALPHA")
    got[PRIMARY_ID].append(await primary.ask(sdk))
    got[SPAWN_ID].append(await spawn.ask(sdk))
    fork = Conversation(None, primary.messages[:2], FORK_TASK)
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


class Conversation:
    """A Converse conversation as an agent keeps it: each answer appended, tool results as a user turn."""

    def __init__(self, first: str | None, messages: list[dict[str, Any]] | None = None,
                 task: str | None = None) -> None:
        self.messages: list[dict[str, Any]] = list(messages or [])
        if first is not None:
            self.user(first)
        if task is not None:
            self.user(task)
        self.pending: str | None = None

    def user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": [{"text": text}]})

    def tool_result(self, text: str) -> None:
        self.messages.append({"role": "user", "content": [{"toolResult": {"toolUseId": self.pending,
                                                                          "content": [{"text": text}]}}]})

    async def ask(self, sdk: Any) -> tuple[str, str]:
        answer = await off_loop(sdk.converse, modelId=MODEL_ID, messages=self.messages)
        content = answer["output"]["message"]["content"]
        self.messages.append({"role": "assistant", "content": content})
        for block in content:
            if "toolUse" in block:
                self.pending = block["toolUse"]["toolUseId"]
                return ("tool", block["toolUse"]["name"])
        return ("text", "".join(b.get("text", "") for b in content))


# -- errors and faults ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(("throw", "status", "kind"), [
    ({"code": "RATE_LIMIT"}, 429, "ThrottlingException"),
    ({"code": "SERVER"}, 500, "InternalServerException"),
    ({"code": "ModelErrorException", "status": 424}, 424, "ModelErrorException"),
], ids=["429", "500", "recorded-exception-name"])
async def test_a_throw_raises_boto3s_own_exception_class(serve, tmp_path, mode, throw, status, kind):
    server = await serve(write_override(tmp_path / "err", [{"kind": "throw", "message": "provider said no",
                                                             **throw}]).parent)
    _, base = await new_run(server.base_url, "err")
    sdk = client(root(base))
    with pytest.raises(getattr(sdk.exceptions, kind)) as caught:
        await off_loop(MODES[mode], sdk, user("q"))
    response = caught.value.response
    assert response["Error"] == {"Code": kind, "Message": "provider said no"}
    assert response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert response["ResponseMetadata"]["HTTPHeaders"]["x-amzn-errortype"] == kind


async def test_a_throw_after_chunks_is_an_exception_event_mid_stream(serve, tmp_path):
    chunks = [{"type": "block-start", "index": 0, "blockType": "text"},
              {"type": "text-delta", "index": 0, "text": "par"}, {"type": "text-delta", "index": 0, "text": "tial"}]
    server = await serve(write_override(tmp_path / "mid", [
        {"kind": "throw", "message": "overloaded", "code": "HTTP_503", "chunks": chunks}]).parent)
    _, base = await new_run(server.base_url, "mid")
    response = await off_loop(client(root(base)).converse_stream, modelId=MODEL_ID, messages=user("q"))
    seen: list[str] = []

    def read_all() -> None:
        for event in response["stream"]:
            if "contentBlockDelta" in event:
                seen.append(event["contentBlockDelta"]["delta"]["text"])

    with pytest.raises(EventStreamError) as caught:
        await off_loop(read_all)
    assert seen == ["par", "tial"]
    assert caught.value.response["Error"] == {"Code": "serviceUnavailableException", "Message": "overloaded"}


@pytest.mark.parametrize("mode", list(MODES))
async def test_one_call_past_the_end_is_a_validation_exception_naming_the_run(serve, tmp_path, mode):
    server = await serve(write_sessions(tmp_path / "one", {"p": [text_call("only")]}))
    run, base = await new_run(server.base_url, "one")
    sdk = client(root(base), {"x-mockllm-session": "p"})
    await off_loop(MODES[mode], sdk, user("q"))
    with pytest.raises(sdk.exceptions.ValidationException) as caught:
        await off_loop(MODES[mode], sdk, user("again"))
    response = caught.value.response
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 410
    assert response["Error"]["Message"].startswith("script_exhausted: ")
    for part in (run, "session.jsonl", "call 1 (0-based)", "1 entries"):
        assert part in response["Error"]["Message"]


async def test_a_429_fault_is_a_throttling_exception_boto3_retries(serve, tmp_path):
    server = await serve(write_sessions(tmp_path / "one", {"p": [text_call("after the retry")]}))
    run, base = await new_run(server.base_url, "one", faults=[{"call": 0, "status": 429}])
    received = await off_loop(converse_stream, client(root(base), retries=3), user("q"))
    assert "".join(t for _, t in received["fragments"]) == "after the retry"
    state = await run_state(server.base_url, run)
    assert [c["status"] for c in state["journal"]] == [429, 200]
    assert state["journal"][1].get("retry") is True


async def test_a_429_fault_without_retries_raises_throttling(serve, tmp_path):
    server = await serve(write_sessions(tmp_path / "one", {"p": [text_call("later")]}))
    _, base = await new_run(server.base_url, "one", faults=[{"call": 0, "status": 429}])
    sdk = client(root(base), retries=0)  # botocore's max_attempts counts retries: none
    with pytest.raises(sdk.exceptions.ThrottlingException):
        await off_loop(converse, sdk, user("q"))


async def test_a_cut_fault_breaks_the_event_stream_and_the_retry_gets_the_answer(serve, tmp_path):
    server = await serve(write_sessions(tmp_path / "one", {"p": [text_call("one two three four five")]}))
    _, base = await new_run(server.base_url, "one", faults=[{"call": 0, "cut_after": 3}])
    sdk = client(root(base))
    with pytest.raises(Exception) as caught:
        await off_loop(converse_stream, sdk, user("q"))
    assert not isinstance(caught.value, AssertionError)
    received = await off_loop(converse_stream, sdk, user("q"))
    assert "".join(t for _, t in received["fragments"]) == "one two three four five"


async def test_an_unknown_verb_answers_in_bedrocks_shape(serve, tmp_path):
    import aiohttp

    server = await serve(write_sessions(tmp_path / "one", {"p": [text_call("x")]}))
    async with aiohttp.ClientSession() as session, session.post(
            f"{server.base_url}/model/m/invoke", json={}) as response:
        body = await response.json(content_type=None)
        assert response.status == 404
        assert response.headers["x-amzn-errortype"] == "ResourceNotFoundException"
        assert body["message"].startswith("unknown_path: ")
    async with aiohttp.ClientSession() as session, session.post(
            f"{server.base_url}/model/m/converse", data=b"{}") as response:
        body = await response.json(content_type=None)
        assert response.status == 400 and response.headers["x-amzn-errortype"] == "ValidationException"
        assert "not a Bedrock Converse request" in body["message"]


# -- the framing, golden payloads, the decoder -----------------------------------------------------

def _entry(chunks: list[dict[str, Any]]) -> ChunksEntry:
    return msgspec.json.decode(msgspec.json.encode({"kind": "chunks", "chunks": chunks}), type=ChunksEntry)


GOLDEN = [
    {"type": "block-start", "index": 0, "blockType": "reasoning"},
    {"type": "reasoning-delta", "index": 0, "text": "hm"},
    {"type": "block-start", "index": 1, "blockType": "text"},
    {"type": "text-delta", "index": 1, "text": "Hi"},
    {"type": "text-delta", "index": 1, "text": " there"},
    {"type": "block-start", "index": 2, "blockType": "tool-call"},
    {"type": "tool-call-delta", "index": 2, "id": "t1", "name": "ls", "argumentsDelta": "{\"a\":"},
    {"type": "tool-call-delta", "index": 2, "id": "t1", "name": "ls", "argumentsDelta": "1}"},
    {"type": "block-end", "index": 2,
     "block": {"type": "tool-call", "id": "t1", "name": "ls", "arguments": "{\"a\":1}"}},
    {"type": "usage", "usage": {"inputTokens": 5, "outputTokens": 3, "cacheReadTokens": 2, "reasoningTokens": 1}},
    {"type": "finish", "reason": {"kind": "tool-calls"}}]


def test_golden_messages_parse_with_botocores_own_event_stream_parser():
    reply = BEDROCK.render(read(_entry(GOLDEN)), Envelope("r-1", 0, "m"))
    buffer = EventStreamBuffer()
    stream = reply.stream_bytes(True)
    buffer.add_data(stream)  # botocore checks the prelude and message CRCs as it parses
    messages = list(buffer)
    assert [(m.headers[":message-type"], m.headers[":content-type"]) for m in messages] == [
        ("event", "application/json")] * len(messages)
    assert [(m.headers[":event-type"], json.loads(m.payload)) for m in messages] == [
        ("messageStart", {"role": "assistant"}),
        ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "hm"}}}),
        ("contentBlockDelta", {"contentBlockIndex": 0,
                               "delta": {"reasoningContent": {"signature": "mockllm-unsigned"}}}),
        ("contentBlockStop", {"contentBlockIndex": 0}),
        ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"text": "Hi"}}),
        ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"text": " there"}}),
        ("contentBlockStop", {"contentBlockIndex": 1}),
        ("contentBlockStart", {"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "t1", "name": "ls"}}}),
        ("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"toolUse": {"input": "{\"a\":"}}}),
        ("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"toolUse": {"input": "1}"}}}),
        ("contentBlockStop", {"contentBlockIndex": 2}),
        ("messageStop", {"stopReason": "tool_use"}),
        ("metadata", {"metrics": {"latencyMs": 0}, "usage": {"inputTokens": 5, "outputTokens": 3, "totalTokens": 10,
                                                             "cacheReadInputTokens": 2}})]
    # Split by their lengths again, each frame is one message (what pacing and cut faults count).
    assert isinstance(reply.frames, EventStreamEvents)
    assert list(reply.frames) == [m for m in _raw_messages(stream)]
    assert reply.stream_bytes(True) == stream
    assert json.loads(reply.body) == {
        "metrics": {"latencyMs": 0},
        "output": {"message": {"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "hm", "signature": "mockllm-unsigned"}}},
            {"text": "Hi there"}, {"toolUse": {"toolUseId": "t1", "name": "ls", "input": {"a": 1}}}]}},
        "stopReason": "tool_use",
        "usage": {"inputTokens": 5, "outputTokens": 3, "totalTokens": 10, "cacheReadInputTokens": 2}}


def _raw_messages(stream: bytes) -> list[bytes]:
    out, at = [], 0
    while at < len(stream):
        total = int.from_bytes(stream[at:at + 4], "big")
        out.append(stream[at:at + total])
        at += total
    return out


def test_a_stream_error_is_an_exception_message():
    entry = msgspec.json.decode(msgspec.json.encode({"kind": "throw", "message": "slow down", "code": "RATE_LIMIT",
                                                     "chunks": [{"type": "text-delta", "index": 0, "text": "a"}]}),
                                type=ThrowEntry)
    reply = BEDROCK.render(read(entry), Envelope("r", 0, "m"))
    buffer = EventStreamBuffer()
    buffer.add_data(reply.stream_bytes(True))
    last = list(buffer)[-1]
    assert last.headers[":message-type"] == "exception"
    assert last.headers[":exception-type"] == "throttlingException"
    assert json.loads(last.payload) == {"message": "slow down"}


@pytest.mark.parametrize("scenario_dir", [*corpus_scenarios(), *BUNDLED])
def test_the_decoder_reads_back_every_rendered_call(scenario_dir):
    """Render, split into events as they arrive in odd pieces, decode: the recorded call again (its
    blocks, usage and finish); the whole answer decodes to the same."""
    for session in load_scenario(scenario_dir).sessions:
        for entry in session.entries:
            if not isinstance(entry, ChunksEntry):
                continue
            reply = BEDROCK.render(read(entry), Envelope("r", 0, "m"))
            stream = reply.stream_bytes(True)
            reader, decoder = EventStreamReader(), BEDROCK.stream_decoder()
            chunks = []
            for start in range(0, len(stream), 7):
                for name, data in reader.feed(stream[start:start + 7]):
                    chunks += decoder.feed(name, data)
            chunks += decoder.close()
            assert decoder.ended
            assert _shape(chunks) == _recorded(entry)
            whole_decoder = BEDROCK.stream_decoder()
            events = BEDROCK.body_events(reply.body)
            assert events is not None
            whole_chunks = [c for name, data in events for c in whole_decoder.feed(name, data)] + whole_decoder.close()
            assert _shape(whole_chunks) == _recorded(entry)


def _recorded(entry: ChunksEntry) -> list[Any]:
    """What a decoded call should hold: each recorded block (its deltas joined, or its whole
    content) in first-sight order, the usage, the finish."""
    blocks: dict[int, list[Any]] = {}
    tail: list[Any] = []
    for piece in entry_pieces(entry):
        if isinstance(piece, UsageChunk):
            u = piece.usage
            tail.append((u.inputTokens, u.outputTokens, u.cacheReadTokens, u.cacheWriteTokens))
        elif isinstance(piece, FinishChunk):
            tail.append(piece.reason.kind)
        elif piece.kind == "tool-call":
            block = blocks.setdefault(piece.block_index, ["tool-call", piece.id, piece.name, ""])
            block[1], block[2], block[3] = block[1] or piece.id, block[2] or piece.name, block[3] + piece.text
        else:
            blocks.setdefault(piece.block_index, [piece.kind, ""])[1] += piece.text
    out: list[Any] = []
    for block in blocks.values():
        if block[0] == "tool-call":
            out.append(("tool-call", block[1], block[2], json.loads(block[3]) if block[3].strip() else {}))
        elif block[1]:
            out.append(tuple(block))
    if not any(isinstance(item, tuple) for item in tail):  # Bedrock always sends usage: zeros when none was recorded
        tail.insert(0, (0, 0, None, None))
    return out + tail


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
            u = chunk.usage
            out.append((u.inputTokens, u.outputTokens, u.cacheReadTokens, u.cacheWriteTokens))  # no reasoning count
        elif isinstance(chunk, FinishChunk):
            out.append(chunk.reason.kind)
    return out


def test_kept_messages_are_dropped_past_their_bound_and_framed_again():
    """A block head keeps at most KEPT messages; past it they are framed afresh, byte for byte."""
    leads = Leads(event_headers("contentBlockDelta"), b'{"contentBlockIndex":0,"delta":{"text":', b"}}")
    values = [msgspec.json.encode(f"word {n}") for n in range(Leads.KEPT + 10)]
    first = leads.many(values[:100])
    framed = leads.many(values)  # over the bound: every value of this run framed anew
    assert framed[:100] == first
    buffer = EventStreamBuffer()
    buffer.add_data(b"".join(framed))
    assert [json.loads(m.payload)["delta"]["text"] for m in buffer] == [f"word {n}" for n in range(Leads.KEPT + 10)]
    assert leads.one(values[5]) == framed[5]


def test_a_request_in_neutral_form():
    image = {"image": {"format": "png", "source": {"bytes": "AA=="}}}
    reasoning = {"reasoningContent": {"reasoningText": {"text": "hm", "signature": "s"}}}
    use = {"toolUse": {"toolUseId": "t1", "name": "get", "input": {"b": 2, "a": 1}}}
    results = [{"toolResult": {"toolUseId": "t1", "content": [{"json": {"sky": "clear"}}]}},
               {"toolResult": {"toolUseId": "t2", "content": [{"text": "ok"}], "status": "error"}},
               {"cachePoint": {"type": "default"}}]
    body = {"system": [{"text": "You are terse."}, {"cachePoint": {"type": "default"}}],
            "messages": [
                {"role": "user", "content": [{"text": "Weather?"}, image]},
                {"role": "assistant", "content": [reasoning, {"text": "Checking."}, use]},
                {"role": "user", "content": results}],
            "toolConfig": {"tools": [{"toolSpec": {"name": "get", "inputSchema": {"json": {}}}}]}}
    request = BEDROCK.decode_routed(msgspec.json.encode(body), {"modelId": "m:0", "verb": "converse-stream"})
    assert (request.stream, request.model, request.offered_tools) == (True, "m:0", frozenset({"get"}))
    assert [(m.role, m.text, m.tool_calls, m.tool_call_id) for m in request.messages] == [
        ("system", "You are terse.", (), None),
        ("user", 'Weather?{"image":{"format":"png","source":{"bytes":"AA=="}}}', (), None),
        ("assistant", "Checking.", (("t1", "get", '{"a":1,"b":2}'),), None),
        ("tool", '{"sky":"clear"}', (), "t1"),
        ("tool", "ok", (), "t2")]
    assert BEDROCK.decode_routed(msgspec.json.encode(body), {"modelId": "m", "verb": "converse"}).stream is False
    with pytest.raises(RequestError, match="not /invoke"):
        BEDROCK.decode_routed(msgspec.json.encode(body), {"modelId": "m", "verb": "invoke"})
    with pytest.raises(RequestError, match='"messages" is empty'):
        BEDROCK.decode_request(b'{"messages": []}')


async def test_the_journal_keeps_no_credential_of_a_signed_call(serve, tmp_path):
    """boto3 signs every call (Authorization, X-Amz-Security-Token with session credentials): the
    run's journal, shown on the inspector page and in report files, keeps neither."""
    import boto3
    from botocore.config import Config

    server = await serve(write_sessions(tmp_path / "one", {"p": [text_call("hi")]}))
    run, base = await new_run(server.base_url, "one")
    sdk = boto3.client("bedrock-runtime", endpoint_url=root(base), config=Config(region_name="us-east-1"),
                       aws_access_key_id="AKIAJOURNALTEST00001", aws_secret_access_key="journal-secret",
                       aws_session_token="journal-session-token-value")
    await off_loop(converse, sdk, user("task of p"))
    journal = (await run_state(server.base_url, run))["journal"]
    kept = json.dumps(journal)
    assert journal[0]["headers"]["x-amz-security-token"] == "[redacted]"
    assert "AKIAJOURNALTEST00001" not in kept and "journal-session-token-value" not in kept
    assert "Signature=" not in kept
