"""Connections that hold a server's resources without using them are closed.

aiohttp alone closes a kept-alive connection only after an hour, and never one that sends no
request at all: 20,000 idle sockets then exhaust the file limit, and the health check times out.
Here every connection of a mockllm server (the replay server and the recorder) is watched:

- a connection with no request being handled (none sent yet, a request head arriving byte by byte,
  or idle between requests) is closed after `IDLE_TIMEOUT` seconds of that;
- a request body must arrive within `BODY_TIMEOUT` seconds (`bodies.read_body`), else 408;
- a request being answered is never cut: a held stream (a hang, a paced replay, a live upstream)
  lasts as long as its client stays;
- past `CONNECTIONS_KEPT` open connections (three quarters of the process's file limit), a new
  connection first closes the connections idle the longest, so a flood of idle sockets can never
  use up the file limit before its timeout: the health check and real clients still connect.

The timeouts are module attributes, read when a connection is made, so a test may shorten them.
"""

from __future__ import annotations

import asyncio
import resource
import socket
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

IDLE_TIMEOUT = 60.0  # seconds a connection may hold no request being handled
BODY_TIMEOUT = 120.0  # seconds a request's body may take to arrive (64 MiB over a slow link)


def _connections_kept() -> int:
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return 4096
    return 4096 if soft == resource.RLIM_INFINITY else max(64, soft * 3 // 4)


CONNECTIONS_KEPT = _connections_kept()  # open connections past which the idle longest are closed


class GuardedHandler(RequestHandler):
    """aiohttp's connection handler, closing the connection once it has been idle for IDLE_TIMEOUT."""

    _guard: asyncio.TimerHandle | None = None
    _idle_since: float | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._limit = IDLE_TIMEOUT
        self._idle_since = self._loop.time()
        self._arm()
        manager: Any = self._manager
        if manager is not None and len(manager._connections) > CONNECTIONS_KEPT:
            self._make_room(manager.connections)

    def _make_room(self, connections: list[RequestHandler]) -> None:
        """Close the connections idle the longest (never one being answered, nor this new one) until
        CONNECTIONS_KEPT are open."""
        close_idle_longest([c for c in connections if isinstance(c, GuardedHandler) and c is not self],
                           len(connections) - CONNECTIONS_KEPT)

    def idle_since(self) -> float | None:
        """When this connection went idle (None: a request is being answered, or it is closed)."""
        if self._request_in_progress or self.transport is None:
            return None
        return self._idle_since if self._idle_since is not None else self._loop.time()

    def close_now(self) -> None:
        self.force_close()
        if self.transport is not None:
            self.transport.close()

    def _arm(self) -> None:
        # Checked a few times per timeout: one timer per connection, never one per byte received.
        self._guard = self._loop.call_later(self._limit / 4, self._check)

    def _check(self) -> None:
        if self.transport is None:
            return
        now = self._loop.time()
        if self._request_in_progress:  # being answered: never cut (aiohttp's own flag, set around the handler)
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = now
        elif now - self._idle_since >= self._limit:
            self.force_close()  # which closes the transport (and forgets it)
            return
        self._arm()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._guard is not None:
            self._guard.cancel()
        super().connection_lost(exc)


class Idle(Protocol):
    """A connection the guard may close to make room (`close_idle_longest`)."""

    def idle_since(self) -> float | None:
        """When it went idle; None: busy, or closed (never closed to make room)."""

    def close_now(self) -> None: ...


def close_idle_longest(connections: Iterable[Idle], excess: int) -> None:
    """Close the `excess` connections idle the longest (never one being answered)."""
    if excess <= 0:
        return
    idle = [(since, c) for c in connections if (since := c.idle_since()) is not None]
    idle.sort(key=lambda pair: pair[0])
    for _, connection in idle[:excess]:
        connection.close_now()


class Connections:
    """How a site makes its connections: each an aiohttp connection (`GuardedHandler`, or the
    subclass `handler` made with `handler_kwargs` too). A subclass may make something lighter
    first (the fast lane's `LaneConnections`); it closes what it made when the site stops."""

    def __init__(self, handler: type[GuardedHandler] = GuardedHandler,
                 handler_kwargs: dict[str, Any] | None = None) -> None:
        self.handler = handler
        self.handler_kwargs = handler_kwargs or {}

    def aiohttp_factory(self, server: Any) -> Callable[[], GuardedHandler]:
        """A new aiohttp connection of `server` (aiohttp's `web_server.Server`), each call."""
        handler, kwargs = self.handler, {**server._kwargs, **self.handler_kwargs}
        return lambda: handler(server, loop=server._loop, **kwargs)

    def factory(self, server: Any) -> Callable[[], asyncio.BaseProtocol]:
        """What the listening socket makes of each connection it accepts."""
        return self.aiohttp_factory(server)

    def close(self) -> None:
        """The site stops: close what this made that aiohttp's shutdown does not know of."""


class GuardedSite(web.TCPSite):
    """A TCPSite whose connections are made by `connections` (aiohttp offers no handler class to
    set; by default each a `GuardedHandler`), on `sock` when one is given (bound and listening
    already), else on its host and port."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, sock: socket.socket | None = None,
                 connections: Connections | None = None) -> None:
        super().__init__(runner, host, port)
        self._sock = sock
        self.connections = connections or Connections()

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server: Any = self._runner.server
        assert server is not None
        factory = self.connections.factory(server)
        loop = asyncio.get_running_loop()
        if self._sock is not None:
            self._server = await loop.create_server(factory, sock=self._sock, ssl=self._ssl_context,
                                                    backlog=self._backlog)
        else:
            self._server = await loop.create_server(
                factory, self._host, self._port, ssl=self._ssl_context, backlog=self._backlog,
                reuse_address=self._reuse_address, reuse_port=self._reuse_port)
        self._bound_port = self._server.sockets[0].getsockname()[1] if self._server.sockets else self._port

    async def stop(self) -> None:
        await super().stop()
        self.connections.close()
