"""`mockllm record … --mcp NAME=URL|stdio:COMMAND`: the recorder's MCP servers, at `/mcp/NAME`.

Each server's exchanges are written to `mcp.NAME.jsonl` in the output folder as they end
(`mockllm.mcp.log`), through its `ExchangeSink`: a Streamable HTTP server is forwarded to
(`mcp_forward`), a stdio one is started and spoken to (`mcp_stdio`). `McpUpstreams` is also what a
record-mode run of `mockllm serve` forwards through, each run's exchanges going to its own sink.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from mockllm.mcp.jsonrpc import SESSION_HEADER
from mockllm.mcp.log import Exchange, Header, LogWriter, file_name
from mockllm.mcp.spec import McpSpec
from mockllm.record.mcp_forward import HOP_BY_HOP, forward_http
from mockllm.record.mcp_sink import ExchangeSink
from mockllm.record.mcp_stdio import StdioServer
from mockllm.record.redact import Redactor

ROUTE = "/mcp/{server}"


class McpUpstreams:
    """The MCP servers calls are forwarded to: an HTTP client, and each stdio command's processes."""

    def __init__(self, specs: Sequence[McpSpec]) -> None:
        self.specs = {spec.name: spec for spec in specs}
        self._client: aiohttp.ClientSession | None = None
        self._stdio: dict[str, StdioServer] = {s.name: StdioServer(s.command) for s in specs if s.command}

    def client(self) -> aiohttp.ClientSession:
        if self._client is None:  # made on the loop that serves
            self._client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False)
        return self._client

    async def forward(self, request: web.Request, name: str, sink: ExchangeSink,
                      session_id: str | None = None, body: bytes | None = None) -> web.StreamResponse:
        """Forward one request to server `name`; `session_id` replaces the client's Mcp-Session-Id (an
        HTTP server's session opened for a replayed one, under new_episodes); `body`: its body where
        the caller has read it already."""
        spec = self.specs[name]
        stdio = self._stdio.get(name)
        if stdio is not None:
            return await stdio.handle(request, sink, body)
        assert spec.url is not None
        return await forward_http(request, self.client(), spec.url, sink, session_id, body)

    async def open_session(self, name: str, initialize: dict[str, Any], headers: Mapping[str, str]) -> str | None:
        """Begin an MCP session with server `name` as a client's `initialize` did (its answer is not
        recorded: the recording has the one it replayed); the session id the server gave, if any."""
        spec = self.specs[name]
        if spec.url is None:
            return None
        sent = {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP and k.lower() != SESSION_HEADER}
        async with self.client().post(spec.url, json=initialize, headers=sent) as response:
            await response.read()
            session_id = response.headers.get(SESSION_HEADER)
        if session_id:
            sent[SESSION_HEADER] = session_id
            sent["Content-Type"] = "application/json"
            async with self.client().post(spec.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                                          headers=sent) as response:
                await response.read()
        return session_id

    async def close(self) -> None:
        await asyncio.gather(*(s.close() for s in self._stdio.values()))
        if self._client is not None:
            await self._client.close()


def unknown_server(name: str, known: Sequence[str]) -> web.Response:
    """A 404 naming the servers there are (a JSON-RPC error body, which MCP clients read)."""
    listed = ", ".join(sorted(known)) or "none (give --mcp NAME=URL)"
    return web.json_response({"jsonrpc": "2.0", "id": None, "error": {
        "code": -32601, "message": f"no MCP server {name!r} here; MCP servers: {listed}"}}, status=404)


class McpRecorder:
    """`mockllm record`'s MCP servers: forwarded, and written to the output folder."""

    def __init__(self, specs: Sequence[McpSpec], out: Path, redactor: Redactor,
                 session_headers: Sequence[str]) -> None:
        self.upstreams = McpUpstreams(specs)
        self.writers: dict[str, LogWriter] = {}
        self.sinks: dict[str, ExchangeSink] = {}
        created = int(time.time() * 1000)
        for spec in specs:
            writer = LogWriter(out / file_name(spec.name), Header(server=spec.name, transport=spec.transport,
                                                                   createdAt=created))
            self.writers[spec.name] = writer
            self.sinks[spec.name] = ExchangeSink(_writing(writer), redactor, session_headers)

    def install(self, app: web.Application) -> None:
        app.router.add_route("*", ROUTE, self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["server"]
        if name not in self.sinks:
            return unknown_server(name, list(self.sinks))
        return await self.upstreams.forward(request, name, self.sinks[name])

    async def close(self) -> None:
        try:
            await self.upstreams.close()
        finally:
            for writer in self.writers.values():
                writer.close()


def _writing(writer: LogWriter) -> Callable[[Exchange], None]:
    return writer.write
