"""A stdio MCP server (`--mcp NAME=stdio:COMMAND ARGS…`) exposed over Streamable HTTP, as the
recorder exposes an HTTP one: the agent speaks HTTP to `/mcp/NAME`, and this speaks the server's
newline-delimited JSON-RPC on its stdin and stdout.

Each MCP session gets a process of its own: an `initialize` starts one and its answer gives the
session an id (`Mcp-Session-Id`), which later requests carry; `DELETE` ends it. Requests without a
session (the 2026-07-28 protocol's, from `server/discover` on) share one process. Request ids are
renumbered on the way in (two clients may both send id 1) and put back on the way out. What the
server sends between a request and its answer (progress, log messages, its own requests) goes
back in that request's SSE answer, as a Streamable HTTP server sends it; with nothing before it
the answer is plain JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from typing import Any

import msgspec
from aiohttp import web

from mockllm.mcp.jsonrpc import SESSION_HEADER, error, is_answer, is_notification, is_request
from mockllm.record.mcp_forward import decode
from mockllm.record.mcp_sink import ExchangeSink

log = logging.getLogger("mockllm.record.mcp")


class StdioProcess:
    """One running stdio server and the requests waiting for its answers."""

    def __init__(self, command: tuple[str, ...]) -> None:
        self.command = command
        self.process: asyncio.subprocess.Process | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[Any, list[Any], asyncio.Future[None]]] = {}  # our id -> (theirs, messages, done)
        self._reader: asyncio.Task[None] | None = None
        self.stray: list[Any] = []  # what the server sent with no request waiting

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            *self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=64 * 1024 * 1024)
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        while True:
            line = await self.process.stdout.readline()
            if not line:
                break
            message = decode(line)
            if message is None:
                log.warning("%s: not JSON on stdout: %r", self.command[0], line[:200])
                continue
            key = message.get("id") if isinstance(message, dict) and is_answer(message) else None
            if isinstance(key, int) and key in self._pending:
                theirs, messages, done = self._pending.pop(key)
                messages.append({**message, "id": theirs})
                done.set_result(None)
            elif self._pending:  # a notification or a request of the server's: the latest request's stream
                self._pending[max(self._pending)][1].append(message)
            else:
                self.stray.append(message)
        for theirs, messages, done in self._pending.values():  # the server exited: answer what waits
            messages.append(error(theirs, -32000, f"the stdio MCP server {self.command[0]} exited"))
            done.set_result(None)
        self._pending.clear()

    def _write(self, message: Any) -> None:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(msgspec.json.encode(message) + b"\n")

    async def send(self, message: Any) -> list[Any]:
        """Send one message; a request's answer is every message up to its response, in order."""
        if self.process is None or self.process.returncode is not None:
            return [error(message.get("id"), -32000, f"the stdio MCP server {self.command[0]} is not running")] \
                if is_request(message) else []
        if not is_request(message):
            self._write(message)
            assert self.process.stdin is not None
            await self.process.stdin.drain()
            return []
        ours = next(self._ids)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        messages: list[Any] = []
        self._pending[ours] = (message["id"], messages, done)
        self._write({**message, "id": ours})
        assert self.process.stdin is not None
        await self.process.stdin.drain()
        await done
        return messages

    async def close(self) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        assert process.stdin is not None
        with contextlib.suppress(OSError):
            process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 2)
        except TimeoutError:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 2)
            except TimeoutError:
                process.kill()
                await process.wait()
        if self._reader is not None:
            await self._reader


class StdioServer:
    """A stdio command behind `/mcp/NAME`: its processes by MCP session."""

    def __init__(self, command: tuple[str, ...]) -> None:
        self.command = command
        self._sessions: dict[str, StdioProcess] = {}
        self._shared: StdioProcess | None = None
        self._lock = asyncio.Lock()

    async def _process(self, session_id: str | None) -> StdioProcess | None:
        if session_id:
            return self._sessions.get(session_id)
        async with self._lock:
            if self._shared is None:
                self._shared = StdioProcess(self.command)
                await self._shared.start()
            return self._shared

    async def handle(self, request: web.Request, sink: ExchangeSink, body: bytes | None = None) -> web.StreamResponse:
        """One request; `body`: its body where the caller has read it already (else read here)."""
        if request.method == "GET":  # no stream of the server's own: its messages come with answers
            return web.Response(status=405, headers={"Allow": "POST, DELETE"})
        session_id = request.headers.get(SESSION_HEADER)
        if request.method == "DELETE":
            ended = self._sessions.pop(session_id or "", None)
            exchange = sink.begin("DELETE", request.headers, None)
            started = time.perf_counter()
            if ended is not None:
                await ended.close()
            sink.end(exchange, 200 if ended else 404, False, [], None, started)
            return web.Response(status=200 if ended else 404)
        if request.method != "POST":
            return web.Response(status=405, headers={"Allow": "POST, DELETE"})
        if body is None:
            body = await request.read()
        message = decode(body)
        if not isinstance(message, dict | list):
            return web.json_response(error(None, -32700, "Parse error: the body is not JSON"), status=400)
        exchange = sink.begin("POST", request.headers, message)
        started = time.perf_counter()
        given: str | None = None
        process: StdioProcess | None
        if isinstance(message, dict) and message.get("method") == "initialize":
            given = uuid.uuid4().hex
            process = self._sessions[given] = StdioProcess(self.command)
            await process.start()
        else:
            process = await self._process(session_id)
        if process is None:
            answer = error(message.get("id") if isinstance(message, dict) else None, -32600,
                           f"unknown MCP session {session_id!r}")
            sink.end(exchange, 404, False, [answer], None, started)
            return web.json_response(answer, status=404)
        batch = message if isinstance(message, list) else [message]
        answers = [m for one in batch for m in await process.send(one)]
        headers = {SESSION_HEADER: given} if given else {}
        if session_id and not given:
            headers[SESSION_HEADER] = session_id
        if not any(is_request(m) for m in batch):
            sink.end(exchange, 202, False, [], given, started)
            return web.Response(status=202, headers=headers)
        sse = any(is_notification(m) or is_request(m) for m in answers)
        sink.end(exchange, 200, sse, answers, given, started)
        if not sse:
            payload = answers if isinstance(message, list) else answers[-1]
            return web.Response(body=msgspec.json.encode(payload), content_type="application/json", headers=headers)
        response = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        for sent in answers:
            await response.write(b"event: message\ndata: " + msgspec.json.encode(sent) + b"\n\n")
        await response.write_eof()
        return response

    async def close(self) -> None:
        processes = [*self._sessions.values(), *([self._shared] if self._shared else [])]
        self._sessions.clear()
        self._shared = None
        await asyncio.gather(*(p.close() for p in processes))
