"""MCP test helpers: the counter server (`tests/mcp_counter_server.py`) as a process, and the
official SDK's client in either protocol era. Nothing here knows mockllm."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

SERVER = Path(__file__).with_name("mcp_counter_server.py")
STDIO_COMMAND = f"{sys.executable} {SERVER} stdio"


@contextlib.contextmanager
def counter_server() -> Iterator[str]:
    """The counter server over Streamable HTTP: its endpoint URL (`…/mcp`); stopped on exit."""
    process = subprocess.Popen([sys.executable, str(SERVER), "http"], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("listening "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}/mcp"
    finally:
        process.terminate()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


@contextlib.asynccontextmanager
async def mcp_client(url: str, mode: str = "auto", headers: dict[str, str] | None = None) -> AsyncIterator[Client]:
    """The 2.x SDK's client at `url`: `mode="auto"` speaks 2026-07-28 (`server/discover`, no session),
    `mode="legacy"` the 2025 handshake (`initialize`, `Mcp-Session-Id`), as 1.x clients do."""
    async with httpx2.AsyncClient(headers=headers or {}, timeout=30) as http, \
            Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        yield client


async def use_counter(client: Client) -> dict[str, Any]:
    """One pass over everything the counter server offers: what a replay must give back the same."""
    tools = sorted(t.name for t in (await client.list_tools()).tools)
    first = await client.call_tool("count", {"step": 2})
    second = await client.call_tool("count", {"step": 2})
    echo = await client.call_tool("echo", {"text": "hi"})
    resource = await client.read_resource("memo://greeting")
    prompt = await client.get_prompt("review", {"topic": "the plan"})
    prompts = [p.name for p in (await client.list_prompts()).prompts]
    tools_again = sorted(t.name for t in (await client.list_tools()).tools)
    return {"tools": tools, "counts": [first.structured_content, second.structured_content],
            "echo": echo.content[0].text,  # type: ignore[union-attr]
            "resource": resource.contents[0].text,  # type: ignore[union-attr]
            "prompt": prompt.messages[0].content.text,  # type: ignore[union-attr]
            "prompts": prompts, "tools_again": tools_again}
