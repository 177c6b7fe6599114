"""Record mode: a proxy in front of a real upstream that writes what it saw as a dsh v0 session tree.

`record_proxy` forwards and streams; `record_tree` owns the sessions, lineage and logs;
`record_events` maps one call to its rows; `record_call` is what the proxy saw of a call; `redact`
masks secrets. This module runs it: in-process (tests, benchmarks) or as `mockllm record` until
interrupted. Either way the tree is finished on the way out: every log closed (its `.partial`
renamed) and the sidecar written, so an interrupted recording is a valid tree.
"""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import aiohttp
from aiohttp import web

from mockllm.options import items, session_header_names
from mockllm.record.proxy import Recorder, create_app
from mockllm.record.redact import Redactor
from mockllm.record.tree import SessionTree
from mockllm.server.running import RunningServer

SHUTDOWN_TIMEOUT = 1.0


@dataclass(frozen=True, slots=True)
class RecordOptions:
    upstream: str  # the upstream's base, `/v1` included
    out: Path
    pack: bool = False
    redact: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8080
    log_level: str = "warning"
    session_headers: tuple[str, ...] = ()  # besides the built-in ones (`--session-header`), as replay reads them

    def __post_init__(self) -> None:
        for name in ("redact", "session_headers"):
            object.__setattr__(self, name, items(getattr(self, name)))


class RunningRecorder(RunningServer):
    """A started proxy; `base_url` is `http://host:port` (clients use `base_url + "/v1"`)."""

    def __init__(self, runner: web.AppRunner, client: aiohttp.ClientSession, tree: SessionTree,
                 host: str, port: int) -> None:
        super().__init__(runner, host, port)
        self.client = client
        self.tree = tree

    async def close(self) -> None:
        """Stop serving (calls in flight end as the client leaving would), then finish the tree."""
        try:
            await self.runner.cleanup()
            await self.client.close()
        finally:
            self.tree.close()

    async def __aenter__(self) -> RunningRecorder:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()


async def start_recorder(options: RecordOptions) -> RunningRecorder:
    """Start the proxy on the running loop (`port=0`: a free port); raises FileExistsError if `out`
    already holds a recording and re.error for a bad `--redact` pattern."""
    redactor = Redactor(re.compile(p) for p in options.redact)
    tree = SessionTree(options.out, pack=options.pack, redactor=redactor)
    # No read timeout: an answer may stream (or be held) for as long as the upstream takes.
    client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
                                   auto_decompress=True)
    recorder = Recorder(tree, options.upstream, client, session_header_names(options.session_headers))
    runner = web.AppRunner(create_app(recorder), handler_cancellation=True,
                           shutdown_timeout=SHUTDOWN_TIMEOUT, access_log=None)
    try:
        await runner.setup()
        site = web.TCPSite(runner, options.host, options.port)
        await site.start()
    except BaseException:
        await runner.cleanup()
        await client.close()
        tree.close()
        raise
    addresses = runner.addresses
    return RunningRecorder(runner, client, tree, options.host, addresses[0][1] if addresses else options.port)


def record_forever(options: RecordOptions) -> int:
    """`mockllm record`: proxy until SIGINT/SIGTERM, then finish the tree."""
    logging.basicConfig(level=options.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        asyncio.run(_record(options))
    except (FileExistsError, re.error) as exc:
        print(f"mockllm record: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"mockllm record: cannot listen on {options.host}:{options.port}: {exc.strerror}", file=sys.stderr)
        return 1
    return 0


async def _record(options: RecordOptions) -> None:
    recorder = await start_recorder(options)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"mockllm recording to {options.out}, forwarding to {options.upstream}, on {recorder.base_url}",
          flush=True)
    print(f"  {recorder.base_url}/v1", flush=True)
    try:
        await stop.wait()
    finally:
        await recorder.close()
        sessions = ", ".join(s.file for s in recorder.tree.sessions.values()) or "no sessions"
        print(f"mockllm stopped; recorded {sessions} in {options.out}", flush=True)
