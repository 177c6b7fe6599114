"""AWS's event-stream framing (`application/vnd.amazon.eventstream`), as Bedrock streams Converse.

A message is a prelude (total length, headers length: big-endian uint32s) and its CRC32, the
headers (each: name length byte, name, value type 7 = string, value length uint16, value), the
payload, and a CRC32 of everything before it. Bedrock's events carry three string headers:
`:event-type` (`messageStart`, `contentBlockDelta`, ...), `:content-type` (`application/json`) and
`:message-type` (`event`, or `exception` with `:exception-type` naming the error).

Encoded here, not with botocore: botocore only decodes event streams (`botocore.eventstream` has
a parser and a buffer, no encoder in any public name), and replay must not need botocore at all.
The encoder is a few lines of `struct` and `zlib.crc32`; the tests check its bytes with botocore's
own parser. Reading a live stream (record mode) does use botocore's `EventStreamBuffer`, which
checks both CRCs: record mode needs botocore to sign anyway.
"""

from __future__ import annotations

from struct import Struct
from zlib import crc32

from mockllm.wire.reply import Events, Frames

EVENT_STREAM = "application/vnd.amazon.eventstream"

_PRELUDE = Struct(">II")
_CRC = Struct(">I")
_LENGTH = Struct(">I")


def header(name: str, value: str) -> bytes:
    """One string header, encoded."""
    key, text = name.encode(), value.encode()
    return bytes([len(key)]) + key + b"\x07" + len(text).to_bytes(2, "big") + text


def event_headers(event_type: str) -> bytes:
    """The headers of an event message of `event_type` (encoded once per type, by the caller)."""
    return (header(":event-type", event_type) + header(":content-type", "application/json")
            + header(":message-type", "event"))


def exception_headers(exception_type: str) -> bytes:
    """The headers of an exception message (botocore raises an EventStreamError naming the type)."""
    return (header(":exception-type", exception_type) + header(":content-type", "application/json")
            + header(":message-type", "exception"))


def message(headers: bytes, payload: bytes) -> bytes:
    """One framed message: prelude, its CRC, headers, payload, the message CRC."""
    prelude = _PRELUDE.pack(16 + len(headers) + len(payload), len(headers))
    head = prelude + _CRC.pack(crc32(prelude)) + headers
    return head + payload + _CRC.pack(crc32(payload, crc32(head)))


def split(joined: bytes | memoryview) -> list[bytes]:
    """Framed messages joined, split apart again by their lengths."""
    out = []
    at, end = 0, len(joined)
    while at < end:
        (total,) = _LENGTH.unpack_from(joined, at)
        out.append(bytes(joined[at : at + total]))
        at += total
    return out


class EventStreamEvents(Events):
    """A rendered stream's messages, joined: split by their length prefixes (a binary payload has
    no delimiter to split on, as SSE's blank line is)."""

    __slots__ = ()

    def events(self) -> tuple[bytes, ...]:
        if self._split is None:
            self._split = tuple(split(self.joined))
            assert len(self._split) == self.length, "each frame is one message"
        return self._split

    def first_and_rest(self) -> tuple[bytes, memoryview]:
        (total,) = _LENGTH.unpack_from(self.joined, 0)
        return self.joined[:total], memoryview(self.joined)[total:]


class EventStreamFrames(Frames):
    """Frames that are event-stream messages (`EventStreamEvents` when joined)."""

    __slots__ = ()

    def events(self) -> Events:
        return EventStreamEvents(b"".join(self.pieces), len(self.sources), b"")
