"""Issue 25, staying up: a gzip bomb is refused at the body limit (10), idle and slow connections are
closed and a repeated log line is bounded (11)."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import zlib
from functools import cache

import aiohttp
import openai
import pytest

from mockllm.hosting import bodies, guard
from mockllm.hosting.log_rate import RepeatLimit
from tests.conftest import http
from tests.logbuilder import RECORDINGS
from tests.raw_http import json_of, raw_request


@cache
def bomb(megabytes: int = 256) -> bytes:
    """`megabytes` MiB of zeros, gzipped (about 1/1000 of that)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1024 * 1024)
    return b"".join([*(packer.compress(block) for _ in range(megabytes)), packer.flush()])


@pytest.fixture
def inflations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Bytes aiohttp itself inflated, per chunk (it must inflate none: mockllm does, bounded)."""
    from aiohttp.http_parser import DeflateBuffer

    seen: list[int] = []
    original = DeflateBuffer.feed_data

    def feed_data(self: DeflateBuffer, chunk: bytes, size: int) -> bool:
        seen.append(len(chunk))
        return original(self, chunk, size)

    monkeypatch.setattr(DeflateBuffer, "feed_data", feed_data)
    return seen


@pytest.mark.parametrize(("path", "shape"), [(b"/v1/chat/completions", "error"), (b"/api/chat", "error"),
                                             (b"/_mockllm/runs", "error")], ids=["chat", "ollama", "runs"])
async def test_a_gzip_bomb_is_refused_at_the_body_limit_and_aiohttp_inflates_nothing(serve, inflations, path, shape):
    server = await serve(RECORDINGS / "text-turn")
    health = asyncio.create_task(http("GET", f"{server.base_url}/_mockllm/health"))
    status, headers, body = await raw_request(server.base_url, path, body=bomb(),
                                              headers=(b"Content-Encoding: gzip", b"Content-Type: application/json"))
    assert status == 413, body[:300]
    assert headers["content-type"].startswith("application/json") and shape in json_of(body)
    assert (await health)[0] == 200
    assert inflations == [], "aiohttp inflated the body itself, with no bound"


async def test_a_gzipped_request_is_still_served(serve):
    server = await serve(RECORDINGS / "text-turn")
    body = gzip.compress(json.dumps({"model": "m", "stream": False,
                                     "messages": [{"role": "user", "content": "hi"}]}).encode())
    status, _, answer = await raw_request(server.base_url, b"/v1/chat/completions", body=body,
                                          headers=(b"Content-Encoding: gzip", b"Content-Type: application/json"))
    assert status == 200, answer[:300]
    assert json_of(answer)["object"] == "chat.completion"
    status, _, answer = await raw_request(server.base_url, b"/v1/chat/completions", body=b"not gzip at all",
                                          headers=(b"Content-Encoding: gzip",))
    assert status == 400


def test_inflating_stops_at_the_limit():
    assert bodies.inflate(bomb(64), 16 + zlib.MAX_WBITS, 1024 * 1024) is None
    assert bodies.inflate(gzip.compress(b"x" * 1000), 16 + zlib.MAX_WBITS, 1000) == b"x" * 1000


@pytest.fixture
def short_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard, "IDLE_TIMEOUT", 0.4)
    monkeypatch.setattr(guard, "BODY_TIMEOUT", 0.4)


async def closed_by_server(reader: asyncio.StreamReader, within: float = 10) -> bytes:
    """What the server sent before closing the connection (it must close it within `within` s)."""
    return await asyncio.wait_for(reader.read(), within)


async def test_idle_and_slow_connections_are_closed(serve, short_timeouts):
    server = await serve(RECORDINGS / "text-turn")
    port = int(server.base_url.rsplit(":", 1)[1])
    connections = [await asyncio.open_connection("127.0.0.1", port) for _ in range(40)]
    for _, writer in connections[:10]:  # a request head that never ends (slowloris)
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
    for _, writer in connections[10:15]:  # a body that never ends
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"a\"")
    kept_alive = connections[15]  # one request answered, then idle on a kept-alive connection
    kept_alive[1].write(b"GET /_mockllm/health HTTP/1.1\r\nHost: x\r\n\r\n")
    status, _ = await http("GET", f"{server.base_url}/_mockllm/health")
    assert status == 200, "the server answers meanwhile"
    answers = await asyncio.gather(*(closed_by_server(reader) for reader, _ in connections))
    for _, writer in connections:
        writer.close()
    assert all(a == b"" for a in answers[:10]) and all(a == b"" for a in answers[16:])
    assert all(a.startswith(b"HTTP/1.1 408") for a in answers[10:15]), answers[10]
    assert answers[15].startswith(b"HTTP/1.1 200")


async def test_a_streamed_answer_is_never_cut_by_the_idle_timeout(serve, short_timeouts):
    """A held call (a hang) lasts as long as its client: being answered is not being idle."""
    server = await serve(RECORDINGS / "hang-sidecar")
    async with openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0,
                                  default_headers={"x-mockllm-session": "agent"}) as client:
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}])  # call 0
        stream = await client.chat.completions.create(model="m", stream=True,
                                                      messages=[{"role": "user", "content": "go"}])
        seen = []
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(1.5):  # several idle timeouts
                async for chunk in stream:
                    seen.append(chunk)
        assert seen, "the hang's prefix arrived, and the connection was held past the idle timeout"


def test_a_repeated_log_line_is_bounded():
    limit = RepeatLimit(burst=5, window=60)
    records = [logging.LogRecord("asyncio", logging.ERROR, "x", 1, "socket.accept() out of system resource", None,
                                 None) for _ in range(10_000)]
    assert sum(limit.filter(r) for r in records) == 5
    other = logging.LogRecord("asyncio", logging.ERROR, "x", 1, "another line", None, None)
    assert limit.filter(other), "another line is not held back by the first"


def test_the_servers_loggers_are_limited():
    import uuid

    from mockllm.hosting import log_rate

    kept: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            kept.append(record.getMessage())

    handler = Keep()
    root = logging.getLogger()
    root.addHandler(handler)
    child, parent = f"the same warning {uuid.uuid4()}", f"the parent's warning {uuid.uuid4()}"
    try:
        log_rate.limit_repeats()
        for name in ("asyncio", "aiohttp.server", "mockllm"):
            assert log_rate._INSTALLED in logging.getLogger(name).filters
        for _ in range(50):  # a child logger's records are limited too, and counted once each
            logging.getLogger("mockllm.record.command").warning(child)
            logging.getLogger("mockllm").warning(parent)
    finally:
        root.removeHandler(handler)
    assert kept.count(child) == log_rate.BURST and kept.count(parent) == log_rate.BURST


_ = aiohttp


async def test_past_the_connection_bound_the_idle_longest_are_closed_at_once(serve, monkeypatch):
    """20,000 idle sockets must not use up the file limit before their timeout: past the bound, a new
    connection closes the oldest idle ones, and a real client still gets its answer."""
    monkeypatch.setattr(guard, "CONNECTIONS_KEPT", 20)
    server = await serve(RECORDINGS / "text-turn")  # the idle timeout stays a minute: not what closes them
    port = int(server.base_url.rsplit(":", 1)[1])
    connections = [await asyncio.open_connection("127.0.0.1", port) for _ in range(60)]
    try:
        status, _ = await http("GET", f"{server.base_url}/_mockllm/health")
        assert status == 200
        oldest = await asyncio.gather(*(closed_by_server(reader, 5) for reader, _ in connections[:30]))
        assert all(a == b"" for a in oldest), "the oldest idle connections were closed"
    finally:
        for _, writer in connections:
            writer.close()
