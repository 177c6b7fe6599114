"""Running the server: in-process (tests, benchmarks) or as `mockllm serve` until interrupted.

What a server serves when no folder is named is decided here too (`load_source`), so the CLI,
the Python API and the pytest plugin agree on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.resources
import logging
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from aiohttp import web

from mockllm.errors import MockllmError
from mockllm.options import ServeOptions
from mockllm.scenario import dshenv
from mockllm.scenario.load import Suite, load_suite
from mockllm.server.app import create_app

# Held streams (hangs) are cancelled on shutdown; nothing else needs long to finish.
SHUTDOWN_TIMEOUT = 1.0
# Profiled at 1,000 concurrent streams, the default (700, 10, 10) spent ~25 µs a request in gen1/2
# collections that freed nothing; a larger young generation keeps that flat as streams grow.
GC_THRESHOLDS = (50_000, 50, 100)


class RunningServer:
    """A started server; `base_url` is `http://host:port` (no trailing slash)."""

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


async def start_server(suite: Suite, options: ServeOptions | None = None, **changes: Any) -> RunningServer:
    """Start serving `suite` on the running loop with `options` (ServeOptions field names as
    keyword `changes` override them; in-process callers usually pass `port=0`: a free port)."""
    options = (options or ServeOptions()).replace(**changes)
    host, port = options.host, options.port
    app = create_app(suite, options)
    # handler_cancellation: a client that leaves cancels its handler, which is what frees a hang.
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=SHUTDOWN_TIMEOUT, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()  # a failed bind must not leave the app half set up
        raise
    sockets = runner.addresses
    bound_port = sockets[0][1] if sockets else port
    return RunningServer(runner, host, bound_port)


def bundled_recordings() -> Path:
    """The recordings shipped with mockllm.

    Installed, they are package data (`mockllm/recordings`, see pyproject.toml); in a source
    checkout (an editable install) they are the project's top-level `recordings/` folder.
    """
    shipped = importlib.resources.files("mockllm") / "recordings"
    if isinstance(shipped, Path) and shipped.is_dir():
        return shipped
    return Path(__file__).resolve().parent.parent / "recordings"


def load_source(path: Path | None = None, options: ServeOptions | None = None) -> Suite:
    """Load what a server serves: `path` (a scenario or a suite); with none, the tree dsh's
    `DSH_SNAPSHOT_*` variables name when `DSH_SNAPSHOT_FILE` is set, else the bundled recordings.
    Side routes named in `options` (`--side-route`) are added to every scenario.

    Raises a MockllmError saying what is wrong (with the folder, or with which variable's file).
    """
    side_routes = options.side_route_specs if options is not None else []
    if path is not None:
        return load_suite(path, side_routes=side_routes)
    if dshenv.requested():
        return dshenv.load_dsh_env(side_routes=side_routes)
    return load_suite(bundled_recordings(), side_routes=side_routes)


def serve_forever(path: Path | None, options: ServeOptions) -> int:
    """`mockllm serve`: load (see `load_source`), print what is served, serve until SIGINT/SIGTERM."""
    logging.basicConfig(level=options.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        suite = load_source(path, options)
    except MockllmError as exc:
        print(f"mockllm: {exc}", file=sys.stderr)
        return 2
    for name, error in suite.broken.items():
        print(f"mockllm: scenario {name} is broken and will not be served:\n{error}", file=sys.stderr)
    for name in suite.skipped:
        print(f"mockllm: skipped {suite.path / name}: not a scenario", file=sys.stderr)
    run: Callable[[Coroutine[Any, Any, None]], None] = asyncio.run
    with contextlib.suppress(ImportError):
        import uvloop

        run = uvloop.run  # not an event loop policy: asyncio deprecates those from Python 3.14
    try:
        run(_serve(suite, options))
    except CannotListen as exc:
        print(f"mockllm: {exc}", file=sys.stderr)
        return 1
    return 0


class CannotListen(MockllmError):
    """The address could not be bound (kept apart from other OSErrors, such as a closed stdout)."""


def settle_memory() -> None:
    """Take what was loaded (it lives as long as the server) out of the cyclic collector's scans."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def _serve(suite: Suite, options: ServeOptions) -> None:
    try:
        server = await start_server(suite, options)
    except OSError as exc:
        raise CannotListen(f"cannot listen on {options.host}:{options.port}: {exc.strerror or exc}") from exc
    settle_memory()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    names = sorted(suite.scenarios)
    print(f"mockllm serving {len(names)} scenario(s) from {suite.path} on {server.base_url}", flush=True)
    if len(names) == 1:
        print(f"  {server.base_url}/v1", flush=True)
    for name in names:
        print(f"  {server.base_url}/scenarios/{name}/v1", flush=True)
    print(f"  runs: POST {server.base_url}/_mockllm/runs {{\"scenario\": NAME}}", flush=True)
    try:
        await stop.wait()
    finally:
        await server.close()
        print("mockllm stopped", flush=True)
