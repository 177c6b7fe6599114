"""SSE framing, the one place every dialect's events are framed.

Every event ends with a blank line: the Python SDKs drop a final event that lacks one.
"""

from __future__ import annotations


def data_event(payload: bytes) -> bytes:
    """An event with only a `data:` line (OpenAI chat completions)."""
    return b"data: " + payload + b"\n\n"


def named_event(name: str, payload: bytes) -> bytes:
    """An `event:` line and a `data:` line (Anthropic Messages, OpenAI Responses)."""
    return b"event: " + name.encode() + b"\ndata: " + payload + b"\n\n"


def iter_events(body: bytes) -> list[tuple[str | None, bytes]]:
    """Split a whole SSE body into (event name or None, data) pairs; comments and empty events are skipped.

    Lines may end in `\\r\\n`, `\\r` or `\\n`; several `data:` lines join with `\\n` (as the SDKs parse).
    """
    out: list[tuple[str | None, bytes]] = []
    name: str | None = None
    data: list[bytes] = []
    for line in body.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"):
        if not line:
            if data:
                out.append((name, b"\n".join(data)))
            name, data = None, []
            continue
        if line.startswith(b":"):
            continue
        field, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if field == b"data":
            data.append(value)
        elif field == b"event":
            name = value.decode()
    if data:  # a last event with no blank line: kept here, unlike the SDKs, so a recorder loses nothing
        out.append((name, b"\n".join(data)))
    return out
