"""Running the server: in-process (tests, benchmarks) or as `mockllm serve` until interrupted.

What a server serves when no folder is named is decided here too (`load_source`), so the CLI,
the Python API and the pytest plugin agree on it.
"""

from __future__ import annotations

import gc
import importlib.resources
import logging
import socket
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

from mockllm.errors import MockllmError
from mockllm.hosting.listen import CannotListen, listen, run_main, serve_until_signalled
from mockllm.hosting.listen import RunningServer as RunningServer  # the Python API and tests take it from here
from mockllm.options import ServeOptions, parse_upstream
from mockllm.record.recording import host_of
from mockllm.scenario import dshenv
from mockllm.scenario.collector import paused
from mockllm.scenario.load import Suite, load_suite
from mockllm.server.app import SERVER_KEY, create_app

# Profiled at 1,000 concurrent streams, the default (700, 10, 10) spent ~25 µs a request in gen1/2
# collections that freed nothing; a larger young generation keeps that flat as streams grow.
GC_THRESHOLDS = (50_000, 50, 100)


async def start_server(suite: Suite, options: ServeOptions | None = None, *, sock: socket.socket | None = None,
                       **changes: Any) -> RunningServer:
    """Start serving `suite` on the running loop with `options` (ServeOptions field names as
    keyword `changes` override them; in-process callers usually pass `port=0`: a free port).
    An address that cannot be bound raises CannotListen (an OSError). `sock`: a listening socket
    to serve on instead of binding the options' host and port (`listen`)."""
    options = (options or ServeOptions()).replace(**changes)
    return await serve_app(build_app(suite, options), options, sock=sock)


def build_app(suite: Suite, options: ServeOptions) -> web.Application:
    """The server of `suite`, built (its calls rendered as `--warm` says) but not yet listening."""
    with paused():  # rendering every recorded call (`--warm`) builds objects that live as long as loading's
        return create_app(suite, options)


async def serve_app(app: web.Application, options: ServeOptions, *, sock: socket.socket | None = None) -> RunningServer:
    """Serve an app `build_app` built, on `options`' host and port or on `sock` (see `start_server`)."""
    runner, port = await listen(app, options.host, options.port, sock)
    running = RunningServer(runner, options.host, port)
    app[SERVER_KEY].runs.origin = running.base_url  # the address its refusals' advice names
    return running


def bundled_recordings() -> Path:
    """The recordings shipped with mockllm.

    Installed, they are package data (`mockllm/recordings`, see pyproject.toml); in a source
    checkout (an editable install) they are the project's top-level `recordings/` folder.
    """
    shipped = importlib.resources.files("mockllm") / "recordings"
    if isinstance(shipped, Path) and shipped.is_dir():
        return shipped
    return Path(__file__).resolve().parents[2] / "recordings"  # mockllm/server/running.py -> the project


def load_source(path: Path | None = None, options: ServeOptions | None = None) -> Suite:
    """Load what a server serves: `path` (a scenario or a suite); with none, the tree dsh's
    `DSH_SNAPSHOT_*` variables name when `DSH_SNAPSHOT_FILE` is set, else the bundled recordings.
    Side routes named in `options` (`--side-route`) are added to every scenario.

    Raises a MockllmError saying what is wrong (with the folder, or with which variable's file).
    """
    side_routes = options.side_route_specs if options is not None else []
    if path is not None:
        # A server that records may start on a new or empty folder: it is where recordings go.
        records = options is not None and (options.record_mode != "none" or bool(options.upstream))
        return load_suite(path, side_routes=side_routes, allow_empty=records)
    suite = dshenv.load_dsh_env(side_routes=side_routes) if dshenv.requested() else load_suite(
        bundled_recordings(), side_routes=side_routes)
    suite.recordable = False  # mockllm's own files, or dsh's: never written by a record mode
    return suite


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
    try:
        run_main(_serve(suite, options))
    except CannotListen as exc:
        print(f"mockllm: {exc}", file=sys.stderr)
        return 1
    return 0


def settle_memory() -> None:
    """Take what was loaded (it lives as long as the server) out of the cyclic collector's scans.
    Not collected first: a load leaves next to no garbage (`scenario.collector`), and a full
    collection of what it built cost 40-50 ms of the server's start for 200 scenarios."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def _serve(suite: Suite, options: ServeOptions) -> None:
    server = await start_server(suite, options)
    settle_memory()
    names = sorted(suite.scenarios)
    banner = [f"mockllm serving {len(names)} scenario(s) from {suite.path} on {server.base_url}"]
    if len(names) == 1:
        banner.append(f"  {server.base_url}/v1")
    banner += [f"  {server.base_url}/scenarios/{name}/v1" for name in names]
    banner.append(f"  runs: POST {server.base_url}/_mockllm/runs {{\"scenario\": NAME}}")
    if options.upstream:
        hosts = ", ".join(host_of(parse_upstream(u)[1]) for u in options.upstream)
        banner.append(f"  record mode {options.record_mode} (per run: \"record_mode\"); live calls go to {hosts}")
    try:
        await serve_until_signalled(server, banner)
    finally:
        print("mockllm stopped", flush=True)
