"""MCP test helpers: the counter server (`tests/mcp_counter_server.py`) as a process, and the
official SDK's client in either protocol era. Nothing here knows mockllm."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
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


async def agent_loop(base_url: str, mcp_url: str, topics: list[str], *, mode: str = "auto",
                     session: str = "agent", system: str = "You are the counter",
                     change: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None) -> list[str]:
    """An agent that takes its tool calls from the model and runs them over MCP: for each `Topics: …`
    turn, ask the model (offering the MCP server's tools), run every tool call it makes with the MCP
    client, send the results back, until the model answers in words. Returns the model's answers.
    `change(tool, arguments)`: the agent's code changed how it calls a tool (what a replay must catch)."""
    from openai import AsyncOpenAI

    headers = {"x-mockllm-session": session}
    answers = []
    async with AsyncOpenAI(base_url=base_url, api_key="sk-test", default_headers=headers, max_retries=0) as model, \
            mcp_client(mcp_url, mode, headers) as mcp:
        listed = (await mcp.list_tools()).tools
        tools: list[Any] = [{"type": "function", "function": {"name": t.name, "description": t.description or "",
                                                              "parameters": t.input_schema}} for t in listed]
        messages: list[Any] = [{"role": "system", "content": system}]
        for topic in topics:
            messages.append({"role": "user", "content": f"Topics: {topic}"})
            for _ in range(4):
                reply = (await model.chat.completions.create(model="scripted", messages=messages,
                                                             tools=tools)).choices[0].message
                messages.append(reply.model_dump(exclude_none=True))
                if not reply.tool_calls:
                    answers.append(reply.content or "")
                    break
                for call in reply.tool_calls:
                    arguments = json.loads(call.function.arguments)
                    if change is not None:
                        arguments = change(call.function.name, arguments)
                    result = await mcp.call_tool(call.function.name, arguments)
                    text = " ".join(c.text for c in result.content if hasattr(c, "text"))
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    return answers
