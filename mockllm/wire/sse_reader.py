"""Split a live SSE byte stream into events as its bytes arrive (the recorder reads while it forwards).

`wire.sse.iter_events` parses a whole body; a proxy sees the body in arbitrary pieces, so this keeps
the unfinished tail between pieces. Line ends are normalized as the SDKs read them (`\\r\\n`, `\\r`,
`\\n`); a `\\r` at the end of a piece waits for the next one, which may start with its `\\n`.
"""

from __future__ import annotations

from mockllm.wire.sse import iter_events

Event = tuple[str | None, bytes]


class SSEReader:
    def __init__(self) -> None:
        self._tail = b""  # normalized bytes after the last complete event
        self._cr = False  # the previous piece ended in `\r`

    def feed(self, piece: bytes) -> list[Event]:
        """The events that `piece` completes."""
        if self._cr and piece.startswith(b"\n"):
            piece = piece[1:]  # the second half of a `\r\n` already counted as a line end
        self._cr = piece.endswith(b"\r")
        text = self._tail + piece.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        end = text.rfind(b"\n\n")
        if end < 0:
            self._tail = text
            return []
        self._tail = text[end + 2 :]
        return iter_events(text[: end + 2])

    def close(self) -> list[Event]:
        """What is left when the stream ends: a last event without its blank line is still read."""
        tail, self._tail = self._tail, b""
        return iter_events(tail) if tail.strip() else []
