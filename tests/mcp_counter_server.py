"""A FastMCP server for the MCP tests: a counter tool (its answer drifts), an echo tool, a resource and
a prompt. Run as `python tests/mcp_counter_server.py http` (Streamable HTTP at /mcp on a free
loopback port, printing `listening PORT` once bound) or `python tests/mcp_counter_server.py stdio`.
It imports nothing of mockllm."""

from __future__ import annotations

import asyncio
import socket
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

server = MCPServer("counter", log_level="WARNING")
_count = 0


@server.tool()
def count(step: int = 1) -> int:
    """Add `step` to the counter and return it: a tool whose answer drifts between runs."""
    global _count
    _count += step
    return _count


@server.tool()
def echo(text: str) -> str:
    """Say `text` back."""
    return f"echo: {text}"


@server.resource("memo://greeting")
def greeting() -> str:
    """A fixed text."""
    return "hello from the counter server"


@server.prompt()
def review(topic: str) -> str:
    """A prompt with one argument."""
    return f"Please review {topic}."


async def serve_http() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections wait in the backlog until uvicorn serves: the port is usable once printed
    print(f"listening {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        asyncio.run(serve_http())
