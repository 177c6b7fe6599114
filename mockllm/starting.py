"""Starting a server in this process: the suite loaded as the server would serve it, then listening.

One place for both ways the Python API starts one: in a thread or on the caller's loop (`api`),
and in a process of its own (`process`, whose child runs exactly this). Its imports (the loader,
aiohttp) are made on first use: importing `mockllm` costs a test process none of them.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from mockllm.errors import MockllmError
from mockllm.options import ServeOptions

if TYPE_CHECKING:
    from aiohttp import web

    from mockllm.scenario.load import Suite
    from mockllm.server.running import RunningServer

PathLike = str | os.PathLike[str]


class ServerStartError(MockllmError):
    """The server could not start: nothing valid to serve, or it could not listen."""


def load_to_serve(path: PathLike | None, options: ServeOptions) -> Suite:
    """The suite to serve; refuses one with nothing valid in it, since every run would be refused,
    unless the server records (a record mode or an upstream): a new or empty folder is where
    recordings go."""
    from mockllm.server.running import load_source

    suite = load_source(Path(path) if path is not None else None, options)
    records = options.record_mode != "none" or bool(options.upstream)
    if not suite.scenarios and not (records and path is not None and not suite.broken):
        errors = "\n".join(f"{name}: {error}" for name, error in suite.broken.items())
        raise ServerStartError(f"{suite.path}: no valid scenario to serve:\n{errors}")
    return suite


def prepare(suite: Suite, options: ServeOptions) -> web.Application:
    """The server of `suite`, built but not listening: what `start_prepared` serves."""
    from mockllm.server.running import build_app

    return build_app(suite, options)


async def start(suite: Suite, options: ServeOptions, sock: socket.socket | None = None) -> RunningServer:
    return await start_prepared(prepare(suite, options), options, sock)


async def start_prepared(app: web.Application, options: ServeOptions,
                         sock: socket.socket | None = None) -> RunningServer:
    from mockllm.server.running import serve_app

    try:
        return await serve_app(app, options, sock=sock)
    except OSError as exc:
        raise ServerStartError(f"cannot listen on {options.host}:{options.port}: {exc.strerror or exc}") from exc
