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

from collections.abc import Sequence
from functools import lru_cache
from itertools import repeat
from operator import add, itemgetter
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


# A stream's few other messages (a block's stop, the stop reason, usage) repeat from reply to reply:
# three CRCs each, kept rather than made again.
kept_message = lru_cache(maxsize=4096)(message)


class Leads:
    """Messages that share their headers and the head of their payload (a content block's deltas:
    `{"contentBlockIndex":N,"delta":{"text":` …), made in bulk and kept.

    Everything before a message's value depends only on the value's length: the prelude, its CRC,
    the headers, the payload's head, and the CRC state after them, made once per length
    (`_lengths`); a new value then costs one CRC over itself and the payload's tail. And a
    message is a function of its value alone, so each is kept (`_known`, bounded): fragments repeat
    (` the`, `,`, a recorded word), and a run of deltas is the bulk of every stream. A first render
    framed every delta at over ten times what chat completions' template join costs per delta; with
    the messages kept, a delta whose value was framed before costs two dict lookups. New values are
    framed with C-level maps, not a Python loop per delta.

    Servers in one process (the Python API runs each on a thread of its own) share the block heads'
    makers: what is kept is never emptied in place but replaced, and each call works on the
    dictionaries it started with, so another thread's replacing them cannot take a value from it.
    """

    __slots__ = ("_fixed", "_head", "_headers", "_known", "_lengths", "_tail")

    KEPT = 4096  # messages (and lengths) kept per block head; past it, they are dropped and kept afresh

    def __init__(self, headers: bytes, head: bytes, tail: bytes) -> None:
        self._headers = headers
        self._head = head
        self._tail = tail
        self._fixed = 16 + len(headers) + len(head) + len(tail)
        # value length -> (the message's bytes before the value, the CRC state after them)
        self._lengths: dict[int, tuple[bytes, int]] = {}
        self._known: dict[bytes, bytes] = {}  # value -> its whole message

    def _learn(self, values: list[bytes], known: dict[bytes, bytes]) -> None:
        """Frame each of `values` (new ones, distinct) and keep its message in `known`."""
        lengths = list(map(len, values))
        leads = self._lengths
        new = set(lengths).difference(leads)
        if new:
            if len(leads) + len(new) > self.KEPT:
                leads = self._lengths = {}
                new = set(lengths)
            headers, fixed = self._headers, self._fixed
            for length in new:
                prelude = _PRELUDE.pack(fixed + length, len(headers))
                lead = prelude + _CRC.pack(crc32(prelude)) + headers + self._head
                leads[length] = (lead, crc32(lead))
        found = list(map(leads.__getitem__, lengths))
        rests = list(map(add, values, repeat(self._tail)))
        crcs = map(_CRC.pack, map(crc32, rests, map(itemgetter(1), found)))
        known.update(zip(values, map(b"".join, zip(map(itemgetter(0), found), rests, crcs, strict=True)),
                         strict=True))

    def one(self, value: bytes) -> bytes:
        """The message holding `value` (encoded JSON) between the payload's head and tail."""
        known = self._known
        message = known.get(value)
        if message is None:
            if len(known) >= self.KEPT:
                known = self._known = {}
            self._learn([value], known)
            message = known[value]
        return message

    def many(self, values: list[bytes]) -> list[bytes]:
        """The messages for each of `values`, in order (joined once, with the rest of the stream's
        frames: `Frames.run`)."""
        known = self._known
        new = set(values).difference(known)
        if new:
            if len(known) + len(new) > self.KEPT:  # dropped: every value of this run is framed anew
                known = self._known = {}
                new = set(values)
            self._learn(list(new), known)
        return list(map(known.__getitem__, values))


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

    def first_size(self) -> int:
        (total,) = _LENGTH.unpack_from(self.buffer, 0)
        return int(total)


class EventStreamFrames(Frames):
    """Frames that are event-stream messages (`EventStreamEvents` when joined)."""

    __slots__ = ()

    def events(self, after: Sequence[bytes] = ()) -> Events:
        after = tuple(after)
        return EventStreamEvents(b"".join([*self.pieces, *after]), len(self.sources), b"", after)
