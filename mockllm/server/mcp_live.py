"""MCP servers in the server's record modes (`--mcp NAME=URL|stdio:COMMAND` on serve).

A run that records from scratch (`once`, `rewrite`) forwards every MCP request to its server and
keeps the exchanges; they are written as `mcp.NAME.jsonl` into the run's recording when it ends,
beside its session logs (`record.recording.Beside`). Under `new_episodes` the recording answers
what it can, and a call it cannot serve goes to the server: over the 2025 protocols within an MCP
session opened upstream as the client's recorded `initialize` opened it; the answer is kept, and
the scenario's `mcp.NAME.jsonl` is rewritten with it appended when the run ends.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from mockllm.mcp.log import Exchange, Header, McpLog, file_name, write_log
from mockllm.mcp.spec import parse_all
from mockllm.options import ServeOptions
from mockllm.record.mcp import McpUpstreams
from mockllm.record.mcp_sink import ExchangeSink
from mockllm.record.recording import RunRecording
from mockllm.replay.run import Run
from mockllm.server.live import LiveCalls


class McpRunRecording:
    """One recording run's MCP exchanges, by server (a `Beside` of its `RunRecording`)."""

    def __init__(self, recording: RunRecording, logs: dict[str, McpLog], transports: Mapping[str, str],
                 session_headers: tuple[str, ...]) -> None:
        self.recording = recording
        self.logs = logs  # new_episodes: the recordings the new exchanges continue
        self.transports = transports
        self.session_headers = session_headers
        self.exchanges: dict[str, list[Exchange]] = {}
        self.sinks: dict[str, ExchangeSink] = {}

    def sink(self, name: str) -> ExchangeSink:
        sink = self.sinks.get(name)
        if sink is None:
            kept = self.exchanges.setdefault(name, [])
            sink = self.sinks[name] = ExchangeSink(kept.append, self.recording.redactor, self.session_headers)
            old = self.logs.get(name)
            if old is not None:
                sink.continue_from({e.session_id: e.mcp_session for e in old.exchanges
                                    if e.session_id and e.mcp_session is not None})
        return sink

    @property
    def recorded(self) -> bool:
        return any(self.exchanges.values())

    def write(self, folder: Path) -> str:
        written = []
        for name, sink in self.sinks.items():  # streams the agent left open: kept as they stand
            self.exchanges[name] += sink.still_open()
        for name, exchanges in self.exchanges.items():
            if not exchanges:
                continue
            old = self.logs.get(name)
            header = old.header if old is not None else Header(
                server=name, transport="stdio" if self.transports.get(name) == "stdio" else "http",
                createdAt=int(time.time() * 1000))
            before = old.exchanges if old is not None else []
            first = max((e.seq for e in before), default=-1) + 1
            for number, exchange in enumerate(exchanges):
                exchange.seq = first + number
            write_log(folder / file_name(name), header, [*before, *exchanges])
            written.append(f"{file_name(name)} ({len(exchanges)} exchange(s)"
                           + (" appended)" if old is not None else ")"))
        return f"; MCP: {', '.join(written)}" if written else ""


class McpLive:
    """The server's MCP upstreams, and what its recording runs keep of them."""

    def __init__(self, live: LiveCalls, options: ServeOptions) -> None:
        specs = parse_all(options.mcp)
        self.live = live
        self.upstreams = McpUpstreams(specs)
        self.transports = {s.name: s.transport for s in specs}
        self.session_headers = options.all_session_headers
        self._initialize: dict[tuple[str, str, str], dict[str, Any]] = {}  # (run, server, session) -> its initialize
        self._opened: dict[tuple[str, str, str], str | None] = {}  # ... -> the upstream's session id

    def _recording(self, run: Run) -> McpRunRecording | None:
        recording = self.live.recordings.get(run.id)
        if recording is None:
            return None
        mine = next((b for b in recording.beside if isinstance(b, McpRunRecording)), None)
        if mine is None:
            logs = dict(run.scenario.mcp) if run.episodes else {}
            mine = McpRunRecording(recording, logs, self.transports, self.session_headers)
            recording.beside.append(mine)
        return mine

    def takes(self, run: Run, name: str) -> bool:
        """A run that records from scratch: every request to server `name` goes to it."""
        return name in self.upstreams.specs and run.recording and run.id in self.live.recordings

    def goes_live(self, run: Run, name: str) -> bool:
        """A new_episodes run: what the recording of server `name` cannot serve goes to it."""
        return name in self.upstreams.specs and run.episodes and run.id in self.live.recordings

    async def forward(self, request: web.Request, run: Run, name: str) -> web.StreamResponse:
        mine = self._recording(run)
        if mine is None:
            return web.json_response({"jsonrpc": "2.0", "id": None, "error": {
                "code": -32000, "message": f"run {run.id} has ended; its recording takes no more calls"}}, status=410)
        return await self.upstreams.forward(request, name, mine.sink(name))

    def saw_initialize(self, run: Run, name: str, session_id: str, message: dict[str, Any]) -> None:
        """A replayed `initialize` under new_episodes: kept to open the same session upstream if a call misses."""
        self._initialize[(run.id, name, session_id)] = message

    async def miss(self, request: web.Request, run: Run, name: str, body: bytes) -> web.StreamResponse:
        """A call the recording cannot serve (`body`, read already): sent to the server (in a session
        opened for the client's), kept."""
        mine = self._recording(run)
        if mine is None:
            return await self.forward(request, run, name)
        client_session = request.headers.get("mcp-session-id")
        upstream_session: str | None = None
        if client_session:
            key = (run.id, name, client_session)
            if key not in self._opened:
                initialize = self._initialize.get(key)
                self._opened[key] = (await self.upstreams.open_session(name, initialize, request.headers)
                                     if initialize is not None else None)
            upstream_session = self._opened[key]
        return await self.upstreams.forward(request, name, mine.sink(name), upstream_session, body)

    async def close(self) -> None:
        await self.upstreams.close()
