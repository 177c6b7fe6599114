"""`mockllm mcp-bridge URL`: a stdio MCP server that forwards every message to a Streamable HTTP one.

An agent that starts its MCP servers as commands (`command` + `args` in its configuration) replays
by starting this instead, with the URL of the server it replays (`…/runs/{run}/mcp/NAME`, or
`mockllm record`'s `…/mcp/NAME` to record). Each line on stdin is one JSON-RPC message, POSTed to
URL as it arrives (requests concurrently, as a client's transport sends them); each answer's
messages (a JSON body, or every event of an SSE one) are written to stdout, one per line. The
`Mcp-Session-Id` an `initialize` answer gives is sent with every later message, and the session
is ended (DELETE) when stdin closes. `--header NAME:VALUE` adds a header to every request (the
calling session's `x-mockllm-session`, an `Authorization` to forward).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any

import aiohttp
import msgspec

from mockllm.mcp.jsonrpc import PROTOCOL_HEADER, SESSION_HEADER, error, is_request, protocol_of
from mockllm.wire.sse_reader import SSEReader


class Bridge:
    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.url = url
        self.headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
                        **headers}
        self._out = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    async def _write(self, messages: list[Any]) -> None:
        async with self._out:
            for message in messages:
                sys.stdout.buffer.write(msgspec.json.encode(message) + b"\n")
            sys.stdout.buffer.flush()

    async def send(self, http: aiohttp.ClientSession, message: Any) -> None:
        """POST one message and write what comes back; a request the server could not answer gets an error."""
        if isinstance(message, dict) and message.get("method") == "initialize":
            self.headers.pop(SESSION_HEADER, None)
        headers = {**self.headers, **_modern_headers(message)}
        try:
            async with http.post(self.url, data=msgspec.json.encode(message), headers=headers) as response:
                given = response.headers.get(SESSION_HEADER)
                if given and isinstance(message, dict) and message.get("method") == "initialize":
                    self.headers[SESSION_HEADER] = given
                if response.status == 202:
                    return
                if response.headers.get("Content-Type", "").startswith("text/event-stream"):
                    reader = SSEReader()
                    async for piece in response.content.iter_any():
                        await self._write(_decoded(reader.feed(piece)))
                    await self._write(_decoded(reader.close()))
                    return
                body = await response.read()
                try:
                    answer = msgspec.json.decode(body) if body else None
                except msgspec.DecodeError:
                    answer = None
                if answer is None:
                    raise aiohttp.ClientResponseError(response.request_info, (), status=response.status,
                                                      message=body[:200].decode(errors="replace"))
                await self._write(answer if isinstance(answer, list) else [answer])
        except (aiohttp.ClientError, OSError) as exc:
            if is_request(message):
                await self._write([error(message["id"], -32000, f"mockllm mcp-bridge: {self.url}: {exc}")])

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as http:
            while line := await reader.readline():
                if not line.strip():
                    continue
                try:
                    message = msgspec.json.decode(line)
                except msgspec.DecodeError:
                    await self._write([error(None, -32700, "Parse error: a line on stdin is not JSON")])
                    continue
                if isinstance(message, dict) and message.get("method") == "initialize":
                    await self.send(http, message)  # its session id is needed by what follows
                    version = (message.get("params") or {}).get("protocolVersion")
                    if isinstance(version, str):
                        self.headers[PROTOCOL_HEADER] = version
                    continue
                task = asyncio.create_task(self.send(http, message))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            if SESSION_HEADER in self.headers:
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with http.delete(self.url, headers=self.headers):
                        pass
        return 0


def _modern_headers(message: Any) -> dict[str, str]:
    """The headers a 2026-07-28 request carries over HTTP (its version, method and name), as the SDK's
    HTTP client sends them: a stdio client puts the version in `_meta` only."""
    version = protocol_of(message)
    if version is None or not isinstance(message, dict) or not isinstance(message.get("method"), str):
        return {}
    headers = {PROTOCOL_HEADER: version, "mcp-method": message["method"]}
    params = message.get("params")
    name = (params.get("name") or params.get("uri")) if isinstance(params, dict) else None
    if isinstance(name, str) and message["method"] in ("tools/call", "prompts/get", "resources/read"):
        headers["mcp-name"] = name
    return headers


def _decoded(events: list[tuple[str | None, bytes]]) -> list[Any]:
    out = []
    for _, data in events:
        if data.strip():
            with contextlib.suppress(msgspec.DecodeError):
                out.append(msgspec.json.decode(data))
    return out


def parse_header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise ValueError(f"--header {text!r}: expected NAME:VALUE")
    return name.strip(), value.strip()


def run_bridge(url: str, headers: list[str]) -> int:
    try:
        pairs = dict(parse_header(h) for h in headers)
    except ValueError as exc:
        print(f"mockllm mcp-bridge: {exc}", file=sys.stderr)
        return 2
    if not url.startswith(("http://", "https://")):
        print(f"mockllm mcp-bridge: {url!r} is not an http:// or https:// URL", file=sys.stderr)
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(Bridge(url, pairs).run())
    return 0
