"""SSE framing, the one place every dialect's events are framed.

Every event ends with a blank line: the Python SDKs drop a final event that lacks one.
"""

from __future__ import annotations

from typing import Any

import msgspec

# A template is an event encoded once with holes where its values go, filled per event by one
# `%` (a bytes format) or, for a run of deltas of one shape, by joining its pieces around each
# value. A stream holds thousands of events of a few shapes: filling costs a fraction of building
# and encoding each payload, and the shape is still written once, as the payload it encodes.
# Holes encode as bare control bytes, which no JSON encoding of a value holds (strings escape them).
HOLE = msgspec.Raw(b"\x00")  # an encoded JSON value (bytes)
NUMBER = msgspec.Raw(b"\x01")  # an int

_encode = msgspec.json.encode


def data_event(payload: bytes) -> bytes:
    """An event with only a `data:` line (OpenAI chat completions)."""
    return b"data: " + payload + b"\n\n"


def named_event(name: str, payload: bytes) -> bytes:
    """An `event:` line and a `data:` line (Anthropic Messages, OpenAI Responses)."""
    return b"event: " + name.encode() + b"\ndata: " + payload + b"\n\n"


def json_template(payload: Any) -> bytes:
    """`payload` itself as a bytes format (a value an event carries, such as an output item)."""
    return _format(_encode(payload))


def named_template(name: str, payload: Any) -> bytes:
    """`named_event` of `payload` as a bytes format: `%b` at each HOLE, `%d` at each NUMBER."""
    return _format(named_event(name, _encode(payload)))


def named_pieces(name: str, payload: Any) -> list[bytes]:
    """`named_event` of `payload` cut at its holes (HOLE or NUMBER): an event is its pieces joined
    around each hole's bytes."""
    return named_event(name, _encode(payload)).replace(b"\x01", b"\x00").split(b"\x00")


def run_pieces(head: bytes, values: list[bytes], tail: bytes) -> list[bytes]:
    """The events `head + value + tail` for each of `values` (encoded JSON), as pieces that joined
    are those events: one join, where a bytes object per event cost several times more (a run of
    deltas is the bulk of every stream). The pieces go into the frames as they are (`Frames.run`):
    `head + … + tail` copied the whole run twice more before the frames were joined."""
    return [head, (tail + head).join(values), tail]


def _format(event: bytes) -> bytes:
    return event.replace(b"%", b"%%").replace(b"\x00", b"%b").replace(b"\x01", b"%d")


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
