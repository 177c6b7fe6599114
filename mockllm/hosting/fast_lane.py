"""The fast lane: a model call that arrives whole is answered by the connection itself, without
aiohttp's connection or request machinery; anything else goes to aiohttp as before.

Why: a test suite makes its model calls one at a time, each on a new connection (the `openai` and
`anthropic` SDKs close a streamed response at its last event), with the test's own work between
them, so every call meets a cold server. Measured that way (sequential SDK calls, 3 ms of client
work between them), a bare aiohttp handler writing a pre-encoded answer costs the server 680 us of
CPU per call, where an asyncio protocol writing the same bytes costs 280: aiohttp's per-request
objects, task hops and response machinery, run from a cold cache. With those skipped, aiohttp's
per-connection machinery was still 240 us of a call's 570 (raw sockets, time to first byte). The
fast lane keeps the rest of aiohttp (its listening, its shutdown, every request it does not take)
and skips both.

How: each connection starts as a `LaneConnection`, a bare asyncio protocol with none of aiohttp's
per-connection machinery (its handler object and parser, a task, two timers): a suite's connection
that carries one model call and closes costs the server that call's work and little more. It reads
the requests that arrive as HTTP/1.1: a model call the lane can take (a POST with a `Content-Length`
body, kept alive) goes, once whole, to the server's `Lane`, which answers it (`respond`: the whole
response in one write, its head as aiohttp writes it) or declines it. The first request it does not
answer makes the connection aiohttp's: a `FastHandler` (aiohttp's connection, a `GuardedHandler`)
takes the transport over with what was read, and reads on the same way. Any request it can delimit
(no transfer or content coding, no `Expect`, no `Upgrade`) that is not the lane's, and one the lane
declined, is handed to aiohttp whole, and the lane reads on once aiohttp has answered it: a client
that creates runs and calls models on the same kept-alive connections keeps the lane. What it
cannot delimit (a head in pieces, a chunked body, a late one, a request pipelined behind one
aiohttp is answering) leaves the connection to aiohttp from that request on, as it always served.
`LaneConnections` keeps the guard's promises for the connections aiohttp never sees: closed once
idle, closed to make room, closed when the server stops.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping
from email.utils import formatdate
from typing import Any, NamedTuple, Protocol, cast

from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE
from aiohttp.web_request import BaseRequest

from mockllm.hosting import guard
from mockllm.hosting.guard import Connections, GuardedHandler, Idle, close_idle_longest

log = logging.getLogger("mockllm")

RawHeaders = tuple[tuple[bytes, bytes], ...]
# Headers that leave a request and all after it on its connection to aiohttp: a body it must decode
# or delimit, a connection it must manage.
_AIOHTTP_HEADERS = frozenset((b"transfer-encoding", b"content-encoding", b"expect", b"upgrade"))
HEAD_LIMIT = 64 * 1024  # a longer head is aiohttp's to judge
# What aiohttp refuses (400) is aiohttp's to refuse: a line past its limit, a control character (but
# tab; CR and LF only as line ends), a header name that is not an HTTP token.
MAX_LINE = 8190
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# A body the lane waits for: SDKs write a request's head and body separately, so the body may come
# in a read of its own. A larger body (many reads) is aiohttp's to gather, and one not in within
# BODY_WAIT seconds too (its body timeout answers a client that stalls).
BODY_LIMIT = 1024 * 1024
BODY_WAIT = 0.1  # well under the idle timeout: meanwhile the connection looks idle to the guard


class Lane(Protocol):
    """The server's side of the lane."""

    def route(self, method: str, target: str) -> Any:
        """What a request for `target` (as sent) with `method` is to the lane, or None: not the
        lane's. Asked once its head is in, before its body is awaited."""

    def answer(self, route: Any, headers: Mapping[str, str], raw_headers: RawHeaders, body: bytes,
               handler: Responder) -> bool:
        """Answer the whole request through `handler.respond` (True), or decline it (False) for
        aiohttp to serve: nothing may have changed, save a decision it leaves on `handler.decided`."""

    def forget(self, decided: Any) -> None:
        """A decision aiohttp's handler never took: its client left before the handler ran."""


class Responder(Protocol):
    """The connection a request came on, to the lane: a `LaneConnection` or a `FastHandler`."""

    # What the lane decided for a request it declined, for aiohttp's handler to write (an answer
    # that takes time: a hold, a pace, a fault's delay).
    decided: object | None

    def respond(self, response: web.Response) -> bool:
        """Write `response` whole; False when the client has gone (nothing written)."""


LANE: web.AppKey[Lane] = web.AppKey("mockllm_fast_lane", Lane)  # set by an app that has one


class _Whole(NamedTuple):
    """A whole request at the start of a connection's buffer."""

    length: int  # the bytes it takes there, head and body
    route: Any  # what it is to the lane; None: not the lane's
    method: str
    target: str
    raw: RawHeaders
    names: tuple[bytes, ...]  # raw's names lowercased, as `_parse_head` compared them
    body: bytes


class _Head(NamedTuple):
    """A request of the lane's whose head is in and whose body is on its way: kept while the lane
    waits for the body, so that the head is read once (SDKs write a request's head and body
    separately: most calls reach the server in two reads)."""

    start: int  # where its body starts in the buffer
    length: int  # head and body
    route: Any
    method: str
    target: str
    raw: RawHeaders
    names: tuple[bytes, ...]

    def whole(self, buffer: bytearray) -> _Whole | None:
        """The request, once `buffer` holds all of it."""
        if len(buffer) < self.length:
            return None
        body = bytes(buffer[self.start:self.length])
        return _Whole(self.length, self.route, self.method, self.target, self.raw, self.names, body)


def _next_request(buffer: bytearray, lane: Lane) -> _Whole | _Head | None:
    """The request at the start of `buffer`: whole, its head when the lane waits for its body, or
    None: aiohttp reads the connection from this request on (one the lane cannot delimit, a head
    in pieces, a body too large to wait for)."""
    end = buffer.find(b"\r\n\r\n", 0, HEAD_LIMIT)
    if end < 0:
        return None  # a head in pieces (or too long)
    head = _parse_head(bytes(buffer[:end]))
    if head is None:
        return None
    method, target, raw, names, length, keep_alive = head
    start = end + 4
    whole = len(buffer) - start >= length
    verb = method.decode("ascii")  # letters only (`_parse_head`)
    route = lane.route(verb, target) if keep_alive else None
    if whole:
        return _Whole(start + length, route, verb, target, raw, names, bytes(buffer[start:start + length]))
    if route is None or length > BODY_LIMIT:
        return None  # a body the lane does not wait for: aiohttp gathers it
    return _Head(start, start + length, route, verb, target, raw, names)


class HeaderView(Mapping[str, str]):
    """A request's headers as the lane reads them: by name, case-insensitively, the first of a
    name (as aiohttp's `CIMultiDict` has it), its value decoded as aiohttp decodes it, and only
    when asked. The lane asks for two or three (a session's, `Host`); building aiohttp's dict of a
    request's twenty cost more than all the lane's look-ups. `names`: `raw`'s names lowercased, as
    `_parse_head` made them while it checked the head."""

    __slots__ = ("_names", "_raw")

    def __init__(self, raw: RawHeaders, names: tuple[bytes, ...]) -> None:
        self._raw = raw
        self._names = names

    def get(self, name: str, default: Any = None) -> Any:
        try:
            at = self._names.index(name.lower().encode("latin-1"))  # the first of that name
        except (UnicodeEncodeError, ValueError):  # no header's name holds it, or none has it
            return default
        return self._raw[at][1].decode("utf-8", "surrogateescape")

    def __getitem__(self, name: str) -> str:
        value: str | None = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def __iter__(self) -> Iterator[str]:
        return (name.decode("latin-1") for name, _ in self._raw)

    def __len__(self) -> int:
        return len(self._raw)


def _answer(lane: Lane, request: _Whole, connection: Responder, transport: asyncio.Transport | None) -> bool | None:
    """Whether the lane answered `request` (its route set); None: a bug in the lane ended the
    connection, and nothing more is read from it."""
    try:
        return lane.answer(request.route, HeaderView(request.raw, request.names), request.raw, request.body,
                           connection)
    except Exception:  # the lane answers its own errors; this is a bug in it: this connection ends
        log.exception("internal error in the fast lane on %s %s", request.method, request.target)
        if transport is not None:
            transport.close()
        return None


def write_response(transport: asyncio.Transport | None, response: web.Response) -> bool:
    """Write `response` (a bytes body) whole, as aiohttp would; False when the client has gone
    (nothing written)."""
    if transport is None or transport.is_closing():
        return False
    body = response.body
    assert isinstance(body, bytes), "the fast lane writes bytes bodies only"
    head = [f"HTTP/1.1 {response.status} {response.reason}"]
    head += [f"{name}: {value}" for name, value in response.headers.items()]
    head += [f"Content-Length: {len(body)}", f"Date: {_date()}", f"Server: {SERVER_SOFTWARE}", "\r\n"]
    transport.write("\r\n".join(head).encode("latin-1") + body)
    return True


class FastHandler(GuardedHandler):
    """An aiohttp connection whose whole model calls go to `lane` first (see the module's
    docstring): what a `LaneConnection` becomes at the first request the lane does not answer."""

    def __init__(self, manager: Any, *, lane: Lane, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._lane = lane
        self._buffer = bytearray()  # a request not yet whole (only while the lane reads the connection)
        self._waiting: asyncio.TimerHandle | None = None  # until its body is in, or goes to aiohttp
        self._aiohttp = False  # set: aiohttp reads the connection from now on, every byte
        self._handed = 0  # whole requests handed to aiohttp one at a time...
        self._answered = 0  # ...and those it has answered: the lane waits its turn behind them
        # What the lane decided for the request it handed to aiohttp, for aiohttp's handler to write
        # (an answer that takes time: a hold, a pace, a fault's delay); taken by that handler.
        self.decided: object | None = None

    def take_over(self, buffer: bytes, handed: int = 0, decided: object | None = None, late: bool = False) -> None:
        """Carry on a `LaneConnection` that became this one (connected already): `buffer` is what it
        had read and not answered; its first `handed` bytes, when any, a request the lane declined,
        for aiohttp to answer (with `decided`, what the lane decided for it). `late`: the request
        at its start is one whose body the lane waited for long enough: aiohttp reads it all."""
        self._buffer += buffer
        if late:
            self._hand_over()
            return
        if handed:
            self.decided = decided
            del self._buffer[:self._hand(handed)]
        if self._buffer:
            self.data_received(b"")

    def data_received(self, data: bytes) -> None:
        if self._aiohttp or self._force_close or self._close:
            super().data_received(data)
            return
        if self._waiting is not None:
            self._waiting.cancel()
            self._waiting = None
        self._buffer += data
        while self._buffer:
            # Answers go out in the order asked: behind one aiohttp is still answering (a client
            # that pipelines), aiohttp answers the rest too.
            taken = self._take(self._buffer) if self._handed == self._answered else None
            if taken is None:
                self._hand_over()
                return
            if taken == 0:  # its body is on its way: wait for it, but not for long
                self._waiting = self._loop.call_later(BODY_WAIT, self._hand_over)
                return
            del self._buffer[:taken]

    def _hand_over(self) -> None:
        """From now on aiohttp reads this connection, starting with what is buffered."""
        self._waiting = None
        self._aiohttp = True
        buffer, self._buffer = bytes(self._buffer), bytearray()
        if buffer:
            super().data_received(buffer)

    def _take(self, buffer: bytearray) -> int | None:
        """Serve the request at the start of `buffer`: the bytes it took (the lane answered it, or
        aiohttp was handed it whole), 0 when the lane waits for its body, or None: aiohttp reads
        the connection from this request on (one the lane cannot delimit, or whose body is late)."""
        request = _next_request(buffer, self._lane)
        if request is None:
            return None
        if isinstance(request, _Head):
            return 0
        answered = _answer(self._lane, request, self, self.transport) if request.route is not None else False
        if answered is None:
            return len(buffer)  # the connection ended
        return request.length if answered else self._hand(request.length)

    def _hand(self, length: int) -> int:
        """Hand aiohttp the whole request at the start of the buffer, `length` bytes; the lane
        reads what follows once aiohttp has answered it."""
        self._handed += 1
        super().data_received(bytes(self._buffer[:length]))
        return length

    async def finish_response(self, request: BaseRequest, resp: web.StreamResponse,
                              start_time: float | None) -> tuple[web.StreamResponse, bool]:
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            self._answered += 1

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._waiting is not None:
            self._waiting.cancel()
        if self.decided is not None:
            decided, self.decided = self.decided, None
            try:
                self._lane.forget(decided)
            except Exception:  # a bug in the lane: logged, and the connection closes all the same
                log.exception("internal error in the fast lane forgetting a call")
        super().connection_lost(exc)

    def respond(self, response: web.Response) -> bool:
        """Write `response` whole, as aiohttp would (`write_response`); the connection stays open
        for the client's next request."""
        if not write_response(self.transport, response):
            return False
        # Not idle: the guard's idle clock and aiohttp's keep-alive timer count from this answer.
        self._idle_since = None
        self._next_keepalive_close_time = self._loop.time() + self._keepalive_timeout
        return True


class LaneConnection(asyncio.Protocol):
    """A connection the lane reads alone, until a request it does not answer makes it a
    `FastHandler` (see the module's docstring). Idle whenever it is not reading a request."""

    def __init__(self, lane: Lane, connections: LaneConnections) -> None:
        self._lane = lane
        self._connections = connections
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()  # a request not yet whole
        self._head: _Head | None = None  # its head, read, while its body is on its way...
        self._waiting: asyncio.TimerHandle | None = None  # ...until it is in, or the request goes to aiohttp
        self.active = 0.0  # when it last read or answered (the loop's clock): idle since then
        self.decided: object | None = None  # the lane's decision for the request aiohttp is handed

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.active = self._connections.loop.time()
        self._connections.made(self)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while self._buffer and self.transport is not None:
            head, self._head = self._head, None
            request = head.whole(self._buffer) if head is not None else _next_request(self._buffer, self._lane)
            if isinstance(request, _Head) or (request is None and head is not None):
                # its body is on its way: wait for it, but not for long (BODY_WAIT from its head)
                self._head = head or cast(_Head, request)
                if self._waiting is None:
                    self._waiting = self._connections.loop.call_later(BODY_WAIT, self._become_aiohttp, 0, True)
                return
            if self._waiting is not None:
                self._waiting.cancel()
                self._waiting = None
            if request is None or request.route is None:
                self._become_aiohttp()
                return
            self.decided = None
            answered = _answer(self._lane, request, self, self.transport)
            if answered is None:  # the connection ended
                self._buffer.clear()
                return
            if not answered:
                self._become_aiohttp(handed=request.length)
                return
            del self._buffer[:request.length]
        self.active = self._connections.loop.time()

    def _become_aiohttp(self, handed: int = 0, late: bool = False) -> None:
        """Make this connection aiohttp's (a `FastHandler`), with what was read: the first `handed`
        bytes a request the lane declined, the rest for it to read as it reads everything (`late`:
        all of it aiohttp's, a request whose body did not come in time at its start)."""
        if self._waiting is not None:
            self._waiting.cancel()
        self._waiting, self._head = None, None
        transport, self.transport = self.transport, None
        self._connections.lost(self)
        if transport is None or transport.is_closing():
            return
        handler = self._connections.aiohttp()
        transport.set_protocol(handler)
        handler.connection_made(transport)
        buffer, self._buffer = bytes(self._buffer), bytearray()
        decided, self.decided = self.decided, None
        handler.take_over(buffer, handed, decided, late)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._waiting is not None:
            self._waiting.cancel()
            self._waiting = None
        self.transport = None
        self._connections.lost(self)

    def respond(self, response: web.Response) -> bool:
        """Write `response` whole, as aiohttp would (`write_response`)."""
        return write_response(self.transport, response)

    def idle_since(self) -> float | None:
        return self.active if self.transport is not None else None

    def close_now(self) -> None:
        if self.transport is not None:
            self.transport.close()


class LaneConnections(Connections):
    """A site's connections when its app has a lane: each starts as a `LaneConnection`, and
    becomes a `FastHandler` (aiohttp's) when it must. Those not yet aiohttp's are kept here, to be
    closed as the guard closes aiohttp's (`guard`): once idle for `IDLE_TIMEOUT` (checked a few
    times per timeout by one timer for them all), the idle longest past `CONNECTIONS_KEPT`, and
    every one when the site stops."""

    # Set by factory(), once the site starts: the loop, a new aiohttp connection, and aiohttp's
    # web_server.Server, whose connections count against the bound too.
    loop: asyncio.AbstractEventLoop
    aiohttp: Callable[[], FastHandler]
    _server: Any

    def __init__(self, lane: Lane) -> None:
        super().__init__(FastHandler, {"lane": lane})
        self.lane = lane
        self.open: set[LaneConnection] = set()
        self._sweep: asyncio.TimerHandle | None = None

    def factory(self, server: Any) -> Callable[[], asyncio.BaseProtocol]:
        self._server = server
        self.loop = server._loop
        self.aiohttp = cast(Callable[[], FastHandler], self.aiohttp_factory(server))
        return lambda: LaneConnection(self.lane, self)

    def made(self, connection: LaneConnection) -> None:
        self.open.add(connection)
        aiohttps: dict[GuardedHandler, Any] = self._server._connections
        excess = len(self.open) + len(aiohttps) - guard.CONNECTIONS_KEPT
        if excess > 0:
            others: list[Idle] = [c for c in self.open if c is not connection]
            close_idle_longest([*others, *aiohttps], excess)
        if self._sweep is None:
            self._sweep = self.loop.call_later(guard.IDLE_TIMEOUT / 4, self._close_idle)

    def lost(self, connection: LaneConnection) -> None:
        self.open.discard(connection)

    def _close_idle(self) -> None:
        self._sweep = None
        limit = guard.IDLE_TIMEOUT
        now = self.loop.time()
        for connection in [c for c in self.open if now - c.active >= limit]:
            connection.close_now()
        if self.open:
            self._sweep = self.loop.call_later(limit / 4, self._close_idle)

    def close(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for connection in list(self.open):
            connection.close_now()
        self.open.clear()


def _parse_head(head: bytes) -> tuple[bytes, str, RawHeaders, tuple[bytes, ...], int, bool] | None:
    """A request's method, target, headers (and their names lowercased) and body length from its
    head (without the blank line; a request with no `Content-Length` has none), and whether the
    lane may answer it as to its connection (no `Connection` but `keep-alive`); None for a request
    the lane cannot delimit or must leave to aiohttp from here on (another version, a transfer or
    content coding, `Expect`, `Upgrade`, a head that is not plainly well formed). Every request's
    head passes here: the checks run once over the whole head (its lines joined), not once per
    line."""
    lines = head.split(b"\r\n")
    if len(head) > MAX_LINE and any(len(line) > MAX_LINE for line in lines):
        return None
    if _CONTROL.search(head.replace(b"\r\n", b"")):  # a CR or LF left is not a line's end
        return None
    method, _, rest = lines[0].partition(b" ")
    target, _, version = rest.partition(b" ")
    if version != b"HTTP/1.1" or not target.startswith(b"/") or not method.isalpha():
        return None
    length: int | None = None
    keep_alive = True
    raw: list[tuple[bytes, bytes]] = []
    names: list[bytes] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not (colon and name):
            return None  # folded, malformed or empty: aiohttp answers it (400 where it must)
        value = value.strip(b" \t")
        lower = name.lower()
        if lower in _AIOHTTP_HEADERS:
            return None
        if lower == b"content-length":
            if length is not None or not value.isdigit():
                return None
            length = int(value)
        elif lower == b"connection":
            keep_alive = value.lower() == b"keep-alive"
        raw.append((name, value))
        names.append(lower)
    if raw and not _TOKEN.fullmatch(b"".join([name for name, _ in raw])):
        return None  # a name that is not an HTTP token (the names joined are one only if each is)
    return method, target.decode("utf-8", "surrogateescape"), tuple(raw), tuple(names), length or 0, keep_alive


_dated = (0, "")  # the second the Date header was last formatted in, and its value


def _date() -> str:
    global _dated
    now = int(time.time())
    if _dated[0] != now:
        _dated = (now, formatdate(now, usegmt=True))
    return _dated[1]


def connections_for(app: web.Application) -> Connections:
    """How `app`'s site makes its connections: through the lane, for an app that has one."""
    lane = app.get(LANE)
    return Connections() if lane is None else LaneConnections(lane)
