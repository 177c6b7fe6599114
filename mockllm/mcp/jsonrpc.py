"""The few JSON-RPC and MCP names replay and recording need, and the key a call is matched by."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

# Methods whose answer describes the server, not the work it did: replayed as often as asked.
HANDSHAKE = ("initialize", "server/discover")
PING = "ping"
# The 2026-07-28 protocol's per-request envelope carries the client's identity in `_meta`: part of
# the request, never of what the call asks for.
META = "_meta"

SESSION_HEADER = "mcp-session-id"
PROTOCOL_HEADER = "mcp-protocol-version"

# JSON-RPC error codes.
METHOD_NOT_FOUND = -32601
INVALID_REQUEST = -32600
PARSE_ERROR = -32700
# A server error of mockllm's own (-32000 to -32099 are the implementation's): no recorded call matches.
UNRECORDED = -32001

Mask = Callable[[str], str]

_encoder = msgspec.json.Encoder(order="sorted")


# Where a 2026-07-28 request names its protocol version (it has no handshake to agree on one).
META_VERSION = "io.modelcontextprotocol/protocolVersion"


def protocol_of(message: Any, header: str | None = None) -> str | None:
    """The protocol version a message is spoken in: the MCP-Protocol-Version header, else its `_meta`'s."""
    if header:
        return header
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get(META) if isinstance(params, dict) else None
    version = meta.get(META_VERSION) if isinstance(meta, dict) else None
    return version if isinstance(version, str) else None


def is_list(method: str) -> bool:
    """`tools/list`, `resources/list`, `resources/templates/list`, `prompts/list`, ...: the server's catalogue."""
    return method.endswith("/list")


def is_request(message: Any) -> bool:
    return isinstance(message, dict) and isinstance(message.get("method"), str) and "id" in message


def is_notification(message: Any) -> bool:
    return isinstance(message, dict) and isinstance(message.get("method"), str) and "id" not in message


def is_answer(message: Any) -> bool:
    """A response or an error (the client answering a server's request, or a server answering one)."""
    return isinstance(message, dict) and "method" not in message and ("result" in message or "error" in message)


def asked(params: Any) -> Any:
    """What a call asks for: its parameters without `_meta` (the client's identity, progress tokens)."""
    if isinstance(params, dict):
        return {k: v for k, v in params.items() if k != META}
    return params


def canonical(value: Any) -> str:
    """`value` as JSON with sorted keys: equal values, equal texts."""
    return _encoder.encode(value).decode()


def call_key(method: str, params: Any, mask: Mask | None = None) -> str:
    """The key a call is matched by: its method and what it asks for, masked as model inputs are."""
    text = canonical(asked(params))
    return f"{method} {mask(text) if mask is not None else text}"


def describe(method: str, params: Any, limit: int = 300) -> str:
    """A call in words for a person: `tools/call count {"step": 2}`, `resources/read memo://x`."""
    what = asked(params)
    if isinstance(what, dict):
        if method == "tools/call" and isinstance(what.get("name"), str):
            text = f"{method} {what['name']} {canonical(what.get('arguments', {}))}"
        elif method == "resources/read" and isinstance(what.get("uri"), str):
            text = f"{method} {what['uri']}"
        elif method == "prompts/get" and isinstance(what.get("name"), str):
            text = f"{method} {what['name']} {canonical(what.get('arguments', {}))}"
        else:
            text = f"{method} {canonical(what)}" if what else method
    else:
        text = method if what is None else f"{method} {canonical(what)}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error(message_id: Any, code: int, text: str, data: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": text}
    if data is not None:
        body["data"] = data
    return {"jsonrpc": "2.0", "id": message_id, "error": body}
