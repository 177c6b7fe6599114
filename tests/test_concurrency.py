"""Many sessions in many runs at once, and clients that leave: no crosstalk, no stuck server."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from mockllm.scenario.load import load_suite
from mockllm.server.running import start_server
from tests.conftest import http, new_run, run_state, sse_payloads
from tests.logbuilder import chunks_entry, finish, text_call, write_override, write_sessions

SESSIONS = [f"agent-{n}" for n in range(5)]
CALLS = 3
RUNS = 10


def answer_text(session: str, call: int) -> str:
    return f"{session} answers call {call} with care"


@pytest.fixture
def five(tmp_path: Path) -> Path:
    """A primary and four spawn children; every answer names its session and call."""
    return write_sessions(tmp_path / "five", {
        name: [text_call(answer_text(name, k), reasoning=f"{name} thinks {k}") for k in range(CALLS)]
        for name in SESSIONS
    })


async def eventually(probe: Callable[[], Awaitable[bool]], what: str, timeout: float = 3.0) -> None:
    """A bounded poll: `probe` must come true within `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await probe():
        assert loop.time() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.01)


async def holding(base_url: str, run: str, count: int) -> bool:
    return (await run_state(base_url, run))["holding"] == count


async def test_fifty_sessions_in_ten_runs_stream_at_once_without_crosstalk(serve, five):
    server = await serve(five)
    runs = [await new_run(server.base_url, "five") for _ in range(RUNS)]
    callers = [(run, base, name) for run, base in runs for name in SESSIONS]
    random.Random(7).shuffle(callers)  # arrival order interleaves runs and sessions
    barrier = asyncio.Barrier(len(callers))
    received: dict[tuple[str, str], list[tuple[str, str]]] = {}

    async def session_calls(http_session: aiohttp.ClientSession, run: str, base: str, name: str) -> None:
        got = received.setdefault((run, name), [])
        history: list[dict[str, Any]] = [{"role": "user", "content": f"task of {name}"}]
        for _ in range(CALLS):
            await barrier.wait()  # every session sends its k-th call at the same moment
            request = {"model": "m", "messages": history, "stream": True, "stream_options": {"include_usage": True}}
            async with http_session.post(f"{base}/chat/completions", json=request,
                                         headers={"x-mockllm-session": name}) as response:
                assert response.status == 200
                events = sse_payloads(await response.read())
            assert events[-1] == "[DONE]"
            deltas = [e["choices"][0]["delta"] for e in events[:-1] if e["choices"]]
            content = "".join(d.get("content") or "" for d in deltas)
            reasoning = "".join(d.get("reasoning_content") or "" for d in deltas)
            got.append((content, reasoning))
            history.append({"role": "assistant", "content": content})

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http_session:
        await asyncio.gather(*(session_calls(http_session, *caller) for caller in callers))

    assert len(received) == RUNS * len(SESSIONS) >= 50
    for (run, name), got in received.items():
        assert got == [(answer_text(name, k), f"{name} thinks {k}") for k in range(CALLS)], (run, name)
    for run, _ in runs:
        status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
        assert status == 200 and isinstance(report, dict)
        assert report["failures"] == []
        assert report["consumed"] is True
        assert [(s["id"], s["live_id"], s["served"]) for s in report["sessions"]] == [
            (name, name, CALLS) for name in SESSIONS]


async def test_fresh_ids_under_concurrency_each_get_one_whole_script(serve, five):
    """Fresh ids racing to bind: whichever script each gets, it gets all of it and nobody else's."""
    server = await serve(five)
    run, base = await new_run(server.base_url, "five")
    barrier = asyncio.Barrier(len(SESSIONS))

    async def caller(http_session: aiohttp.ClientSession, live: str) -> list[str]:
        texts = []
        for k in range(CALLS):
            await barrier.wait()
            async with http_session.post(f"{base}/chat/completions", headers={"x-mockllm-session": live},
                                         json={"messages": [{"role": "user", "content": f"{live} {k}"}]}) as response:
                assert response.status == 200
                texts.append((await response.json())["choices"][0]["message"]["content"])
        return texts

    async with aiohttp.ClientSession() as http_session:
        results = await asyncio.gather(*(caller(http_session, f"fresh-{n}") for n in range(len(SESSIONS))))
    owners = []
    for texts in results:
        owner = texts[0].split(" ")[0]
        assert texts == [answer_text(owner, k) for k in range(CALLS)]
        owners.append(owner)
    assert sorted(owners) == SESSIONS
    assert (await run_state(server.base_url, run))["consumed"] is True


LONG = chunks_entry(text_call(" ".join(f"w{n}" for n in range(3000))))


@pytest.fixture
def leaving(tmp_path: Path) -> Path:
    """One session: a long answer, a hang, an aborted call, then a normal answer."""
    aborted = chunks_entry([{"type": "block-start", "index": 0, "blockType": "text"},
                            {"type": "text-delta", "index": 0, "text": "about to be cancelled"}, finish("aborted")])
    return write_override(tmp_path / "leaving", [LONG, {"kind": "hang"}, aborted,
                                                  chunks_entry(text_call("still here"))]).parent


async def first_event_then_leave(http_session: aiohttp.ClientSession, base: str,
                                 before_leaving: Callable[[], Awaitable[None]] | None = None) -> dict[str, Any]:
    """Open a stream, read its first event, and go away without reading the rest."""
    response = await http_session.post(f"{base}/chat/completions", headers={"x-mockllm-session": "a"},
                                       json={"messages": [{"role": "user", "content": "q"}], "stream": True})
    assert response.status == 200
    line = await response.content.readline()
    if before_leaving is not None:
        await before_leaving()
    response.close()
    assert line.startswith(b"data: ")
    return json.loads(line[6:])


async def test_clients_that_leave_mid_stream_leave_the_server_healthy(serve, leaving, five, tmp_path, caplog):
    (tmp_path / "suite").mkdir()
    leaving.rename(tmp_path / "suite" / "leaving")
    five.rename(tmp_path / "suite" / "five")
    server = await serve(tmp_path / "suite")
    run, base = await new_run(server.base_url, "leaving")
    other_run, other_base = await new_run(server.base_url, "five")

    async with aiohttp.ClientSession() as http_session:
        first = await first_event_then_leave(http_session, base)  # the long answer, cut by the client
        assert first["choices"][0]["delta"]["content"] == "w0 "

        hang = await first_event_then_leave(
            http_session, base, lambda: eventually(lambda: holding(server.base_url, run, 1), "the hang is held"))
        assert hang["choices"][0]["delta"] == {"role": "assistant", "content": "partial"}
        await eventually(lambda: holding(server.base_url, run, 0), "the abandoned hang is released")

        # An aborted finish holds like a hang; while it is held, another run serves normally.
        response = await http_session.post(f"{base}/chat/completions", headers={"x-mockllm-session": "a"},
                                           json={"messages": [{"role": "user", "content": "q"}], "stream": True})
        assert response.status == 200
        assert b"about to be cancelled" in await response.content.readline()
        await eventually(lambda: holding(server.base_url, run, 1), "the aborted call is held")
        async with http_session.post(f"{other_base}/chat/completions", headers={"x-mockllm-session": "agent-2"},
                                     json={"messages": [{"role": "user", "content": "q"}]}) as other:
            assert other.status == 200
            assert (await other.json())["choices"][0]["message"]["content"] == answer_text("agent-2", 0)
        response.close()
        await eventually(lambda: holding(server.base_url, run, 0), "the aborted call is released")

        status, health = await http("GET", f"{server.base_url}/_mockllm/health")
        assert status == 200 and isinstance(health, dict) and health["status"] == "ok"
        async with http_session.post(f"{base}/chat/completions", headers={"x-mockllm-session": "a"},
                                     json={"messages": [{"role": "user", "content": "q"}]}) as after:
            assert after.status == 200
            assert (await after.json())["choices"][0]["message"]["content"] == "still here"

    state = await run_state(server.base_url, run)
    assert state["failures"] == []
    assert state["consumed"] is True
    assert [j["kind"] for j in state["journal"]] == ["ChunksEntry", "HangEntry", "ChunksEntry", "ChunksEntry"]
    other_state = await run_state(server.base_url, other_run)
    assert other_state["failures"] == []
    assert other_state["cursors"] == {"agent-2": 1}
    # A client leaving is not the server's error: nothing is logged as one (aiohttp logs a handler
    # that raises after its response started as "Error handling request").
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
async def test_hang_abandoned_by_a_client_timeout(serve, tmp_path, stream):
    write_override(tmp_path / "h", [{"kind": "hang"}, chunks_entry(text_call("after the hang"))])
    server = await serve(tmp_path / "h")
    run, base = await new_run(server.base_url, "h")
    async with openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=0, timeout=0.3) as sdk:
        with pytest.raises(openai.APITimeoutError):
            if stream:
                received = [chunk.choices[0].delta.content
                            async for chunk in await sdk.chat.completions.create(
                                model="m", messages=[{"role": "user", "content": "q"}], stream=True)]
                raise AssertionError(f"the hang ended by itself after {received}")
            await sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
        await eventually(lambda: holding(server.base_url, run, 0), "the hang is released")
        completion = await sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert completion.choices[0].message.content == "after the hang"
    status, health = await http("GET", f"{server.base_url}/_mockllm/health")
    assert status == 200 and isinstance(health, dict) and health["status"] == "ok"


async def test_shutdown_releases_held_calls_at_once(tmp_path):
    write_override(tmp_path / "h", [{"kind": "hang"}, {"kind": "hang"}])
    server = await start_server(load_suite(tmp_path / "h"), host="127.0.0.1", port=0)
    loop = asyncio.get_running_loop()
    try:
        async with aiohttp.ClientSession() as http_session:
            request = {"messages": [{"role": "user", "content": "q"}]}
            streamed = await http_session.post(f"{server.base_url}/v1/chat/completions",
                                               json={**request, "stream": True}, headers={"x-mockllm-session": "a"})
            assert b"partial" in await streamed.content.readline()
            plain = asyncio.ensure_future(http_session.post(f"{server.base_url}/v1/chat/completions", json=request,
                                                            headers={"x-mockllm-session": "a"}))
            await eventually(lambda: holding(server.base_url, "run-1", 2), "both calls are held")
            started = loop.time()
            await server.close()
            # Without the release, shutdown waits out aiohttp's grace period (a whole second or more).
            assert loop.time() - started < 0.5
            rest = await streamed.content.read()
            assert b"[DONE]" not in rest
            streamed.close()
            async with await plain as response:
                assert response.status == 503
                assert response.headers["x-should-retry"] == "false"
                assert (await response.json())["error"]["code"] == "shutting_down"
    finally:
        await server.close()
