"""`…/mcp/{server}` under every base root: a recorded MCP server, replayed over Streamable HTTP.

POST carries JSON-RPC (one message or a batch): each request gets what the run's `McpRun` says
(`mockllm.mcp.replay`), sent as the recording sent it: an SSE stream where the server streamed
(its notifications included), else JSON. An `initialize` answer gives the recorded
`Mcp-Session-Id` (none where the server gave none, as 2026-07-28's sessionless calls have none);
notifications and the client's answers get 202. GET opens the server's stream where the recording
had one (its recorded messages, then held open until the client leaves, the session is deleted or
the server stops), else 405, as a server without one answers. DELETE ends the session: 200.

A miss (no recorded call answers) is a JSON-RPC error naming the nearest recorded call, and a
divergence in the run's report. In a record mode (`--mcp NAME=…` on serve), a run that records
from scratch forwards every call to the server and keeps the exchanges for its recording; under
`new_episodes` a miss goes to the server and is kept (`server/mcp_live.py`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgspec
from aiohttp import web

from mockllm.errors import TOO_DEEP
from mockllm.hosting.bodies import MAX_BODY, read_body
from mockllm.mcp.jsonrpc import INVALID_REQUEST, PARSE_ERROR, PROTOCOL_HEADER, SESSION_HEADER, error, is_request
from mockllm.mcp.replay import Answer, McpReplay
from mockllm.replay.routing import header_session
from mockllm.replay.run import Run
from mockllm.server.mcp_live import McpLive
from mockllm.server.mock_errors import PASSED_ON, internal_error

log = logging.getLogger("mockllm")

ROUTE = "/mcp/{server}"


def _jsonrpc_error(status: int, code: int, text: str) -> web.Response:
    return web.Response(status=status, body=msgspec.json.encode(error(None, code, text)),
                        content_type="application/json")


class McpRoutes:
    """The MCP handlers of a `MockServer` (`server.app`)."""

    def __init__(self, server: Any) -> None:
        self.server = server  # the MockServer: its runs, its run lookup, its inspector hub, its live calls
        self.live = McpLive(server.live, server.options) if server.options.mcp else None  # record modes
        self._closing = asyncio.Event()
        self._deleted: dict[tuple[str, str], asyncio.Event] = {}  # a session's held GET streams end when it is deleted

    def install(self, app: web.Application, roots: tuple[str, ...], add: Any) -> None:
        for root in roots:
            add(app, root + ROUTE, {"POST": self.handle, "GET": self.handle, "DELETE": self.handle})
        app.on_shutdown.append(self._close)
        app.on_cleanup.append(self._cleanup)

    async def _close(self, app: web.Application) -> None:
        self._closing.set()

    async def _cleanup(self, app: web.Application) -> None:
        if self.live is not None:
            await self.live.close()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._handle(request)
        except PASSED_ON:
            raise
        except Exception as exc:
            return _jsonrpc_error(500, -32603, internal_error(request, exc))

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        run = self.server._run_for(request)
        if not isinstance(run, Run):  # an unknown run or scenario: its words, as a JSON-RPC error
            try:
                text = msgspec.json.decode(run.body)["error"]["message"]
            except (msgspec.DecodeError, KeyError, TypeError):
                text = f"no run at {request.path}"
            return _jsonrpc_error(run.status, -32001, str(text))
        name = request.match_info["server"]
        live = self.live
        if live is not None and live.takes(run, name):
            return await live.forward(request, run, name)
        replay = run.mcp.server(name)
        if replay is None:
            recorded = ", ".join(sorted(run.scenario.mcp)) or "none"
            return _jsonrpc_error(404, -32601, f"run {run.id}: scenario {run.scenario.name} recorded no MCP server "
                                  f"{name!r}; its MCP servers: {recorded}")
        try:
            if request.method == "HEAD":  # what a GET would open, without holding a stream open
                return web.Response(status=200 if replay.stream is not None else 405)
            if request.method == "GET":
                return await self._stream(request, run, replay)
            if request.method == "DELETE":
                session_id = request.headers.get(SESSION_HEADER, "")
                self._deleted.setdefault((run.id, session_id), asyncio.Event()).set()
                return web.Response(status=200)
            return await self._post(request, run, replay)
        finally:
            hub = self.server.hub
            if hub.watched:
                hub.touched(run.id)

    async def _post(self, request: web.Request, run: Run, replay: McpReplay) -> web.StreamResponse:
        body = await read_body(request, MAX_BODY)
        if body is None:
            return _jsonrpc_error(413, INVALID_REQUEST, f"Invalid Request: the body is over {MAX_BODY} bytes")
        try:
            message = msgspec.json.decode(body)
        except msgspec.DecodeError:
            return _jsonrpc_error(400, PARSE_ERROR, "Parse error: the body is not JSON")
        except RecursionError:
            return _jsonrpc_error(400, PARSE_ERROR, f"Parse error: {TOO_DEEP}")
        if not isinstance(message, dict | list) or message == []:
            return _jsonrpc_error(400, INVALID_REQUEST, "Invalid Request: expected a JSON-RPC message or batch")
        session = header_session(request.headers, self.server.session_headers)
        session_id = request.headers.get(SESSION_HEADER)
        batch = message if isinstance(message, list) else [message]
        protocol = request.headers.get(PROTOCOL_HEADER)
        live = self.live
        if live is not None and is_request(message) and live.goes_live(run, replay.server):
            assert isinstance(message, dict)
            answer = replay.answer(message, session, session_id, protocol, live=True)
            if answer.miss is not None:  # new_episodes: the server answers it, and the answer is kept
                replay.went_live(message, session, session_id)
                return await live.miss(request, run, replay.server, body)
            given = replay.session_id(answer) if message["method"] == "initialize" else session_id
            if given and message["method"] == "initialize":
                live.saw_initialize(run, replay.server, given, message)
            return await self._write(request, answer, {SESSION_HEADER: given} if given else {})
        answers = [replay.answer(m, session, session_id, protocol) for m in batch]
        headers: dict[str, str] = {}
        for sent, answer in zip(batch, answers, strict=True):
            if is_request(sent) and sent["method"] == "initialize":
                given = replay.session_id(answer)
                if given:
                    headers[SESSION_HEADER] = given
                    self._deleted.pop((run.id, given), None)  # a new session under a recorded id: not deleted
            if log.isEnabledFor(logging.INFO) and is_request(sent):
                log.info("%s mcp %s %s: %s", run.id, replay.server, sent["method"],
                         answer.miss.why if answer.miss else "as recorded")
        if session_id and SESSION_HEADER not in headers:
            headers[SESSION_HEADER] = session_id
        if not any(is_request(m) for m in batch):
            return web.Response(status=202, headers=headers)
        if isinstance(message, dict):
            return await self._write(request, answers[0], headers)
        out = [m for a in answers for m in a.messages if "method" not in m]
        return web.Response(body=msgspec.json.encode(out), content_type="application/json", headers=headers)

    async def _write(self, request: web.Request, answer: Answer, headers: dict[str, str]) -> web.StreamResponse:
        if not answer.sse:
            reply = next((m for m in reversed(answer.messages) if "method" not in m), None)
            status = answer.status if answer.status < 400 or reply is None else 200
            return web.Response(status=status, body=msgspec.json.encode(reply), content_type="application/json",
                                headers=headers)
        response = web.StreamResponse(status=answer.status, headers={
            **headers, "Content-Type": "text/event-stream", "Cache-Control": "no-cache, no-transform"})
        await response.prepare(request)
        for sent in answer.messages:
            await response.write(b"event: message\ndata: " + msgspec.json.encode(sent) + b"\n\n")
        await response.write_eof()
        return response

    async def _stream(self, request: web.Request, run: Run, replay: McpReplay) -> web.StreamResponse:
        recorded = replay.stream
        if recorded is None:
            return web.Response(status=405, headers={"Allow": "POST, DELETE"})
        session_id = request.headers.get(SESSION_HEADER, "")
        headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache, no-transform"}
        if session_id:
            headers[SESSION_HEADER] = session_id
        response = web.StreamResponse(status=200, headers=headers)
        await response.prepare(request)
        for sent in recorded.response:
            await response.write(b"event: message\ndata: " + msgspec.json.encode(sent) + b"\n\n")
        deleted = self._deleted.setdefault((run.id, session_id), asyncio.Event())
        # Held as the server held it, until the session ends, the server stops or the client leaves.
        waits = [asyncio.ensure_future(self._closing.wait()), asyncio.ensure_future(deleted.wait())]
        transport = request.transport
        try:
            while transport is not None and not transport.is_closing():
                done, _ = await asyncio.wait(waits, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
                if done:
                    break
        finally:
            for wait in waits:
                wait.cancel()
        return response
