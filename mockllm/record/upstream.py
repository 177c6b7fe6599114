"""Record mode's upstream client: keep-alive HTTP/1.1 connections on asyncio protocols.

It sits on every live call's path, so it does only what forwarding needs, and does it cheaply:
- A request on an idle kept-alive connection is one `transport.write`, made at once (`Upstream.start`
  awaits nothing). The server sends a recording run's call upstream this way before it decodes and
  routes it, so its own work overlaps the upstream's (`server.live`).
- No URL objects, cookie jar, timers or tracing per request (aiohttp's client spent ~0.1 ms per
  call on those, on a path that must add at most 0.5 ms to the first byte).

Each connection (`http1.Connection`) parses its answers as HTTP/1.1 has them. A connection goes
back to the pool only after a framed answer was read to its end; one found closed before any byte
of its answer (the upstream dropped an idle connection as the request went out) is retried once on
a new one.
TLS is the system's default context. Proxies from the environment are not used (as before, with
aiohttp's client and its default `trust_env=False`).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import Iterable
from urllib.parse import urlsplit

from mockllm.record.http1 import Answer, Connection, Origin, Stale, UpstreamCut, UpstreamError

# An idle connection older than this is not reused: upstreams close idle connections after a while,
# and one closed while a request is on its way costs a retry.
IDLE_SECONDS = 15.0
CONNECT_SECONDS = 30.0

__all__ = ["Answer", "Exchange", "Upstream", "UpstreamCut", "UpstreamError"]


class Upstream:
    """A pool of connections, by origin. `start` begins a request; `close` drops every connection."""

    def __init__(self, connect_seconds: float = CONNECT_SECONDS, ssl_context: ssl.SSLContext | None = None) -> None:
        """`ssl_context`: for https upstreams; the system's default one when None."""
        self.connect_seconds = connect_seconds
        self._idle: dict[Origin, deque[Connection]] = {}
        self._open: set[Connection] = set()
        self._ssl = ssl_context

    def start(self, method: str, url: str, headers: Iterable[tuple[bytes, bytes]], body: bytes) -> Exchange:
        """Begin `method url` with `headers` (the client's, hop-by-hop ones already left out) and `body`:
        written now on an idle connection to its origin, else when its answer is awaited."""
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:  # told when its answer is awaited
            return Exchange(self, (scheme, "", 0), b"", False, UpstreamError(f"not an http(s) URL: {url}"))
        origin = (scheme, parts.hostname, parts.port or (443 if scheme == "https" else 80))
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = parts.netloc.rpartition("@")[2]  # never the URL's credentials
        head = [f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n".encode("latin-1")]
        for name, value in headers:
            head += (name, b": ", value, b"\r\n")
        head.append(b"Accept-Encoding: identity\r\nContent-Length: %d\r\n\r\n" % len(body))
        exchange = Exchange(self, origin, b"".join(head) + body, method == "HEAD")
        connection = self._take_idle(origin)
        if connection is not None:
            exchange.send_on(connection)
        return exchange

    async def close(self) -> None:
        for connection in list(self._open):
            connection.drop()
        self._idle.clear()

    def _take_idle(self, origin: Origin) -> Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()  # the most recently used: the likeliest to be still open
            if connection.usable and now - connection.idle_since < IDLE_SECONDS:
                return connection
            connection.drop()
        return None

    async def _connect(self, origin: Origin) -> Connection:
        scheme, host, port = origin
        if scheme == "https" and self._ssl is None:
            self._ssl = ssl.create_default_context()
        loop = asyncio.get_running_loop()
        try:
            _, connection = await asyncio.wait_for(loop.create_connection(
                lambda: Connection(self, origin), host, port, ssl=self._ssl if scheme == "https" else None),
                self.connect_seconds)
        except TimeoutError:
            raise UpstreamError(f"connecting to {host}:{port} timed out after {self.connect_seconds:g} s") from None
        except OSError as exc:
            raise UpstreamError(str(exc) or type(exc).__name__) from exc
        return connection

    # -- Pool: what its connections tell it -------------------------------------------------------

    def opened(self, connection: Connection) -> None:
        self._open.add(connection)

    def lost(self, connection: Connection) -> None:
        self._open.discard(connection)

    def release(self, connection: Connection) -> None:
        connection.idle_since = time.monotonic()
        self._idle.setdefault(connection.origin, deque()).append(connection)


class Exchange:
    """One request and its answer. `await answer()` for the head; the caller then reads the body
    (`iter_any`, `read`) and `close`s it (a connection read to its end goes back to the pool)."""

    def __init__(self, upstream: Upstream, origin: Origin, request: bytes, head_only: bool,
                 error: UpstreamError | None = None) -> None:
        self.upstream = upstream
        self.origin = origin
        self.request = request
        self.head_only = head_only
        self.error = error  # it cannot be sent: raised by `answer`
        self._connection: Connection | None = None

    @property
    def sent(self) -> bool:
        """Whether the request is written already (on an idle connection, by `start`)."""
        return self._connection is not None

    def send_on(self, connection: Connection) -> None:
        self._connection = connection
        connection.send(self.request, self.head_only)

    async def answer(self) -> Answer:
        if self.error is not None:
            raise self.error
        if self._connection is None:
            self._connection = await self.upstream._connect(self.origin)
            self._connection.send(self.request, self.head_only)
        try:
            return await self._connection.head()
        except Stale:
            # The upstream closed an idle connection as the request went out, and answered nothing.
            self._connection = await self.upstream._connect(self.origin)
            self._connection.send(self.request, self.head_only)
            return await self._connection.head()

    def close(self) -> None:
        """Done with it: a connection whose answer was read to its end is kept, any other dropped."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.finish()
