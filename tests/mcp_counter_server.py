"""A FastMCP server for the MCP tests: a counter tool (its answer drifts), an echo tool, a resource and
a prompt. Run as `python tests/mcp_counter_server.py http PORT` (Streamable HTTP at /mcp, printing
`listening PORT` once bound) or `python tests/mcp_counter_server.py stdio`."""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("counter")
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


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
