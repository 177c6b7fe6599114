"""The record proxy against a scripted upstream: pass-through, failures, secrets, crash safety."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import openai
import pytest

from mockllm.cli.validate import check_suite
from mockllm.dsh.reader import read_log
from mockllm.dsh.writer import recover
from mockllm.record.command import RecordOptions, start_recorder
from mockllm.scenario.load import load_scenario, load_suite
from tests.conftest import new_run
from tests.fake_upstream import Answer, FakeUpstream, chat_chunk, running_upstream

USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


def text_answer(*texts: str) -> Answer:
    pieces = [chat_chunk({"role": "assistant", "content": ""})]
    pieces += [chat_chunk({"content": t}) for t in texts]
    pieces += [chat_chunk({}, "stop"), chat_chunk({}, usage=USAGE), b"data: [DONE]\n\n"]
    return Answer(pieces)


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with running_upstream() as fake:
        yield fake


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


async def replay_text(serve, out: Path, session: str = "s1") -> str:
    server = await serve(out)
    _, base = await new_run(server.base_url, out.name)
    async with openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=0,
                                  default_headers={"x-mockllm-session": session}) as client:
        stream = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}],
                                                      stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])


async def test_each_piece_reaches_the_client_before_the_upstream_sends_the_next(upstream, tmp_path):
    """No buffering: the upstream holds piece 2 until the client has read piece 1 through the proxy."""
    answer = text_answer("Hel", "lo")
    released = asyncio.Event()
    answer.before[2] = released
    upstream.answers.append(answer)
    body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    async with await start_recorder(RecordOptions(upstream.base_url, tmp_path / "t", port=0)) as recorder, \
            aiohttp.ClientSession() as http, \
            http.post(recorder.base_url + "/v1/chat/completions", data=body,
                      headers={"Content-Type": "application/json", "x-mockllm-session": "s1"}) as response:
        first = await asyncio.wait_for(response.content.readuntil(b"\n\n"), 5)
        assert first == answer.pieces[0]
        received = first
        second = await asyncio.wait_for(response.content.readuntil(b"\n\n"), 5)
        received += second
        assert second == answer.pieces[1]
        released.set()
        received += await response.content.read()
        assert response.headers["x-request-id"] == "req_upstream"
    assert received == b"".join(answer.pieces), "the stream is passed on byte for byte"


@pytest.mark.parametrize(("reads", "finish"), [("all", "stop"), ("first", "aborted")],
                         ids=["read-to-done", "left-mid-answer"])
async def test_only_a_client_that_leaves_before_the_answers_end_makes_a_cut(upstream, tmp_path, reads, finish):
    """The openai SDK closes its connection once it has read `[DONE]`, and the upstream's own end (its
    last chunk of the body) may come later: that call was read whole and is recorded as the upstream
    sent it. A client that leaves before `[DONE]` is an agent cancelling: an aborted call."""
    answer = text_answer("all", " of it")
    answer.end = asyncio.Event()  # the upstream's end comes only once the recorder has recorded the call
    if reads == "first":
        answer.before[len(answer.pieces) - 1] = answer.end  # so does `[DONE]`: the client leaves before it
    upstream.answers.append(answer)
    out = tmp_path / "t"
    recorder = await start_recorder(RecordOptions(upstream.base_url, out, port=0))
    try:
        async with openai.AsyncOpenAI(base_url=recorder.base_url + "/v1", api_key="x", max_retries=0,
                                      default_headers={"x-mockllm-session": "s1"}) as client:
            stream = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}],
                                                          stream=True)
            if reads == "all":
                assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices]) == "all of it"
            else:
                await stream.__anext__()
                await stream.close()
        for _ in range(300):  # the proxy sees the client leave, and records the call
            if recorder.tree.sessions:
                break
            await asyncio.sleep(0.01)
        assert recorder.tree.sessions, "the call was recorded once the client left"
    finally:
        answer.end.set()
        await recorder.close()
    [entry] = load_scenario(out).sessions[0].entries
    assert entry.chunks[-1].reason.kind == finish


async def test_a_call_is_durable_when_it_ends_and_the_log_is_named_only_on_close(upstream, tmp_path):
    upstream.answers += [text_answer("one"), text_answer("two")]
    out = tmp_path / "t"
    recorder = await start_recorder(RecordOptions(upstream.base_url, out, port=0))
    async with openai.AsyncOpenAI(base_url=recorder.base_url + "/v1", api_key="x", max_retries=0,
                                  default_headers={"x-mockllm-session": "s1"}) as client:
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}], stream=True)
        stream = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}],
                                                      stream=True)
        async for _ in stream:
            pass
    # Mid-recording (or after a crash) the log is only a partial file: no tree looks complete.
    await recorder.tree.flushed()
    assert files(out) == ["envelopes.jsonl", "session.jsonl.partial"]
    await recorder.runner.cleanup()
    await recorder.upstream.close()
    recorder.tree.abandon()  # what a crash leaves
    recovered = recover(out / "session.jsonl.partial")
    assert [len(s.entries) for s in load_scenario(out).sessions] == [2]
    assert read_log(recovered).events[-1].type == "turn/end"


async def test_upstream_http_error_passes_through_and_replays_the_same(serve, upstream, tmp_path):
    error = {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                       "param": None, "code": "invalid_api_key"}}
    upstream.answers += [Answer([json.dumps(error).encode()], status=401, content_type="application/json"),
                         text_answer("fine")]
    out = tmp_path / "t"
    async with await start_recorder(RecordOptions(upstream.base_url, out, port=0)) as recorder, \
            openai.AsyncOpenAI(base_url=recorder.base_url + "/v1", api_key="sk-live-123", max_retries=0,
                               default_headers={"x-mockllm-session": "s1"}) as client:
        with pytest.raises(openai.AuthenticationError) as live:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}], stream=True)
        stream = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}],
                                                      stream=True)
        assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices]) == "fine"
    assert live.value.body == error["error"]
    assert upstream.received[0]["headers"]["Authorization"] == "Bearer sk-live-123"
    assert upstream.received[0]["headers"]["x-mockllm-session"] == "s1", "a mockllm upstream routes by it"
    assert files(out) == ["envelopes.jsonl", "replay.override.json", "session.jsonl"]
    assert not any(b"sk-live-123" in p.read_bytes() for p in out.iterdir()), "credentials are never written"
    sidecar = json.loads((out / "replay.override.json").read_text())
    assert sidecar == {"patches": [{"at": 0, "entry": {"kind": "throw", "message": "Incorrect API key provided",
                                                       "code": "invalid_api_key", "status": 401}}]}
    assert [str(d) for d in check_suite(load_suite(out, keep_logs=True))] == []

    server = await serve(out)
    _, base = await new_run(server.base_url, out.name)
    async with openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=0,
                                  default_headers={"x-mockllm-session": "s1"}) as client:
        with pytest.raises(openai.AuthenticationError) as replayed:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}], stream=True)
        stream = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}],
                                                      stream=True)
        assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices]) == "fine"
    assert replayed.value.status_code == 401
    assert replayed.value.message == live.value.message
    assert replayed.value.code == "invalid_api_key"


async def test_an_unreachable_upstream_is_a_clear_502_recorded_nowhere(tmp_path):
    async with running_upstream() as gone:
        dead = gone.base_url  # a port nothing listens on once this block ends
    out = tmp_path / "t"
    async with await start_recorder(RecordOptions(dead, out, port=0)) as recorder, \
            openai.AsyncOpenAI(base_url=recorder.base_url + "/v1", api_key="x", max_retries=0) as client:
        with pytest.raises(openai.InternalServerError) as caught:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}], stream=True)
    assert caught.value.status_code == 502
    assert "cannot reach the upstream" in caught.value.message and dead in caught.value.message
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert files(out) == []


async def test_redact_masks_secrets_in_every_recorded_string_even_split_across_fragments(serve, upstream, tmp_path):
    upstream.answers.append(text_answer("your key is sk-ab", "cd12 ok"))
    out = tmp_path / "t"
    options = RecordOptions(upstream.base_url, out, port=0, redact=(r"sk-[a-z0-9]+",))
    async with await start_recorder(options) as recorder, \
            openai.AsyncOpenAI(base_url=recorder.base_url + "/v1", api_key="x", max_retries=0,
                               default_headers={"x-mockllm-session": "s1"}) as client:
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "remember sk-zz99"}], stream=True)
        live = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert live == "your key is sk-abcd12 ok", "the client gets the answer as it came"
    log = (out / "session.jsonl").read_bytes()
    assert b"sk-" not in log
    assert b"[REDACTED]" in log and b"remember [REDACTED]" in log
    assert await replay_text(serve, out) == "your key is [REDACTED] ok"


async def test_a_whole_reply_is_recorded_as_the_stream_it_stands_for(serve, upstream, tmp_path):
    reply = {"id": "c1", "object": "chat.completion", "created": 1, "model": "m",
             "choices": [{"index": 0, "finish_reason": "stop",
                          "message": {"role": "assistant", "content": "whole answer"}}], "usage": USAGE}
    upstream.answers.append(Answer([json.dumps(reply).encode()], content_type="application/json"))
    out = tmp_path / "t"
    async with await start_recorder(RecordOptions(upstream.base_url, out, port=0)) as recorder, \
            openai.AsyncOpenAI(base_url=recorder.base_url + "/v1", api_key="x", max_retries=0,
                               default_headers={"x-mockllm-session": "s1"}) as client:
        completion = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert completion.choices[0].message.content == "whole answer"
    assert await replay_text(serve, out) == "whole answer"


async def test_a_configured_session_header_names_the_session_as_in_replay(upstream, tmp_path):
    """Record reads `--session-header` names as replay does: two agents whose first requests are alike
    are two sessions, each recorded under the id its header sent."""
    upstream.answers += [text_answer("a"), text_answer("b")]
    out = tmp_path / "t"
    async with await start_recorder(RecordOptions(upstream.base_url, out, port=0,
                                                  session_headers=("X-Agent-Id",))) as recorder:
        for agent in ("agent-1", "agent-2"):
            async with openai.AsyncOpenAI(base_url=recorder.base_url + "/v1", api_key="x", max_retries=0,
                                          default_headers={"x-agent-id": agent}) as client:
                stream = await client.chat.completions.create(model="m", stream=True,
                                                              messages=[{"role": "user", "content": "q"}])
                assert [c async for c in stream]
    assert [(s.id, len(s.entries)) for s in load_scenario(out).sessions] == [("agent-1", 1), ("agent-2", 1)]
