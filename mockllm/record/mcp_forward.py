"""Forwarding one HTTP request to a Streamable HTTP MCP server, and keeping what it said.

The client's headers go upstream as they came (hop-by-hop ones aside, and `Accept-Encoding`, so the
answer can be read as it streams), `Authorization` included; none is written. A JSON answer is
read whole and sent back; an SSE answer (a POST's, or the GET stream the server opens for its own
messages) is sent on piece by piece as it arrives, its events read on the way. The exchange is
written when the answer ends, however it ends (the client leaving a held GET stream included).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import aiohttp
import msgspec
from aiohttp import web

from mockllm.mcp.jsonrpc import SESSION_HEADER
from mockllm.mcp.log import Http
from mockllm.record.mcp_sink import ExchangeSink
from mockllm.wire.sse_reader import SSEReader

log = logging.getLogger("mockllm.record.mcp")

# Not forwarded either way: the connection's own, and the body's framing (aiohttp sets its own).
HOP_BY_HOP = frozenset(("host", "content-length", "connection", "keep-alive", "transfer-encoding", "upgrade",
                        "te", "trailer", "proxy-connection", "proxy-authorization", "accept-encoding",
                        "content-encoding"))
SSE = "text/event-stream"


def decode(body: bytes) -> Any:
    """A JSON-RPC body, or None when it is not JSON (forwarded all the same, not recorded)."""
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None


def messages_of(value: Any) -> list[Any]:
    """A JSON answer's messages: a batch's one by one."""
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def sse_messages(events: list[tuple[str | None, bytes]]) -> list[Any]:
    """The JSON-RPC messages of SSE events (priming events with no data carry none)."""
    out = []
    for _, data in events:
        if data.strip():
            message = decode(data)
            if message is not None:
                out.append(message)
    return out


async def forward_http(request: web.Request, client: aiohttp.ClientSession, url: str,
                       sink: ExchangeSink, session_id: str | None = None,
                       body: bytes | None = None) -> web.StreamResponse:
    """Forward `request` (POST, GET or DELETE) to the MCP endpoint `url` and record the exchange;
    `session_id`: the upstream's Mcp-Session-Id to send instead of the client's (new_episodes);
    `body`: the body where the caller has read it already (the replay server reads it bounded)."""
    if body is None:
        body = await request.read() if request.method == "POST" else b""
    headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
    if session_id is not None:
        headers = {k: v for k, v in headers.items() if k.lower() != SESSION_HEADER}
        headers[SESSION_HEADER] = session_id
    method: Http | None = request.method if request.method in ("POST", "GET", "DELETE") else None  # type: ignore[assignment]
    parsed = decode(body) if body else None
    exchange = sink.begin(method, request.headers, parsed) if method and (method != "POST" or parsed) else None
    started = time.perf_counter()
    try:
        upstream = await client.request(request.method, url, data=body or None, headers=headers,
                                        allow_redirects=False)
    except (aiohttp.ClientError, OSError) as exc:
        log.warning("MCP upstream %s unreachable: %s", url, exc)
        return web.json_response({"jsonrpc": "2.0", "id": None, "error": {
            "code": -32000, "message": f"mockllm record: the MCP server at {url} is unreachable: {exc}"}},
            status=502)
    given = upstream.headers.get(SESSION_HEADER)
    answer_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
    if session_id is not None:  # the client keeps the session it has
        answer_headers.pop(SESSION_HEADER, None)
        given = None
    messages: list[Any] = []
    sse = upstream.headers.get("Content-Type", "").lower().startswith(SSE)
    try:
        if not sse:
            payload = await upstream.read()
            messages = messages_of(decode(payload)) if payload else []
            return web.Response(status=upstream.status, body=payload, headers=answer_headers)
        response = web.StreamResponse(status=upstream.status, headers=answer_headers)
        if exchange is not None and method == "GET":
            sink.streaming(exchange, messages, upstream.status)
        await response.prepare(request)
        reader = SSEReader()
        async for piece in upstream.content.iter_any():
            messages.extend(sse_messages(reader.feed(piece)))  # in place: `streaming` holds this list
            await response.write(piece)
        messages.extend(sse_messages(reader.close()))
        await response.write_eof()
        return response
    finally:
        upstream.release()
        if exchange is not None:
            sink.end(exchange, upstream.status, sse, messages, given, started)
