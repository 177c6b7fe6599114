"""Record mode: a proxy in front of a real upstream that writes what it saw as a dsh v0 session tree.

`proxy` forwards and streams; `tree` owns the sessions and logs; `lineage` decides the tree's
shape from what the requests showed (its docstring holds the rule); `side` writes `--side-route`
models' calls as side routes; `events` maps one call to its rows; `call` is what the proxy saw of a
call; `redact` masks secrets and writes `{{cwd}}`. This module runs it:
in-process (tests, benchmarks) or as `mockllm record` until interrupted, started and stopped as
the replay server is (`server.listen`). Either way the tree is finished on the way out: every log
closed (its `.partial` renamed) and the sidecar written, so an interrupted recording is a valid tree.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from mockllm.errors import RecordError
from mockllm.hosting.listen import CannotListen, RunningServer, listen, run_main, serve_until_signalled
from mockllm.mcp.spec import parse_all
from mockllm.options import items, session_header_names
from mockllm.record.mcp import McpRecorder
from mockllm.record.proxy import Recorder, create_app
from mockllm.record.redact import Redactor
from mockllm.record.tree import SessionTree
from mockllm.record.upstream import Upstream
from mockllm.shown_url import shown_url


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
    side_routes: tuple[str, ...] = ()  # models whose calls are written as side routes, not sessions (`--side-route`)
    cwd: str | None = None  # the agent's working folder, written as `{{cwd}}` (`--cwd`)
    mcp: tuple[str, ...] = ()  # MCP servers proxied at /mcp/NAME: NAME=URL or NAME=stdio:COMMAND (`--mcp`)

    def __post_init__(self) -> None:
        for name in ("redact", "session_headers", "side_routes", "mcp"):
            object.__setattr__(self, name, items(getattr(self, name)))


class RunningRecorder(RunningServer):
    """A started proxy; `base_url` is `http://host:port` (clients use `base_url + "/v1"`)."""

    def __init__(self, runner: web.AppRunner, upstream: Upstream, recorder: Recorder,
                 host: str, port: int, mcp: McpRecorder | None = None) -> None:
        super().__init__(runner, host, port)
        self.upstream = upstream
        self.recorder = recorder
        self.tree = recorder.tree
        self.mcp = mcp

    async def close(self) -> None:
        """Stop serving (calls in flight end as the client leaving would), then finish the tree."""
        try:
            await super().close()
            await self.recorder.forwarder.settled()  # calls that ended are recorded before the tree closes
            await self.upstream.close()
        finally:
            try:
                if self.mcp is not None:
                    await self.mcp.close()
            finally:
                self.tree.close()


async def start_recorder(options: RecordOptions) -> RunningRecorder:
    """Start the proxy on the running loop (`port=0`: a free port). Raises a RecordError for what is
    asked of it (AlreadyRecorded if `out` already holds a recording, BadRedaction for a bad `--redact`
    pattern) and CannotListen (an OSError) for an address that cannot be bound."""
    try:
        specs = parse_all(options.mcp)
    except ValueError as exc:
        raise RecordError(str(exc)) from None
    redactor = Redactor(options.redact, cwd=options.cwd)
    tree = SessionTree(options.out, pack=options.pack, redactor=redactor,
                       side_routes=options.side_routes, cwd=bool(options.cwd))
    # No read timeout: an answer may stream (or be held) for as long as the upstream takes.
    upstream = Upstream()
    headers = session_header_names(options.session_headers)
    recorder = Recorder.into(tree, options.upstream, upstream, headers)
    mcp = McpRecorder(specs, options.out, redactor, headers) if specs else None
    try:
        runner, port = await listen(create_app(recorder, mcp.install if mcp else None), options.host, options.port)
    except BaseException:
        await upstream.close()
        if mcp is not None:
            await mcp.close()
        tree.close()
        raise
    return RunningRecorder(runner, upstream, recorder, options.host, port, mcp)


def record_forever(options: RecordOptions) -> int:
    """`mockllm record`: proxy until SIGINT/SIGTERM, then finish the tree."""
    logging.basicConfig(level=options.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        run_main(_record(options))
    except CannotListen as exc:
        print(f"mockllm record: {exc}", file=sys.stderr)
        return 1
    except RecordError as exc:
        print(f"mockllm record: {exc}", file=sys.stderr)
        return 2
    return 0


async def _record(options: RecordOptions) -> None:
    recorder = await start_recorder(options)
    banner = [f"mockllm recording to {options.out}, forwarding to {shown_url(options.upstream)}, "
              f"on {recorder.base_url}",
              f"  {recorder.base_url}/v1",
              *(f"  {recorder.base_url}/mcp/{name}" for name in (recorder.mcp.writers if recorder.mcp else ()))]
    try:
        await serve_until_signalled(recorder, banner)
    finally:
        print(closing_line(recorder.tree), flush=True)


def closing_line(tree: SessionTree) -> str:
    """What `mockllm record` says when it stops: the files it wrote (only those on disk), and how many
    writes failed, if any did (their logs keep their `.partial` names; the log said why)."""
    files = [f for f in (*(s.file for s in tree.sessions.values()), *tree.side.files) if (tree.out / f).is_file()]
    line = f"mockllm stopped; recorded {', '.join(files) or 'no sessions'}"
    if tree.embeddings:
        line += f" and {len(tree.embeddings)} embeddings call(s) (embeddings.json)"
    line += f" in {tree.out}"
    if tree.failures:
        line += (f"; {len(tree.failures)} write(s) failed (first: {tree.failures[0]}): the logs concerned keep "
                 ".partial names, and the tree may miss calls")
    return line
