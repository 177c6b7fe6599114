"""Issue 25's stress test: hostile clients beside a clean replay, which must never deviate.

On one server, at once and for a bounded count of each (loopback only, under a deadline, every
socket closed at the end): idle sockets and never-ending request heads, gzip bombs, JSON nested
10,000 deep, session headers that are not UTF-8, and runs created and never ended (past the
live-run bound). Meanwhile a clean agent replays a recorded tree again and again with the OpenAI
SDK; every one of its runs must be consumed with no failure, no divergence and the recorded answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib

import pytest

from mockllm.hosting import guard
from mockllm.replay import runs as runs_module
from mockllm.scenario.load import load_scenario
from tests.agent_drive import drive, plan
from tests.conftest import http, new_run
from tests.logbuilder import RECORDINGS
from tests.raw_http import raw_request

SCENARIO = "tool-loop"
IDLE_SOCKETS = 120
BOMBS = 3
DEEP = b'{"model": "m", "messages": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
ABANDONED_RUNS = 120
CLEAN_RUNS = 6
DEADLINE = 60  # seconds: far past what it takes; a hung server fails the test instead of the suite


def bomb(megabytes: int = 72) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1024 * 1024)
    return b"".join([*(packer.compress(block) for _ in range(megabytes)), packer.flush()])


async def test_hostile_clients_beside_a_clean_replay_that_never_deviates(serve, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(guard, "IDLE_TIMEOUT", 0.5)
    monkeypatch.setattr(guard, "BODY_TIMEOUT", 0.5)
    monkeypatch.setattr(runs_module, "LIVE_KEPT", 50)
    server = await serve(RECORDINGS / SCENARIO)
    url = server.base_url
    port = int(url.rsplit(":", 1)[1])
    calls = plan(load_scenario(RECORDINGS / SCENARIO, keep_logs=True))
    gzip_bomb = await asyncio.to_thread(bomb)
    sockets: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    statuses: dict[str, list[int]] = {"bomb": [], "deep": [], "latin1": [], "runs": []}

    async def idle() -> None:
        for k in range(IDLE_SOCKETS):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            if k % 3 == 0:
                writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # a head that never ends
            sockets.append((reader, writer))

    async def bombs() -> None:
        for _ in range(BOMBS):
            status, _, _ = await raw_request(url, b"/v1/chat/completions", body=gzip_bomb,
                                             headers=(b"Content-Encoding: gzip",))
            statuses["bomb"].append(status)

    async def malformed() -> None:
        for _ in range(10):
            statuses["deep"].append((await raw_request(url, b"/v1/chat/completions", body=DEEP))[0])
            statuses["latin1"].append((await raw_request(url, b"/v1/chat/completions", body=b"{}",
                                                         headers=(b"x-mockllm-session: caf\xe9",)))[0])

    async def abandoned_runs() -> None:
        for _ in range(ABANDONED_RUNS):
            statuses["runs"].append((await http("POST", f"{url}/_mockllm/runs", {"scenario": SCENARIO}))[0])

    async def clean() -> list[dict[str, object]]:
        reports = []
        for _ in range(CLEAN_RUNS):
            run, base = await new_run(url, SCENARIO)
            await drive(base, calls)
            status, report = await http("DELETE", f"{url}/_mockllm/runs/{run}")
            assert status == 200 and isinstance(report, dict)
            reports.append(report)
        return reports

    try:
        async with asyncio.timeout(DEADLINE):
            results = await asyncio.gather(clean(), idle(), bombs(), malformed(), abandoned_runs())
            reports = results[0]
            # The idle sockets are closed by the server, not by the test.
            closed = await asyncio.gather(*(_closed(r) for r, _ in sockets))
    finally:
        for _, writer in sockets:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
    for report in reports:
        assert report["consumed"] is True and report["failures"] == [], report
        assert not report.get("divergences"), report
    assert all(closed), "every idle or slow connection was closed by the server"
    assert statuses["bomb"] == [413] * BOMBS
    assert set(statuses["deep"]) == {400} and set(statuses["latin1"]) == {400}
    assert set(statuses["runs"]) == {201}
    status, health = await http("GET", f"{url}/_mockllm/health")
    assert status == 200 and isinstance(health, dict) and health["runs"] <= 50


async def _closed(reader: asyncio.StreamReader) -> bool:
    """Whether the server closes this connection (its reader sees the end) within a few idle timeouts."""
    try:
        await asyncio.wait_for(reader.read(), 10)
    except TimeoutError:
        return False
    return True
