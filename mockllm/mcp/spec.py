"""`--mcp NAME=URL` and `--mcp NAME=stdio:COMMAND ARGS…`: which MCP servers a recording proxies."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from mockllm.mcp.log import Transport, check_name

STDIO = "stdio:"


@dataclass(frozen=True, slots=True)
class McpSpec:
    name: str
    url: str | None = None  # a Streamable HTTP server's endpoint
    command: tuple[str, ...] = ()  # a stdio server's command line, shell-split

    @property
    def transport(self) -> Transport:
        return "stdio" if self.command else "http"


def parse_mcp(text: str) -> McpSpec:
    """`NAME=URL` (http:// or https://) or `NAME=stdio:COMMAND ARGS…`; a ValueError says what is expected."""
    name, sep, target = text.partition("=")
    usage = "expected NAME=URL (a Streamable HTTP MCP endpoint) or NAME=stdio:COMMAND ARGS"
    if not sep or not name:
        raise ValueError(f"--mcp {text!r}: {usage}")
    try:
        check_name(name)
    except ValueError as exc:
        raise ValueError(f"--mcp {text!r}: {exc}") from None
    if target.startswith(STDIO):
        try:
            command = tuple(shlex.split(target[len(STDIO):]))
        except ValueError as exc:
            raise ValueError(f"--mcp {text!r}: the command does not split as a shell would: {exc}") from None
        if not command:
            raise ValueError(f"--mcp {text!r}: stdio: names no command")
        return McpSpec(name, command=command)
    if not target.startswith(("http://", "https://")):
        raise ValueError(f"--mcp {text!r}: {usage}")
    return McpSpec(name, url=target)


def parse_all(texts: tuple[str, ...] | list[str]) -> list[McpSpec]:
    """Every `--mcp`, each name once (a ValueError names one given twice)."""
    specs = [parse_mcp(t) for t in texts]
    names = [s.name for s in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"--mcp names server(s) {', '.join(twice)} more than once")
    return specs
