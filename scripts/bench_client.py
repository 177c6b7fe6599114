#!/usr/bin/env python3
"""The benchmark's load client: one process, a minimal HTTP/1.1 keep-alive client on uvloop, driving ONE server.

    python3 scripts/bench_client.py CONFIG.json      (prints one JSON result on stdout)

Started by scripts/bench.py once per server and phase; not meant to be run by hand. CONFIG holds:
`target` ("mockllm" | "baseline"), `base_url`, `pid` (the server process, for its CPU time and
RSS from /proc), `scenario`, `sessions` and `calls_per_session` (the shape of the stream scenario),
`deltas` and `text` (what every response must carry), `body` (the chat request), and `phase`:
  {"kind": "ttfb", "requests": N}                         sequential requests, time to first byte
                      (CONFIG may instead hold `targets`: [{target, base_url, pid}, ...]; the
                      requests then alternate between those servers and the result is {target: ...};
                      so may the scale phase)
  {"kind": "burst", "requests": N, "concurrency": C}     N requests over C connections, requests/s
  {"kind": "scale", "levels": [...], "runs": R, "seconds": S, "max_requests": M, "passes": P}
                      P passes; a pass runs each level (in order, odd passes in reverse) on R
                      fresh runs for S seconds or M requests (with `targets`: each level on
                      every server in turn; see scale_paired)

Two clients (CONFIG `client`). `"aiohttp"`: aiohttp's own client, one ClientSession (a pool of one
connection) per worker; TTFB is taken when the first body chunk is read. `"raw"` (the default):
on 2 cores aiohttp's per-request cost is higher than mockllm's, so at high concurrency aiohttp's
client measures itself; the raw client is an asyncio.Protocol per connection: a
request is one transport.write of bytes built before the timing starts (request line, Host,
Content-Type, Content-Length, x-mockllm-session, the body); the response is parsed incrementally
as it arrives: status line, headers, then the body framed by `Transfer-Encoding: chunked` (what an
aiohttp StreamResponse sends; every chunk-size line and CRLF is checked, trailers allowed) or
`Content-Length` (or up to the close). Bytes past the end of a response, or arriving with no request
outstanding, are an error, as is a lost connection. Each worker owns one connection and sends one
request at a time on it (no pipelining); connections are opened before the timing starts. A
watchdog aborts a request with no complete response after `request_timeout` seconds (default 60).
TTFB is taken when the first body byte is handed to the protocol.

How requests reach distinct recorded sessions (mockllm): runs are created with POST /_mockllm/runs
before any timing starts. The stream scenario has `sessions` recorded sessions of
`calls_per_session` calls each, so one run answers sessions * calls_per_session requests. Request
slot j of a run is sent with `x-mockllm-session: <run>/live-<j // calls_per_session>`: every live
session binds to its own recorded session on its first call (a bind per calls_per_session
requests), then its cursor walks its script. That is the work a real test run does (a run lookup,
a session lookup, sometimes a bind, a cursor step), with no run or script ever exhausted. The
baseline is sent the same bodies and headers. After the phase every run is ended with DELETE and
its report must show no failures.

Every response is verified (Verifier), exactly and cheaply:
- status 200 and Content-Type text/event-stream; the body de-chunked as above;
- the FIRST body seen with a given completion id (`chatcmpl-mockllm-<script>-<call>`; mockllm's
  stream for one recorded call is byte-identical every time) gets the full check, `verify`: an SSE
  stream whose events are all `data:` JSON chat.completion.chunk objects carrying that one id,
  exactly `deltas` content deltas that join to `text`, one `stop` finish, one usage chunk, and
  `data: [DONE]` last. Every LATER body with that id must equal that first body byte for byte: as
  strict as the full check, for a dict lookup and a memcmp; a truncated, padded or garbled body
  fails it;
- (mockllm) the id must belong to the session that asked: per run, each live session must be
  answered from one recorded session only, no recorded session may answer two live sessions, and
  no call of a session may be answered twice. A response crossed to another session, a cursor that
  skipped or repeated, or a stale replay fails it. (The baseline answers the first call's frames to
  every request, so only the byte check applies to it.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec

CLK_TCK = os.sysconf("SC_CLK_TCK")
CLIENT = "raw asyncio HTTP/1.1 keep-alive (bench_client.py)"


class _Delta(msgspec.Struct):
    content: str | None = None


class _Choice(msgspec.Struct):
    delta: _Delta
    finish_reason: str | None = None


class _Chunk(msgspec.Struct):
    id: str
    object: str
    choices: list[_Choice]
    usage: dict[str, Any] | None = None


_frames_decoder = msgspec.json.Decoder(list[_Chunk])
chunk_decoder = msgspec.json.Decoder(_Chunk)  # one chat.completion.chunk event's JSON


class BadResponse(Exception):
    pass


class HTTPError(Exception):
    """The connection broke, or the response is not well-formed HTTP/1.1."""


def verify(status: int, body: bytes, deltas: int, text: str) -> None:
    """Raise BadResponse unless `body` is the complete expected SSE stream."""
    if status != 200:
        raise BadResponse(f"status {status}: {body[:300]!r}")
    events = body.split(b"\n\n")
    if events[-1] != b"":
        raise BadResponse(f"stream does not end with a blank line: {body[-80:]!r}")
    events.pop()
    if not events or events[-1] != b"data: [DONE]":
        raise BadResponse(f"stream does not end with data: [DONE]: {body[-80:]!r}")
    events.pop()
    if not all(e.startswith(b"data: {") for e in events):
        raise BadResponse("an event is not a data: JSON object")
    try:
        chunks = _frames_decoder.decode(b"[" + b",".join(e[6:] for e in events) + b"]")
    except msgspec.DecodeError as exc:
        raise BadResponse(f"bad event JSON: {exc}") from None
    parts: list[str] = []
    finishes: list[str] = []
    usage = 0
    for chunk in chunks:
        if chunk.object != "chat.completion.chunk":
            raise BadResponse(f"object {chunk.object!r}")
        if chunk.id != chunks[0].id:
            raise BadResponse(f"completion ids differ within one stream: {chunks[0].id!r}, {chunk.id!r}")
        if chunk.usage is not None:
            usage += 1
        for choice in chunk.choices:
            if choice.delta.content is not None:
                parts.append(choice.delta.content)
            if choice.finish_reason is not None:
                finishes.append(choice.finish_reason)
    if len(parts) != deltas or "".join(parts) != text:
        raise BadResponse(f"{len(parts)} content deltas (expected {deltas}) or the text differs")
    if finishes != ["stop"] or usage != 1:
        raise BadResponse(f"finish reasons {finishes}, usage chunks {usage}")


_COMPLETION_ID = re.compile(rb"chatcmpl-mockllm-(\d+)-(\d+)")


class Verifier:
    """Checks every response: see the module docstring. `key` is (run, live session) for mockllm, else None."""

    def __init__(self, deltas: int, text: str, sessions: int, calls_per_session: int) -> None:
        self.deltas = deltas
        self.text = text
        self.sessions = sessions
        self.calls_per_session = calls_per_session
        self.expected: dict[bytes, bytes] = {}  # completion id -> the body fully verified with it
        self.origin: dict[bytes, tuple[int, int]] = {}  # completion id -> (recorded session, call)
        self.bound: dict[tuple[str, int], list[int]] = {}  # (run, live) -> [recorded session, calls-seen mask]
        self.owner: dict[tuple[str, int], int] = {}  # (run, recorded session) -> live

    def __call__(self, status: int, headers: dict[bytes, bytes], body: bytes, key: tuple[str, int] | None) -> None:
        if status != 200:
            raise BadResponse(f"status {status}: {body[:300]!r}")
        if not headers.get(b"content-type", b"").startswith(b"text/event-stream"):
            raise BadResponse(f"content-type {headers.get(b'content-type')!r}")
        start = body.find(b'"id":"')
        end = body.find(b'"', start + 6) if start >= 0 else -1
        if end < 0:
            verify(status, body, self.deltas, self.text)
            raise BadResponse(f"no completion id: {body[:120]!r}")
        cid = body[start + 6:end]
        expected = self.expected.get(cid)
        if expected is None:
            verify(status, body, self.deltas, self.text)  # the full check, once per completion id
            if len(self.expected) < 4096:
                self.expected[cid] = body
        elif body != expected:
            verify(status, body, self.deltas, self.text)  # for its message, when it has one
            raise BadResponse(f"{cid.decode(errors='replace')}: {len(body)} bytes differ from the "
                              f"{len(expected)} first verified with that id")
        if key is not None:
            self.account(cid, key)

    def account(self, cid: bytes, key: tuple[str, int]) -> None:
        origin = self.origin.get(cid)
        if origin is None:
            match = _COMPLETION_ID.fullmatch(cid)
            if match is None:
                raise BadResponse(f"completion id {cid!r} is not chatcmpl-mockllm-<script>-<call>")
            origin = (int(match[1]), int(match[2]))
            if not (origin[0] < self.sessions and origin[1] < self.calls_per_session):
                raise BadResponse(f"completion id {cid!r}: no such recorded call")
            self.origin[cid] = origin
        script, call = origin
        state = self.bound.get(key)
        if state is None:
            other = self.owner.setdefault((key[0], script), key[1])
            if other != key[1]:
                raise BadResponse(f"{key[0]}/live-{key[1]} answered from recorded session {script}, "
                                  f"which answers live-{other}")
            self.bound[key] = [script, 1 << call]
            return
        if state[0] != script:
            raise BadResponse(f"{key[0]}/live-{key[1]} answered from recorded session {script}, "
                              f"bound to {state[0]}")
        if state[1] >> call & 1:
            raise BadResponse(f"{key[0]}/live-{key[1]}: call {call} answered twice")
        state[1] |= 1 << call

    def forget(self, runs: set[str]) -> None:
        """Drop the session accounting of ended runs (their ids are never reused)."""
        self.bound = {k: v for k, v in self.bound.items() if k[0] not in runs}
        self.owner = {k: v for k, v in self.owner.items() if k[0] not in runs}


# ---------------------------------------------------------------------------------------------
# HTTP/1.1


_HEAD, _CHUNKED, _LENGTH, _TO_CLOSE = range(4)
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(?:;[^\r\n]*)?")
_MAX_HEAD = 64 * 1024
Response = tuple[int, dict[bytes, bytes], bytes, float]  # status, headers (lower-case names), body, first-byte time
# Parsed heads by their exact bytes: a server's heads repeat (only Date changes, once a second), so the
# header lines are split once per distinct head. The headers dict is shared: callers only read it.
_heads: dict[bytes, tuple[int, dict[bytes, bytes], bool]] = {}


def parse_head(head: bytes) -> tuple[int, dict[bytes, bytes], bool]:
    """(status, headers with lower-case names, keep-alive) of a response head (without its blank line)."""
    lines = head.split(b"\r\n")
    status_line = lines[0]
    if not status_line.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")) or not status_line[9:12].isdigit():
        raise HTTPError(f"bad status line {status_line[:80]!r}")
    headers: dict[bytes, bytes] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise HTTPError(f"bad header line {line[:80]!r}")
        headers[name.lower()] = value.strip()
    connection = headers.get(b"connection", b"").lower()
    keep_alive = b"close" not in connection and (status_line[5:8] == b"1.1" or b"keep-alive" in connection)
    return int(status_line[9:12]), headers, keep_alive


class Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: `request(bytes)` returns a future of the parsed Response."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[Response] | None = None
        self.open = False
        self.sent = 0.0
        self._reset()

    def _reset(self) -> None:
        self.state = _HEAD
        self.pos = 0
        self.parts: list[bytes] = []
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.keep_alive = True
        self.length = 0
        self.first = 0.0

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  (uvloop's transports are not asyncio.Transport)
        self.open = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        if self.waiter is None or self.waiter.done():
            return
        if self.state == _TO_CLOSE:
            self._complete(bytes(self.buf[self.pos:]), len(self.buf))
        else:
            self._fail(HTTPError(f"connection lost{f' ({exc})' if exc else ''} with the response unfinished "
                                 f"(status {self.status or '-'}, {len(self.buf)} bytes buffered)"))

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:
            self.abort(HTTPError(f"{len(data)} bytes arrived with no request outstanding: {data[:80]!r}"))
            return
        self.buf += data
        try:
            self._parse()
        except HTTPError as exc:
            self.abort(exc)

    # -- requests -----------------------------------------------------------------------------

    def request(self, data: bytes) -> asyncio.Future[Response]:
        if not self.open or self.transport is None:
            raise HTTPError("connection closed")
        if self.waiter is not None:
            raise RuntimeError("one request at a time per connection")
        self._reset()
        self.waiter = waiter = self.loop.create_future()
        self.sent = time.perf_counter()
        self.transport.write(data)
        return waiter

    def abort(self, exc: Exception) -> None:
        self.open = False
        if self.transport is not None:
            self.transport.abort()
        self._fail(exc)

    def close(self) -> None:
        self.open = False
        if self.transport is not None:
            self.transport.close()

    def _fail(self, exc: Exception) -> None:
        waiter, self.waiter = self.waiter, None
        self.buf.clear()
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _complete(self, body: bytes, end: int) -> None:
        if end != len(self.buf):
            extra = bytes(self.buf[end:end + 80])
            raise HTTPError(f"{len(self.buf) - end} bytes past the end of the response: {extra!r}")
        self.buf.clear()
        waiter, self.waiter = self.waiter, None
        if not self.keep_alive:
            self.close()
        if waiter is not None and not waiter.done():
            waiter.set_result((self.status, self.headers, body, self.first or time.perf_counter()))

    def _parse(self) -> None:
        buf = self.buf
        if self.state == _HEAD:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _MAX_HEAD:
                    raise HTTPError(f"no end of the response head in {len(buf)} bytes")
                return
            head = bytes(buf[:end])
            parsed = _heads.get(head)
            if parsed is None:
                parsed = parse_head(head)
                if len(_heads) >= 256:
                    _heads.clear()
                _heads[head] = parsed
            self.status, self.headers, self.keep_alive = parsed
            if self.status < 200:
                raise HTTPError(f"interim response {self.status}: not expected (no Expect is sent)")
            self.pos = end + 4
            coding = self.headers.get(b"transfer-encoding")
            length = self.headers.get(b"content-length")
            if coding is not None:
                if coding.lower() != b"chunked":
                    raise HTTPError(f"unsupported transfer-encoding {coding!r}")
                self.state = _CHUNKED
            elif length is not None:
                if not length.isdigit():
                    raise HTTPError(f"bad content-length {length!r}")
                self.state, self.length = _LENGTH, int(length)
            elif self.status in (204, 304):
                self.state, self.length = _LENGTH, 0
            else:
                self.state = _TO_CLOSE
                self.keep_alive = False
        if not self.first and len(buf) > self.pos:
            self.first = time.perf_counter()
        if self.state == _CHUNKED:
            self._chunks(buf)
        elif self.state == _LENGTH:
            stop = self.pos + self.length
            if len(buf) >= stop:
                self._complete(bytes(buf[self.pos:stop]), stop)

    def _chunks(self, buf: bytearray) -> None:
        pos = self.pos
        while True:
            nl = buf.find(b"\r\n", pos)
            if nl < 0:
                if len(buf) - pos > 4096:
                    raise HTTPError(f"chunk-size line over 4 KiB: {bytes(buf[pos:pos + 80])!r}")
                break
            match = _CHUNK_SIZE.fullmatch(buf, pos, nl)
            if match is None:
                raise HTTPError(f"bad chunk-size line {bytes(buf[pos:nl][:80])!r}")
            size = int(match[1], 16)
            if size == 0:
                end = buf.find(b"\r\n\r\n", nl)  # right after the size line, or after trailer fields
                if end < 0:
                    break
                self.pos = pos
                self._complete(b"".join(self.parts), end + 4)
                return
            start, stop = nl + 2, nl + 2 + size
            if len(buf) < stop + 2:
                break
            if buf[stop:stop + 2] != b"\r\n":
                raise HTTPError(f"chunk of {size} bytes not followed by CRLF: {bytes(buf[stop:stop + 20])!r}")
            self.parts.append(bytes(buf[start:stop]))
            pos = stop + 2
        self.pos = pos


class Http:
    """Connections to one server; `timeout` bounds every request (a watchdog aborts late ones)."""

    def __init__(self, base_url: str, timeout: float) -> None:
        url = urlsplit(base_url)
        if url.scheme != "http" or not url.hostname or not url.port:
            raise ValueError(f"not an http://HOST:PORT URL: {base_url!r}")
        self.host, self.port, self.authority = url.hostname, url.port, url.netloc
        self.timeout = timeout
        self.conns: set[Connection] = set()
        self.admin: Connection | None = None
        self._watchdog: asyncio.Task[None] | None = None

    def build(self, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> Any:
        """One timed request, prepared ahead of the timing for what `connect` returns."""
        return self.build_raw(method, path, headers, body)

    def build_raw(self, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
        """The bytes of one request, sent as they are."""
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.authority}",
                 *(f"{k}: {v}" for k, v in headers.items()), f"Content-Length: {len(body)}", "", ""]
        return "\r\n".join(lines).encode("latin-1") + body

    async def connect(self) -> Any:
        """A new connection for timed requests (see AiohttpHttp for the other client)."""
        return await self.connect_raw()

    async def connect_raw(self) -> Connection:
        loop = asyncio.get_running_loop()
        if self._watchdog is None:
            self._watchdog = loop.create_task(self._watch())
        _, conn = await loop.create_connection(lambda: Connection(loop), self.host, self.port)
        self.conns.add(conn)
        return conn

    async def connect_many(self, count: int, batch: int = 100) -> list[Any]:
        """`count` connections, opened `batch` at a time (a burst of SYNs past the listen backlog stalls)."""
        out: list[Any] = []
        while len(out) < count:
            out += await asyncio.gather(*(self.connect() for _ in range(min(batch, count - len(out)))))
        return out

    async def aclose(self, conns: list[Any] | None = None) -> None:
        """Close `conns`, or every connection and the watchdog."""
        self.close(conns)

    def close(self, conns: list[Connection] | None = None) -> None:
        for conn in list(self.conns) if conns is None else conns:
            conn.close()
            self.conns.discard(conn)
        if conns is None and self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            now = time.perf_counter()
            for conn in list(self.conns):
                if not conn.open:
                    self.conns.discard(conn)
                elif conn.waiter is not None and now - conn.sent > self.timeout:
                    conn.abort(HTTPError(f"no complete response within {self.timeout:g} s"))

    async def call_json(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One admin request (on its own connection) answered with JSON: (status, decoded body)."""
        if self.admin is None or not self.admin.open:
            self.admin = await self.connect_raw()
        data = b"" if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if body is not None else {}
        status, _, payload, _ = await self.admin.request(self.build_raw(method, path, headers, data))
        try:
            return status, msgspec.json.decode(payload)
        except msgspec.DecodeError:
            raise HTTPError(f"{method} {path} answered {status} with non-JSON {payload[:200]!r}") from None


class AiohttpConnection:
    """One keep-alive connection through aiohttp's client: a session whose pool holds one connection.

    `request` sends one prepared request and returns what Connection.request does; the time to
    first byte is taken when the first body chunk is read (aiohttp has parsed the head by then).
    """

    def __init__(self, base_url: str, timeout: float) -> None:
        import aiohttp

        self._errors = (aiohttp.ClientError, asyncio.TimeoutError)
        self.session = aiohttp.ClientSession(
            base_url, connector=aiohttp.TCPConnector(limit=1), timeout=aiohttp.ClientTimeout(total=timeout),
            auto_decompress=False)
        self.open = True

    async def request(self, prepared: tuple[str, str, dict[str, str], bytes]) -> Response:
        method, path, headers, body = prepared
        try:
            async with self.session.request(method, path, data=body, headers=headers) as response:
                head = await response.content.readany()
                first = time.perf_counter()
                rest = await response.content.read()
                content_type = response.headers.get("Content-Type", "").encode()
                return response.status, {b"content-type": content_type}, head + rest, first
        except self._errors as exc:
            raise HTTPError(f"{type(exc).__name__}: {exc}") from None

    async def close(self) -> None:
        self.open = False
        await self.session.close()


class AiohttpHttp(Http):
    """Http whose timed requests go through aiohttp's client (`"client": "aiohttp"`); admin calls stay raw."""

    def __init__(self, base_url: str, timeout: float) -> None:
        super().__init__(base_url, timeout)
        self.base_url = base_url
        self.sessions: set[AiohttpConnection] = set()

    def build(self, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> Any:
        return (method, path, headers, body)

    async def connect(self) -> AiohttpConnection:
        conn = AiohttpConnection(self.base_url, self.timeout)
        self.sessions.add(conn)
        return conn

    async def aclose(self, conns: list[Any] | None = None) -> None:
        for conn in list(self.sessions) if conns is None else conns:
            await conn.close()
            self.sessions.discard(conn)
        if conns is None:
            self.close()


CLIENTS = {"raw": (Http, CLIENT), "aiohttp": (AiohttpHttp, "aiohttp's client (one session per connection)")}


# ---------------------------------------------------------------------------------------------
# Measurements


@contextlib.contextmanager
def mockllm_process(args: list[str]) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Run `python -m mockllm.cli.main ARGS` (this checkout's); yields it and the first base URL it
    prints on a line of its own (`  http://127.0.0.1:PORT/...`), and stops it on exit.
    `root_url(url)` is the server's own address."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen([sys.executable, "-m", "mockllm.cli", *args], cwd=root, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.strip().startswith("http"):
                yield process, line.strip()
                return
        raise RuntimeError(f"mockllm {args[0]} did not start: {process.stderr.read() if process.stderr else ''}")
    finally:
        process.terminate()
        process.wait(timeout=10)


def root_url(url: str) -> str:
    """`http://host:port` of any URL on that server."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def proc_cpu_seconds(pid: int) -> float:
    """Process `pid`'s CPU time so far, every thread's, to the nanosecond where Linux keeps it
    (/proc/PID/task/*/schedstat); else utime+stime from /proc/PID/stat, to the clock tick.

    A quick phase costs the server tens of milliseconds: in ticks (10 ms) that reads as 0, 1 or 2,
    and a ratio over it is noise or a division by zero. A thread that exits within a phase takes
    its time out of the sum; the servers measured keep their threads."""
    try:
        return sum(int(Path(task, "schedstat").read_text().split()[0])
                   for task in Path(f"/proc/{pid}/task").iterdir()) / 1e9
    except (OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_rss_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of process `pid` in KiB."""
    rss = hwm = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return rss, hwm


def self_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[k]


Request = tuple[Any, tuple[str, int] | None]  # the prepared request; (run, live session) for the accounting


class Client:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.pid = int(config["pid"])
        self.mockllm = config["target"] == "mockllm"
        self.sessions = int(config["sessions"])
        self.calls_per_session = int(config["calls_per_session"])
        self.per_run = self.sessions * self.calls_per_session
        self.body = json.dumps(config["body"]).encode()
        http, self.client_name = CLIENTS[config.get("client", "raw")]
        self.http = http(config["base_url"], float(config.get("request_timeout", 60)))
        self.verify = Verifier(int(config["deltas"]), config["text"], self.sessions, self.calls_per_session)
        self.errors: list[str] = []
        self.bad = 0
        self.run_failures = 0
        self.unconsumed = 0
        self.latencies: list[float] = []

    # -- runs ---------------------------------------------------------------------------------

    async def create_runs(self, count: int) -> list[str]:
        if not self.mockllm:
            return [f"baseline-{i}" for i in range(count)]
        made = []
        for _ in range(count):
            status, data = await self.http.call_json("POST", "/_mockllm/runs", {"scenario": self.config["scenario"]})
            if status != 201:
                raise RuntimeError(f"POST /_mockllm/runs answered {status}: {data}")
            made.append(data["run"])
        return made

    async def end_runs(self, runs: list[str], requests_per_run: dict[str, int]) -> None:
        if not self.mockllm:
            return
        for run in runs:
            status, report = await self.http.call_json("DELETE", f"/_mockllm/runs/{run}")
            if status != 200:
                self.run_failures += 1
                self.note(f"DELETE run {run} answered {status}: {report}")
                continue
            if report.get("failures"):
                self.run_failures += len(report["failures"])
                self.note(f"run {run}: {report['failures'][0]}")
            if requests_per_run.get(run, 0) == self.per_run and not report.get("consumed"):
                self.unconsumed += 1
        self.verify.forget(set(runs))

    def plan(self, runs: list[str], count: int, *, spread: bool) -> list[Request]:
        """The requests of `count` slots over `runs`: run-major slots, or spread round-robin."""
        if count > len(runs) * self.per_run:
            raise ValueError(f"{count} requests need more than {len(runs)} runs")
        out: list[Request] = []
        for i in range(count):
            r, j = (i % len(runs), i // len(runs)) if spread else (i // self.per_run, i % self.per_run)
            run, live = runs[r], j // self.calls_per_session
            data = self.http.build("POST", f"/runs/{run}/v1/chat/completions",
                                   {"Content-Type": "application/json", "x-mockllm-session": f"{run}/live-{live}"},
                                   self.body)
            out.append((data, (run, live) if self.mockllm else None))
        return out

    def note(self, message: str) -> None:
        if len(self.errors) < 5:
            self.errors.append(message)

    # -- requests -----------------------------------------------------------------------------

    async def one(self, conn: Any, request: Request) -> float | None:
        """One streamed request, verified; returns its time to first body byte, None when it failed."""
        t0 = time.perf_counter()
        try:
            status, headers, body, first = await conn.request(request[0])
            self.verify(status, headers, body, request[1])
            return first - t0
        except (BadResponse, HTTPError, OSError) as exc:
            self.bad += 1
            self.note(f"{type(exc).__name__}: {exc}")
            return None

    async def drive(self, conns: list[Any], plan: list[Request], deadline: float | None = None) -> int:
        """Send `plan` over `conns` (a worker per connection, one request at a time); returns requests done."""
        it = iter(plan)
        done = 0
        self.latencies = latencies = []
        perf = time.perf_counter
        verify = self.verify

        async def worker(conn: Any) -> None:
            nonlocal done
            for data, key in it:
                t0 = perf()
                try:
                    if not conn.open:
                        conn = await self.http.connect()
                    status, headers, body, _ = await conn.request(data)
                    verify(status, headers, body, key)
                except (BadResponse, HTTPError, OSError) as exc:
                    self.bad += 1
                    self.note(f"{type(exc).__name__}: {exc}")
                latencies.append(perf() - t0)
                done += 1
                if deadline is not None and perf() > deadline:
                    return

        await asyncio.gather(*(worker(conn) for conn in conns))
        return done

    # -- phases -------------------------------------------------------------------------------

    async def ttfb(self, requests: int) -> dict[str, Any]:
        return (await ttfb_paired([self], requests))[0]

    async def burst(self, requests: int, concurrency: int) -> dict[str, Any]:
        warm_runs = await self.create_runs(1)
        runs = await self.create_runs(-(-requests // self.per_run))
        conns = await self.http.connect_many(concurrency)
        warm = self.plan(warm_runs, min(self.per_run, 2 * concurrency), spread=False)
        await self.drive(conns, warm)  # untimed: first requests on the connections
        plan = self.plan(runs, requests, spread=False)
        bad_before = self.bad
        cpu0, mine0, t0 = proc_cpu_seconds(self.pid), self_cpu_seconds(), time.perf_counter()
        done = await self.drive(conns, plan)
        wall = time.perf_counter() - t0
        cpu = proc_cpu_seconds(self.pid) - cpu0
        mine = self_cpu_seconds() - mine0
        await self.http.aclose(conns)
        counts = {r: self.per_run for r in runs}
        if requests % self.per_run:
            counts[runs[-1]] = requests % self.per_run
        await self.end_runs(warm_runs + runs, counts)
        return {"requests": done, "concurrency": concurrency, "seconds": wall, "rps": done / wall,
                "bad": self.bad - bad_before, "server_cpu_s": cpu, "server_cpu_us_per_req": cpu / done * 1e6,
                "server_cpu_util": cpu / wall, "client_cpu_util": mine / wall,
                "client_cpu_us_per_req": mine / done * 1e6}

    async def scale_level(self, level: int, runs_per_level: int, seconds: float, max_requests: int) -> dict[str, Any]:
        """`level` connections on `runs_per_level` fresh runs for `seconds` or `max_requests` requests."""
        runs = await self.create_runs(runs_per_level)
        plan = self.plan(runs, runs_per_level * self.per_run, spread=True)
        warm, timed = plan[:level], plan[level:level + max_requests]
        bad_before = self.bad
        conns = await self.http.connect_many(level)
        await self.drive(conns, warm)  # one request per connection, untimed
        cpu0, mine0, t0 = proc_cpu_seconds(self.pid), self_cpu_seconds(), time.perf_counter()
        done = await self.drive(conns, timed, deadline=t0 + seconds)
        wall = time.perf_counter() - t0
        cpu = proc_cpu_seconds(self.pid) - cpu0
        mine = self_cpu_seconds() - mine0
        rss, hwm = proc_rss_kb(self.pid)
        latencies = sorted(self.latencies)
        await self.http.aclose(conns)
        await self.end_runs(runs, {})
        rss_after_end, _ = proc_rss_kb(self.pid)
        return {"concurrency": level, "requests": done, "seconds": wall, "rps": done / wall,
                "bad": self.bad - bad_before, "server_cpu_us_per_req": cpu / max(1, done) * 1e6,
                "server_cpu_util": cpu / wall, "client_cpu_util": mine / wall,
                "client_cpu_us_per_req": mine / max(1, done) * 1e6,
                "p50_ms": percentile(latencies, 0.5) * 1e3, "p99_ms": percentile(latencies, 0.99) * 1e3,
                "max_ms": latencies[-1] * 1e3 if latencies else float("nan"),
                "rss_kb": rss, "hwm_kb": hwm, "rss_after_end_kb": rss_after_end}

    async def run(self) -> dict[str, Any]:
        phase = self.config["phase"]
        kind = phase["kind"]
        try:
            if kind == "ttfb":
                result = await self.ttfb(int(phase["requests"]))
            elif kind == "burst":
                result = await self.burst(int(phase["requests"]), int(phase["concurrency"]))
            elif kind == "scale":
                result = (await scale_paired([self], phase))[0]
            else:
                raise ValueError(f"unknown phase {kind!r}")
        finally:
            await self.http.aclose()
        return self.report(result)

    def report(self, result: dict[str, Any]) -> dict[str, Any]:
        rss, hwm = proc_rss_kb(self.pid)
        return {**result, "target": self.config["target"], "phase": self.config["phase"]["kind"],
                "client": self.client_name, "bad": self.bad, "errors": self.errors, "run_failures": self.run_failures,
                "unconsumed_runs": self.unconsumed, "server_rss_kb": rss, "server_hwm_kb": hwm}


async def ttfb_paired(clients: list[Client], requests: int, warm: int = 20) -> list[dict[str, Any]]:
    """Time to first byte of `requests` sequential requests to each client's server (after `warm`).

    With several servers the requests alternate between them one by one (the order flipping on
    every round), each server on its own connection: the host's speed drifts over seconds on a
    small shared machine, and alternating makes that drift hit every server alike.
    """
    setups = []
    for client in clients:
        runs = await client.create_runs(-(-(requests + warm) // client.per_run))
        setups.append((client, runs, client.plan(runs, requests + warm, spread=False), await client.http.connect(),
                       []))
    for i in range(requests + warm):
        for client, _, plan, conn, times in setups if i % 2 == 0 else setups[::-1]:
            t = await client.one(conn, plan[i])
            if i >= warm and t is not None:
                times.append(t)
    out = []
    for client, runs, _, _, times in setups:
        times.sort()
        await client.end_runs(runs, {r: client.per_run for r in runs[:-1]})
        out.append({"requests": requests, "ok": len(times), "p50_ms": percentile(times, 0.5) * 1e3,
                    "p99_ms": percentile(times, 0.99) * 1e3, "mean_ms": sum(times) / max(1, len(times)) * 1e3,
                    "paired_with": [c.config["target"] for c in clients if c is not client]})
    return out


async def scale_paired(clients: list[Client], phase: dict[str, Any]) -> list[dict[str, Any]]:
    """The scale phase against each client's server: {"levels": [...], "rss_start_kb"} per client.

    A pass runs every level once, odd passes in reverse order, and each level on every server in
    turn (the order of the servers flipping from level to level): a drift in the host's speed then
    favours no level and no server, and what runs within one pass (seconds apart) can be compared
    pairwise. Every measurement carries its pass number.
    """
    levels = [int(c) for c in phase["levels"]]
    runs, seconds, most = int(phase["runs"]), float(phase["seconds"]), int(phase["max_requests"])
    out: list[dict[str, Any]] = [{"levels": [], "rss_start_kb": proc_rss_kb(c.pid)[0]} for c in clients]
    turn = 0
    for pass_no in range(int(phase.get("passes", 1))):
        for level in levels if pass_no % 2 == 0 else levels[::-1]:
            order = list(enumerate(clients))
            for i, client in order if turn % 2 == 0 else order[::-1]:
                measured = await client.scale_level(level, runs, seconds, most)
                out[i]["levels"].append({"pass": pass_no, **measured})
            turn += 1
    return out


async def run_paired(config: dict[str, Any]) -> dict[str, Any]:
    """The ttfb or scale phase against every server in `config["targets"]` at once: {target: result}."""
    clients = [Client({**config, **target}) for target in config["targets"]]
    phase = config["phase"]
    try:
        if phase["kind"] == "ttfb":
            results = await ttfb_paired(clients, int(phase["requests"]))
        else:
            results = await scale_paired(clients, phase)
    finally:
        for client in clients:
            await client.http.aclose()
    return {client.config["target"]: client.report(result) for client, result in zip(clients, results, strict=True)}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: bench_client.py CONFIG.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        config = json.load(f)
    paired = "targets" in config
    if paired and config["phase"]["kind"] not in ("ttfb", "scale"):
        raise SystemExit("bench_client.py: several targets at once only for the ttfb and scale phases")
    coro = run_paired(config) if paired else Client(config).run()
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a test dependency
        result = asyncio.run(coro)
    else:
        result = uvloop.run(coro)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
