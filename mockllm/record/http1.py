"""One HTTP/1.1 connection to an upstream, on an asyncio protocol: it writes a request and parses
its answer's head and body as bytes arrive (the upstream client's pool, `upstream`, hands them out).

What an upstream may answer is read as HTTP/1.1 has it: informational (1xx) heads skipped; a body
framed by `Transfer-Encoding: chunked`, `Content-Length` or the connection's end; gzip and deflate
decoded (identity is asked for; other codings are refused).
"""

from __future__ import annotations

import asyncio
import zlib
from collections import deque
from collections.abc import AsyncIterator
from typing import Protocol

from multidict import CIMultiDict

from mockllm.errors import MockllmError

# Read no further ahead of a slow client than this (the upstream waits, as it would for the client).
HIGH_WATER = 1 << 20

Origin = tuple[str, str, int]  # (scheme, host, port)


class UpstreamError(MockllmError, OSError):
    """The upstream could not be reached, or answered with something that is not HTTP/1.1."""


class UpstreamCut(MockllmError):
    """The upstream's answer broke off before its end."""


class Pool(Protocol):
    """What a connection tells the pool that made it: it opened, it was lost, it is idle again."""

    def opened(self, connection: Connection) -> None: ...

    def lost(self, connection: Connection) -> None: ...

    def release(self, connection: Connection) -> None: ...


class Answer:
    """An upstream answer's head; its body is read with `iter_any` or `read`."""

    def __init__(self, connection: Connection, status: int, reason: str, headers: CIMultiDict[str]) -> None:
        self._connection = connection
        self.status = status
        self.reason = reason
        self.headers = headers
        self.content_type = headers.get("Content-Type", "").partition(";")[0].strip().lower()

    async def iter_any(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive (UpstreamCut if it breaks off)."""
        connection = self._connection
        while True:
            piece = await connection.next_piece()
            if piece is None:
                return
            yield piece

    async def read(self) -> bytes:
        return b"".join([piece async for piece in self.iter_any()])


class Stale(Exception):
    """A reused connection closed before any byte of its answer arrived."""


_HEAD, _SIZE, _DATA, _DATA_END, _TRAILER, _LENGTH, _TO_CLOSE, _DONE = range(8)


class Connection(asyncio.Protocol):
    """One connection: sends a request, parses its answer's head and body as bytes arrive."""

    def __init__(self, pool: Pool, origin: Origin) -> None:
        self.pool = pool
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.idle_since = 0.0
        self._closed = False
        self._reused = False
        self._reset(False)

    def _reset(self, head_only: bool) -> None:
        self._buf = bytearray()
        self._state = _HEAD
        self._head_only = head_only
        self._head: asyncio.Future[Answer] | None = None
        self._pieces: deque[bytes] = deque()
        self._queued = 0
        self._wake: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._remaining = 0
        self._keep_alive = True
        self._decompress: zlib._Decompress | None = None
        self._paused = False
        self._received = False

    @property
    def usable(self) -> bool:
        return not self._closed and self.transport is not None and not self.transport.is_closing()

    # -- asyncio.Protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport
        self.pool.opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.pool.lost(self)
        if self._state == _TO_CLOSE:
            self._end()
        elif self._state != _DONE and self._head is not None:
            if not self._received and self._reused and not self._head.done():
                self._head.set_exception(Stale())
            else:
                why = f" ({exc})" if exc else ""
                self._fail(UpstreamCut(f"the upstream closed the connection{why} before its answer's end")
                           if self._head.done() else UpstreamError(f"the upstream closed the connection{why} "
                                                                   "before it answered"))

    def eof_received(self) -> bool | None:
        return False  # close our side too: connection_lost follows

    def data_received(self, data: bytes) -> None:
        if self._head is None or self._state == _DONE:  # nothing asked: not an HTTP answer we can place
            self.drop()
            return
        self._received = True
        self._buf += data
        try:
            self._parse()
        except UpstreamError as exc:
            self._fail(exc)
            self.drop()

    # -- one request --------------------------------------------------------------------------------

    def send(self, request: bytes, head_only: bool) -> None:
        self._reused = self.idle_since > 0
        self._reset(head_only)
        self._head = asyncio.get_running_loop().create_future()
        assert self.transport is not None
        self.transport.write(request)

    async def head(self) -> Answer:
        assert self._head is not None
        return await self._head

    async def next_piece(self) -> bytes | None:
        while not self._pieces:
            if self._error is not None:
                raise self._error
            if self._state == _DONE:
                return None
            self._wake = asyncio.get_running_loop().create_future()
            await self._wake
        piece = self._pieces.popleft()
        self._queued -= len(piece)
        if self._paused and self._queued < HIGH_WATER and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return piece

    def finish(self) -> None:
        if self._state == _DONE and self._keep_alive and self.usable:
            self.pool.release(self)
            return
        if self._head is not None and not self._head.done():
            self._head.cancel()  # nobody will await it: no "exception never retrieved" when it fails
        self.drop()

    def drop(self) -> None:
        self._closed = True
        if self.transport is not None:
            self.transport.abort()

    # -- parsing ------------------------------------------------------------------------------------

    def _parse(self) -> None:
        buf = self._buf
        if self._state == _HEAD:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > 65536:
                    raise UpstreamError("the upstream's answer head is over 64 KiB")
                return
            head = bytes(buf[:end]).decode("latin-1")
            del buf[:end + 4]
            if not self._read_head(head):
                self._parse()  # an informational head: the real one follows
                return
        body = bytearray()
        while buf and self._state not in (_DONE, _TO_CLOSE):
            if self._state == _LENGTH:
                take = min(self._remaining, len(buf))
                body += buf[:take]
                del buf[:take]
                self._remaining -= take
                if not self._remaining:
                    self._state = _DONE
            elif self._state == _DATA:
                take = min(self._remaining, len(buf))
                body += buf[:take]
                del buf[:take]
                self._remaining -= take
                if not self._remaining:
                    self._state = _DATA_END
            else:  # _SIZE, _DATA_END, _TRAILER: a line each
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > 4096:
                        raise UpstreamError("a chunked answer's size line is over 4 KiB")
                    break
                line = bytes(buf[:end])
                del buf[:end + 2]
                self._line(line)
        if self._state == _TO_CLOSE and buf:
            body += buf
            buf.clear()
        if body:
            self._emit(bytes(body))
        if self._state == _DONE:
            self._end()

    def _line(self, line: bytes) -> None:
        if self._state == _SIZE:
            try:
                self._remaining = int(line.partition(b";")[0].strip(), 16)
            except ValueError:
                raise UpstreamError(f"a chunked answer's size line is not a size: {line[:40]!r}") from None
            self._state = _DATA if self._remaining else _TRAILER
        elif self._state == _DATA_END:
            if line:
                raise UpstreamError("a chunk of the upstream's answer does not end where its size says")
            self._state = _SIZE
        elif not line:  # _TRAILER: the blank line after the trailers ends the answer
            self._state = _DONE

    def _read_head(self, head: str) -> bool:
        """Read a head; False for an informational (1xx) one."""
        status_line, _, rest = head.partition("\r\n")
        version, _, status_reason = status_line.partition(" ")
        status_text, _, reason = status_reason.partition(" ")
        if not version.startswith("HTTP/1.") or not (status_text.isdigit() and len(status_text) == 3):
            raise UpstreamError(f"the upstream did not answer in HTTP/1.1: {status_line[:80]!r}")
        status = int(status_text)
        if 100 <= status < 200:
            return False
        headers: CIMultiDict[str] = CIMultiDict()
        for line in rest.split("\r\n") if rest else ():
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise UpstreamError(f"the upstream's answer has a bad header line: {line[:80]!r}")
            headers.add(name, value.strip())
        connection = headers.get("Connection", "").lower()
        self._keep_alive = "close" not in connection and (version == "HTTP/1.1" or "keep-alive" in connection)
        coding = headers.get("Content-Encoding", "identity").strip().lower()
        if coding in ("gzip", "x-gzip", "deflate"):
            self._decompress = zlib.decompressobj(31 if "gzip" in coding else 15)
        elif coding not in ("identity", ""):
            raise UpstreamError(f"the upstream answered in content-encoding {coding}, though identity was asked for")
        if self._head_only or status in (204, 304):
            self._state = _DONE
        elif "chunked" in headers.get("Transfer-Encoding", "").lower():
            self._state = _SIZE
        elif "Content-Length" in headers:
            try:
                self._remaining = int(headers["Content-Length"])
            except ValueError:
                raise UpstreamError(f"bad Content-Length {headers['Content-Length']!r}") from None
            self._state = _LENGTH if self._remaining else _DONE
        else:
            self._state, self._keep_alive = _TO_CLOSE, False
        assert self._head is not None
        if not self._head.done():
            self._head.set_result(Answer(self, status, reason, headers))
        return True

    def _emit(self, piece: bytes, *, decoded: bool = False) -> None:
        if self._decompress is not None and not decoded:
            try:
                piece = self._decompress.decompress(piece)
            except zlib.error as exc:
                raise UpstreamError(f"the upstream's compressed answer does not decompress: {exc}") from None
        if not piece:
            return
        self._pieces.append(piece)
        self._queued += len(piece)
        if self._queued > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake_reader()

    def _end(self) -> None:
        self._state = _DONE
        if self._decompress is not None:
            self._emit(self._decompress.flush(), decoded=True)
            self._decompress = None
        self._wake_reader()

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        if self._head is not None and not self._head.done():
            self._head.set_exception(exc)
        self._wake_reader()

    def _wake_reader(self) -> None:
        wake, self._wake = self._wake, None
        if wake is not None and not wake.done():
            wake.set_result(None)
