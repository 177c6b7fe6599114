"""Record mode's upstream client (`mockllm.record.upstream`) against a raw socket server that answers
with scripted bytes: every framing HTTP/1.1 allows, split at every byte, kept-alive reuse, a stale
connection retried, a cut, an unreachable upstream."""

from __future__ import annotations

import asyncio
import gzip
import ssl
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from mockllm.record.upstream import Upstream, UpstreamCut, UpstreamError

CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n"
           b"X-Request-Id: r1\r\n\r\n"  # three chunks (one with an extension, one holding a CRLF), a trailer
           b"7\r\ndata: 1\r\n2;ext=1\r\n\n\n\r\n10\r\ndata: [DONE]\n\n\r\n\r\n0\r\nX-Trailer: t\r\n\r\n")
CHUNKED_BODY = b"data: 1\n\ndata: [DONE]\n\n\r\n"

# A script: for each request a connection reads, what to answer (bytes; a callable of the request; or
# None: close the connection without answering).
Answer = bytes | Callable[[bytes], bytes] | None


@asynccontextmanager
async def raw_server(answers: list[Answer], *, split: int = 0, close_after: bool = False,
                     pause: asyncio.Event | None = None) -> AsyncIterator[tuple[str, list[bytes]]]:
    """A server on 127.0.0.1 that answers the requests it reads with `answers`, in order, each
    written `split` bytes at a time (0: at once); yields its base URL and the requests it saw."""
    seen: list[bytes] = []
    connections: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        try:
            while answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                request = head + await reader.readexactly(length)
                seen.append(request)
                answer = answers.pop(0)
                if answer is None:
                    return
                data = answer(request) if callable(answer) else answer
                for start in range(0, len(data), split or len(data) or 1):
                    writer.write(data[start:start + (split or len(data))])
                    await writer.drain()
                    if split:
                        await asyncio.sleep(0)
                if pause is not None:
                    await pause.wait()
                if close_after:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        server.close()
        for writer in connections:
            writer.close()
        await server.wait_closed()


async def fetch(upstream: Upstream, url: str, body: bytes = b"{}") -> tuple[int, str, dict[str, str], bytes]:
    exchange = upstream.start("POST", url, [(b"Authorization", b"Bearer k"), (b"X-Mockllm-Session", b"s")], body)
    try:
        answer = await exchange.answer()
        return answer.status, answer.content_type, dict(answer.headers), await answer.read()
    finally:
        exchange.close()


@pytest.mark.parametrize("split", [0, 1, 5])
async def test_a_chunked_answer_is_read_whole_however_it_is_split(split: int) -> None:
    async with raw_server([CHUNKED], split=split) as (base, seen):
        upstream = Upstream()
        status, content_type, headers, body = await fetch(upstream, base + "/v1/chat/completions?x=1", b'{"a":1}')
        await upstream.close()
    assert (status, content_type, body) == (200, "text/event-stream", CHUNKED_BODY)
    assert headers["X-Request-Id"] == "r1"
    request = seen[0]
    assert request.startswith(b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"\r\nAuthorization: Bearer k\r\n" in request and b"\r\nAccept-Encoding: identity\r\n" in request
    assert request.endswith(b"Content-Length: 7\r\n\r\n{\"a\":1}")


async def test_content_length_gzip_and_informational_heads() -> None:
    packed = gzip.compress(b'{"ok": true}')
    answers: list[Answer] = [
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(packed) + packed,
        b"HTTP/1.1 204 No Content\r\n\r\n",
    ]
    async with raw_server(answers, split=3) as (base, seen):
        upstream = Upstream()
        assert (await fetch(upstream, base + "/a"))[::3] == (201, b"hello")
        assert (await fetch(upstream, base + "/b"))[::3] == (200, b'{"ok": true}')
        assert (await fetch(upstream, base + "/c"))[::3] == (204, b"")
        await upstream.close()
    assert len(seen) == 3


async def test_a_kept_alive_connection_is_reused_and_the_next_request_is_sent_at_once() -> None:
    async with raw_server([CHUNKED, CHUNKED, CHUNKED]) as (base, seen):
        upstream = Upstream()
        await fetch(upstream, base + "/one")
        exchange = upstream.start("POST", base + "/two", [], b"{}")
        assert exchange.sent  # written on the idle connection before anything was awaited
        answer = await exchange.answer()
        assert await answer.read() == CHUNKED_BODY
        exchange.close()
        open_connections = len(upstream._open)
        await upstream.close()
    assert len(seen) == 2 and open_connections == 1  # one connection carried both


async def test_an_answer_framed_by_the_connections_end_is_read_and_the_connection_not_kept() -> None:
    async with raw_server([b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"a\": 1}"],
                          close_after=True) as (base, _):
        upstream = Upstream()
        assert (await fetch(upstream, base + "/x"))[3] == b'{"a": 1}'
        assert not upstream._idle.get(("http", "127.0.0.1", int(base.rsplit(":", 1)[1])))
        await upstream.close()


async def test_a_stale_kept_alive_connection_is_retried_once_on_a_new_one() -> None:
    # The first connection answers once, then closes as the second request arrives, unanswered.
    async with raw_server([CHUNKED, None, CHUNKED]) as (base, seen):
        upstream = Upstream()
        await fetch(upstream, base + "/one")
        status, _, _, body = await fetch(upstream, base + "/two")
        await upstream.close()
    assert (status, body) == (200, CHUNKED_BODY)
    assert [r.split(b" ")[1] for r in seen] == [b"/one", b"/two", b"/two"]


async def test_an_answer_that_breaks_off_is_a_cut_and_a_closed_port_is_unreachable() -> None:
    cut = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel"
    async with raw_server([cut], close_after=True) as (base, _):
        upstream = Upstream()
        exchange = upstream.start("POST", base + "/x", [], b"{}")
        answer = await exchange.answer()
        with pytest.raises(UpstreamCut):
            await answer.read()
        exchange.close()
    with pytest.raises(UpstreamError, match=r"refused|Connect call failed|connect"):
        await fetch(upstream, base + "/x")
    await upstream.close()


async def test_an_answer_that_is_not_http_is_an_upstream_error() -> None:
    async with raw_server([b"SSH-2.0-OpenSSH\r\n\r\n"]) as (base, _):
        upstream = Upstream()
        with pytest.raises(UpstreamError, match=r"did not answer in HTTP/1\.1"):
            await fetch(upstream, base + "/x")
        await upstream.close()


async def test_a_url_that_is_not_http_fails_when_its_answer_is_awaited() -> None:
    upstream = Upstream()
    exchange = upstream.start("POST", "localhost:8080/v1/chat/completions", [], b"{}")
    assert not exchange.sent
    with pytest.raises(UpstreamError, match="not an http"):
        await exchange.answer()
    exchange.close()


async def test_an_exchange_closed_before_its_answer_drops_its_connection_quietly(
        caplog: pytest.LogCaptureFixture) -> None:
    async with raw_server([CHUNKED] * 3) as (base, _):
        upstream = Upstream()
        await fetch(upstream, base + "/one")
        exchange = upstream.start("POST", base + "/begun-for-nothing", [], b"{}")
        assert exchange.sent
        exchange.close()  # as the server does when the call it was begun for is refused
        await asyncio.sleep(0.05)
        assert not upstream._open
        assert (await fetch(upstream, base + "/next"))[0] == 200  # on a new connection
        await upstream.close()
    assert "never retrieved" not in caplog.text


async def test_an_https_upstream_is_read_over_tls_and_its_connection_kept(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(2):
            head = await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0]))
            writer.write(CHUNKED)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=served)
    port = server.sockets[0].getsockname()[1]
    upstream = Upstream(ssl_context=ssl.create_default_context(cafile=str(cert)))
    try:
        for _ in range(2):
            status, _, _, body = await fetch(upstream, f"https://127.0.0.1:{port}/v1/chat/completions")
            assert (status, body) == (200, CHUNKED_BODY)
        assert len(upstream._open) == 1  # the second request went on the first's TLS connection
    finally:
        await upstream.close()
        server.close()
        await server.wait_closed()
