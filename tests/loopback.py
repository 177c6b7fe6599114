"""Starting a test's own aiohttp app (a scripted upstream) on a free loopback port. It imports
nothing of mockllm: the upstreams that use it know nothing of mockllm."""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType
from typing import Self

from aiohttp import web


async def start_on_loopback(app: web.Application) -> tuple[web.AppRunner, str]:
    """Serve `app` on 127.0.0.1 at a free port: its runner (`cleanup()` stops it) and its root URL,
    `http://127.0.0.1:PORT`."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


class ThreadedApp:
    """A test's own aiohttp app served from a thread of its own, on a free loopback port, so a test
    that blocks (a synchronous SDK, a subprocess) can call it. `start()` returns once it listens, at
    `root` (`http://127.0.0.1:PORT`); `stop()` returns once the port is closed; a context manager.
    A subclass adds its routes (`routes`) and names its thread."""

    thread_name = "threaded-app"

    def __init__(self) -> None:
        self.root = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        started = threading.Event()

        async def main() -> None:
            app = web.Application()
            self.routes(app)
            runner, self.root = await start_on_loopback(app)
            self._loop, self._stopped = asyncio.get_running_loop(), asyncio.Event()
            started.set()
            await self._stopped.wait()
            await runner.cleanup()

        self._thread = threading.Thread(target=asyncio.run, args=(main(),), name=self.thread_name, daemon=True)
        self._thread.start()
        started.wait(10)
        return self

    def stop(self) -> None:
        """Stop serving: the port is closed when this returns (a call to it then cannot connect)."""
        if self._thread is None or self._loop is None or self._stopped is None:
            return
        self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(10)
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
