"""One recorded MCP server in words (`mockllm inspect`) and as JSON (`inspect --json`), and what
`mockllm check` doubts in it."""

from __future__ import annotations

from collections import Counter
from typing import Any

from mockllm.mcp.jsonrpc import HANDSHAKE, describe, is_request
from mockllm.mcp.log import McpLog


def _calls(log: McpLog) -> Counter[str]:
    counted: Counter[str] = Counter()
    for exchange in log.exchanges:
        method = exchange.method
        if method is not None and method not in HANDSHAKE and is_request(exchange.request):
            counted[describe(method, exchange.request.get("params"), limit=100)] += 1
    return counted


def _handshakes(log: McpLog) -> list[str]:
    return sorted({e.method for e in log.exchanges if e.method in HANDSHAKE and e.method is not None})


def describe_log(log: McpLog) -> list[str]:
    """A header line, then each distinct call with how often it was recorded."""
    sessions = {e.mcp_session for e in log.exchanges if e.mcp_session is not None}
    streams = sum(1 for e in log.exchanges if e.http == "GET")
    handshakes = ", ".join(_handshakes(log)) or "none"
    lines = [f"  MCP server {log.server} <- {log.file}  ({log.header.transport}, {len(log.exchanges)} exchange(s), "
             f"{len(sessions)} MCP session(s), handshake {handshakes}"
             + (f", {streams} server stream(s)" if streams else "") + ")"]
    for what, times in _calls(log).items():
        lines.append(f"    {what}" + (f"  x{times}" if times > 1 else ""))
    return lines


def log_to_json(log: McpLog) -> dict[str, Any]:
    return {"server": log.server, "file": log.file, "transport": log.header.transport,
            "exchanges": len(log.exchanges), "handshake": _handshakes(log),
            "calls": [{"call": what, "times": times} for what, times in _calls(log).items()]}


def doubts(log: McpLog) -> list[tuple[int, str]]:
    """(line, message) for what loads but will not replay as the agent expects: a request with no
    recorded answer, an error status."""
    out = []
    for exchange in log.exchanges:
        if exchange.http != "POST":
            continue
        request = exchange.request
        if exchange.status >= 400:
            out.append((exchange.line, f"the server answered HTTP {exchange.status}: a replay answers the same"))
        elif is_request(request) and exchange.answer is None:
            out.append((exchange.line, f"request {describe(request['method'], request.get('params'), limit=100)} "
                        f"(id {request['id']!r}) has no recorded answer: replay cannot serve it"))
    return out
