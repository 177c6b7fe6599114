"""NDJSON framing (Ollama streams one JSON object a line, `application/x-ndjson`).

A line is one wire event: what `cut_after` counts and what a stream decoder is fed (as a data-only
event). The reader keeps an unfinished line between the pieces a proxy sees.
"""

from __future__ import annotations

from mockllm.wire.dialect import SSEEvent

NDJSON = "application/x-ndjson"


def line(payload: bytes) -> bytes:
    """One object as one line: the payload must be compact JSON (no newline inside)."""
    return payload + b"\n"


class NDJSONReader:
    """Splits a live NDJSON body into (None, line) events as its bytes arrive; blank lines are skipped."""

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, piece: bytes) -> list[SSEEvent]:
        text = self._tail + piece
        end = text.rfind(b"\n")
        if end < 0:
            self._tail = text
            return []
        self._tail = text[end + 1 :]
        return [(None, row.strip()) for row in text[:end].split(b"\n") if row.strip()]

    def close(self) -> list[SSEEvent]:
        """A last line with no newline is still read."""
        tail, self._tail = self._tail.strip(), b""
        return [(None, tail)] if tail else []
