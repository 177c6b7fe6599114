"""Shared fixtures and HTTP helpers: an in-process mockllm server on a free loopback port, admin calls.

Data paths (ROOT, RECORDINGS, CORPUS) and the corpus skip helpers live in `tests/logbuilder.py`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from mockllm.options import ServeOptions
from mockllm.server.running import RunningServer, load_source, start_server

StartServer = Callable[..., Awaitable[RunningServer]]


@pytest.fixture
async def serve() -> AsyncIterator[StartServer]:
    """`await serve(path, **options)` starts a server on 127.0.0.1; all are stopped after the test."""
    started: list[RunningServer] = []

    async def start(path: Path, **options: object) -> RunningServer:
        settings = ServeOptions(host="127.0.0.1", port=0, **options)  # type: ignore[arg-type]
        server = await start_server(load_source(path, settings), settings)
        started.append(server)
        return server

    yield start
    for server in started:
        await server.close()


async def http(method: str, url: str, json: object = None) -> tuple[int, object]:
    """One admin call with a plain HTTP client: (status, decoded JSON body)."""
    import aiohttp

    async with aiohttp.ClientSession() as session, session.request(method, url, json=json) as response:
        return response.status, await response.json(content_type=None)


async def new_run(base_url: str, scenario: str, **extra: Any) -> tuple[str, str]:
    """POST /_mockllm/runs (with `extra` fields, e.g. cwd): the new run's id and base URL."""
    status, body = await http("POST", f"{base_url}/_mockllm/runs", {"scenario": scenario, **extra})
    assert status == 201 and isinstance(body, dict), body
    return body["run"], body["base_url"]


async def run_state(base_url: str, run: str) -> dict[str, Any]:
    """GET /_mockllm/runs/{run}: bindings, cursors, failures, journal."""
    status, body = await http("GET", f"{base_url}/_mockllm/runs/{run}")
    assert status == 200 and isinstance(body, dict)
    return body


def assert_mock_error(status: int, body: Any, headers: Any, expected_status: int, code: str) -> str:
    """Assert an error made by mockllm itself: OpenAI body, never retried. Returns its message."""
    assert status == expected_status, body
    assert headers["Content-Type"].startswith("application/json")
    assert headers["x-should-retry"] == "false"
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == code
    assert body["error"]["param"] is None
    assert isinstance(body["error"]["type"], str) and body["error"]["type"]
    message = body["error"]["message"]
    assert isinstance(message, str) and len(message) > 10
    return message


def sse_payloads(raw: bytes) -> list[Any]:
    """The SSE events of a whole stream body, decoded (`[DONE]` kept as the string)."""
    assert raw.endswith(b"\n\n") or raw == b"", raw[-80:]
    out = []
    for event in raw.split(b"\n\n")[:-1]:
        assert event.startswith(b"data: "), event
        data = event[len(b"data: "):]
        out.append(data.decode() if data == b"[DONE]" else json.loads(data))
    return out
