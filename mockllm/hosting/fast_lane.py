"""The fast lane: a model call that arrives whole is answered by the connection itself, without
aiohttp's request machinery; anything else goes to aiohttp as before.

Why: a test suite makes its model calls one at a time, each on a new connection (the `openai` and
`anthropic` SDKs close a streamed response at its last event), with the test's own work between
them, so every call meets a cold server. Measured that way (sequential SDK calls, 3 ms of client
work between them), a bare aiohttp handler writing a pre-encoded answer costs the server 680 us of
CPU per call, where an asyncio protocol writing the same bytes costs 280: aiohttp's per-request
objects, task hops and response machinery, run from a cold cache. The fast lane keeps the rest of
aiohttp (its listening, its connection tracking and shutdown, the idle guard) and skips that.

How: `FastHandler` is the server's connection (a `GuardedHandler`). It reads the requests that
arrive as HTTP/1.1: a model call the lane can take (a POST with a `Content-Length` body, kept
alive) goes, once whole, to the server's `Lane`, which answers it (`respond`: the whole response
in one write, its head as aiohttp writes it) or declines it. Any other request it can delimit
(no transfer or content coding, no `Expect`, no `Upgrade`), and one the lane declined, is handed
to aiohttp whole, and the lane reads on once aiohttp has answered it: a client that creates runs
and calls models on the same kept-alive connections keeps the lane. What it cannot delimit (a
head in pieces, a chunked body, a late one, a request pipelined behind one aiohttp is answering)
leaves the connection to aiohttp from that request on, as it always served.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from email.utils import formatdate
from typing import Any, Protocol

from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE
from aiohttp.web_request import BaseRequest
from multidict import CIMultiDict, CIMultiDictProxy

from mockllm.hosting.guard import GuardedHandler

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

    def route(self, target: str) -> Any:
        """What a POST to `target` (its request target, as sent) is to the lane, or None: not the
        lane's. Asked once its head is in, before its body is awaited."""

    def answer(self, route: Any, headers: CIMultiDictProxy[str], raw_headers: RawHeaders, body: bytes,
               handler: FastHandler) -> bool:
        """Answer the whole request through `handler.respond` (True), or decline it (False) for
        aiohttp to serve: nothing may have changed, save a decision it leaves on `handler.decided`."""

    def forget(self, decided: Any) -> None:
        """A decision aiohttp's handler never took: its client left before the handler ran."""


LANE: web.AppKey[Lane] = web.AppKey("mockllm_fast_lane", Lane)  # set by an app that has one


class FastHandler(GuardedHandler):
    """A connection whose whole model calls go to `lane` first (see the module's docstring)."""

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
        end = buffer.find(b"\r\n\r\n", 0, HEAD_LIMIT)
        if end < 0:
            return None  # a head in pieces (or too long)
        head = _parse_head(bytes(buffer[:end]))
        if head is None:
            return None
        method, target, raw, length, keep_alive = head
        start = end + 4
        whole = len(buffer) - start >= length
        route = self._lane.route(target) if method == b"POST" and keep_alive else None
        if route is None:
            return self._hand(start + length) if whole else None
        if not whole:
            return 0 if length <= BODY_LIMIT else None
        headers = CIMultiDictProxy(CIMultiDict(
            (name.decode("latin-1"), value.decode("utf-8", "surrogateescape")) for name, value in raw))
        try:
            answered = self._lane.answer(route, headers, raw, bytes(buffer[start:start + length]), self)
        except Exception:  # the lane answers its own errors; this is a bug in it: this connection ends
            log.exception("internal error in the fast lane on POST %s", target)
            if self.transport is not None:
                self.transport.close()
            return len(buffer)
        return start + length if answered else self._hand(start + length)

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
        """Write `response` (a bytes body) whole, as aiohttp would; False when the client has gone
        (nothing written). The connection stays open for the client's next request."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return False
        body = response.body
        assert isinstance(body, bytes), "the fast lane writes bytes bodies only"
        head = [f"HTTP/1.1 {response.status} {response.reason}"]
        head += [f"{name}: {value}" for name, value in response.headers.items()]
        head += [f"Content-Length: {len(body)}", f"Date: {_date()}", f"Server: {SERVER_SOFTWARE}", "\r\n"]
        transport.write("\r\n".join(head).encode("latin-1") + body)
        # Not idle: the guard's idle clock and aiohttp's keep-alive timer count from this answer.
        self._idle_since = None
        self._next_keepalive_close_time = self._loop.time() + self._keepalive_timeout
        return True


def _parse_head(head: bytes) -> tuple[bytes, str, RawHeaders, int, bool] | None:
    """A request's method, target, headers and body length from its head (without the blank
    line), and whether the lane may answer it as to its connection (no `Connection` but
    `keep-alive`); None for a request the lane cannot delimit or must leave to aiohttp from here on
    (another version, a transfer or content coding, `Expect`, `Upgrade`, a head that is not
    plainly well formed)."""
    lines = head.split(b"\r\n")
    if any(len(line) > MAX_LINE or _CONTROL.search(line) for line in lines):
        return None
    method, _, rest = lines[0].partition(b" ")
    target, _, version = rest.partition(b" ")
    if version != b"HTTP/1.1" or not target.startswith(b"/") or not method.isalpha():
        return None
    length: int | None = None
    keep_alive = True
    raw: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
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
    return method, target.decode("utf-8", "surrogateescape"), tuple(raw), length or 0, keep_alive and length is not None


_dated = (0, "")  # the second the Date header was last formatted in, and its value


def _date() -> str:
    global _dated
    now = int(time.time())
    if _dated[0] != now:
        _dated = (now, formatdate(now, usegmt=True))
    return _dated[1]


def handler_class(app: web.Application) -> tuple[type[GuardedHandler], dict[str, Any]]:
    """The connection class for `app`'s server, and what it takes besides aiohttp's arguments."""
    lane = app.get(LANE)
    if lane is None:
        return GuardedHandler, {}
    return FastHandler, {"lane": lane}

