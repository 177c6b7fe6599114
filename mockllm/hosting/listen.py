"""Starting an aiohttp application on an address and stopping it: the one way the replay server and
the recorder do both.

It names no application, so record mode starts its proxy here without importing the replay server.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Callable, Coroutine, Iterable
from types import TracebackType
from typing import Any, Self

from aiohttp import web

from mockllm.errors import MockllmError
from mockllm.hosting import guard
from mockllm.hosting.fast_lane import connections_for
from mockllm.hosting.guard import GuardedSite
from mockllm.hosting.log_rate import limit_repeats

# Held streams (hangs, recorded calls still streaming) are cancelled on shutdown; nothing else needs long.
SHUTDOWN_TIMEOUT = 1.0


class CannotListen(MockllmError, OSError):
    """The address could not be bound. An OSError still (errno and strerror kept), for callers that
    catch those; kept apart from other OSErrors, such as a closed stdout."""

    def __init__(self, host: str, port: int, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror)
        self.message = f"cannot listen on {host}:{port}: {cause.strerror or cause}"

    def __str__(self) -> str:
        return self.message


class RunningServer:
    """A started server; `base_url` is `http://host:port` (no trailing slash). Closing it stops it."""

    def __init__(self, runner: web.AppRunner, host: str, port: int) -> None:
        self.runner = runner
        self.host = host
        self.port = port

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def close(self) -> None:
        await self.runner.cleanup()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()


async def listen(app: web.Application, host: str, port: int,
                 sock: socket.socket | None = None) -> tuple[web.AppRunner, int]:
    """Serve `app` on the running loop: its runner, and the port it is bound to (`port` 0 picks a
    free one). An address that cannot be bound raises CannotListen, with nothing left set up.
    `sock`: a socket bound and listening already (handed over by whoever chose the address), served
    instead of binding `host` and `port`."""
    # handler_cancellation: a client that leaves cancels its handler, which is what frees a hang
    # (and what tells the recorder that the agent cancelled a call). auto_decompress off: a compressed
    # body is inflated by `bodies.read_body`, which stops at the body limit. Idle connections are
    # closed (`guard`), and a line the log repeats is limited (`log_rate`).
    limit_repeats()
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=SHUTDOWN_TIMEOUT, access_log=None,
                           auto_decompress=False, keepalive_timeout=guard.IDLE_TIMEOUT)
    try:
        await runner.setup()
        site = GuardedSite(runner, host, port, sock=sock, connections=connections_for(app))  # the lane's, if it has one
        try:
            await site.start()
        except OSError as exc:
            raise CannotListen(host, port, exc) from exc
    except BaseException:
        await runner.cleanup()  # a failed start must not leave the app half set up
        raise
    addresses = runner.addresses
    return runner, addresses[0][1] if addresses else port


async def serve_until_signalled(server: RunningServer, banner: Iterable[str]) -> None:
    """Print `banner`, serve until SIGINT or SIGTERM, then close `server`.

    The handlers are in place before the banner is printed: whoever reads it (a user, a test) may
    signal at once, and the server must still close cleanly (a recorder finishes its tree then)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        for line in banner:
            print(line, flush=True)
        await stop.wait()
    finally:
        await server.close()


def run_main(main: Coroutine[Any, Any, None]) -> None:
    """Run a command's main coroutine on uvloop when it is installed (the `fast` extra), else asyncio:
    a server or a recorder sits on every call's path, and uvloop's loop costs a fraction of asyncio's."""
    run: Callable[[Coroutine[Any, Any, None]], None] = asyncio.run
    with contextlib.suppress(ImportError):
        import uvloop

        run = uvloop.run  # not an event loop policy: asyncio deprecates those from Python 3.14
    run(main)
