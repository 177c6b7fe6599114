"""A kept-alive HTTP/1.1 connection to one local server, for the synchronous Python API's admin calls.

A test that uses the pytest plugin makes at least two admin calls (create its run, end it). Through
`urllib` each was a new TCP connection and a new opener chain; profiled over a 200-test suite they
were most of the plugin's own time per test. One kept-alive connection answers the same calls in a
fraction of that. It is shared by every thread that uses the server (a lock serialises the calls:
each is answered from memory), and never goes through a proxy.

It speaks HTTP/1.1 over a socket of its own rather than through `http.client`: the calls go to a
mockllm server only, whose answers this reads whole (a `Content-Length` body, a chunked one, or one
that ends with the connection), and `http.client` spent 180 us of the test's time on each call
(building the request, and its header parser on the answer) where the whole exchange is 200 us of
the server's.

A call may also be sent ahead (`send`) and its answer read later (`collect`): the plugin creates
the next test's run while pytest moves on to it, so that test's setup finds the answer waiting
instead of waiting a round trip for it. One call at a time is sent ahead; any other call first
reads its answer off the connection and keeps it for `collect`.

A call sent ahead may also wait to go behind the next call (`send(..., behind_next=True)`): both
requests leave in one write, the next call's first, and the server reads them in one wake-up. The
plugin ends a test's run and creates the next test's this way: on two busy cores (xdist's `-n 2`)
each wake-up of the server is a few hundred microseconds of a core the tests want.
"""

from __future__ import annotations

import http.client
import socket
import threading
import urllib.parse

# A kept-alive connection the server has closed since its last answer (its keep-alive timeout)
# fails on the next request before the server saw it: sent again once on a fresh connection.
STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
READ = 64 * 1024
HEAD_LIMIT = 64 * 1024  # a longer head is not a mockllm server's


class AdminConnection:
    """`request(method, url, body)` -> (status, body bytes) over one kept-alive connection to the
    host and port of `base_url` (`http://host:port`)."""

    def __init__(self, base_url: str, timeout: float) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"expected an http://host:port address, not {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.timeout = timeout
        self._host_header = (f"[{self.host}]" if ":" in self.host else self.host) + f":{self.port}"
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._buffer = bytearray()  # read off the socket and not yet part of an answer
        self._sent = False  # a call sent ahead whose answer is still on the connection
        self._answer: tuple[int, bytes] | BaseException | None = None  # its answer, read off by another call
        self._held: bytes | None = None  # a call to send ahead behind the next call's request

    def request(self, method: str, url: str, body: bytes | None = None,
                content_type: str = "application/json") -> tuple[int, bytes]:
        """One call; `url` is a full address on this server (only its path and query are sent)."""
        with self._lock:
            self._read_ahead()
            data = _encode(method, url, body, content_type, self._host_header)
            held, self._held = self._held, None
            while True:
                fresh = self._socket is None
                try:
                    self._send(data + held if held is not None else data)
                    self._sent = held is not None  # its answer follows this call's
                    return self._receive()
                except STALE:
                    if fresh:
                        raise
                    # a stale connection: the server never saw this request; sent again on a fresh one

    def send(self, method: str, url: str, body: bytes | None = None, content_type: str = "application/json",
             *, behind_next: bool = False) -> None:
        """Send a call without waiting for its answer (`collect` reads it); `behind_next`: with the
        next call, behind its request (or by `collect`, if none comes first). One at a time: a call
        sent ahead before it must have been collected."""
        with self._lock:
            if self._sent or self._answer is not None or self._held is not None:
                raise RuntimeError("an admin call sent ahead was not collected")
            data = _encode(method, url, body, content_type, self._host_header)
            if behind_next:
                self._held = data
                return
            self._send(data)
            self._sent = True

    def collect(self) -> tuple[int, bytes]:
        """The answer to the call sent ahead: raises what reading it raised, or LookupError when no
        call was sent ahead (or its answer was collected already)."""
        with self._lock:
            if self._held is not None:  # no call came to take it: it goes alone
                held, self._held = self._held, None
                self._send(held)
                self._sent = True
            self._read_ahead()
            answer, self._answer = self._answer, None
        if answer is None:
            raise LookupError("no admin call was sent ahead")
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def _read_ahead(self) -> None:
        """Read the answer of the call sent ahead off the connection (kept for `collect`)."""
        if self._sent:
            self._sent = False
            try:
                self._answer = self._receive()
            except Exception as exc:  # for `collect` to raise, where the call's sender reads it
                self._answer = exc

    def _send(self, data: bytes) -> None:
        try:
            if self._socket is None:
                self._socket = socket.create_connection((self.host, self.port), timeout=self.timeout)
                self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socket.sendall(data)
        except BaseException:
            self._drop()
            raise

    def _receive(self) -> tuple[int, bytes]:
        try:
            status, headers = self._head()
            length = headers.get("content-length")
            if headers.get("transfer-encoding", "").lower() == "chunked":
                body = self._chunked()
            elif length is not None:
                if not length.isdigit():
                    raise http.client.HTTPException(f"bad Content-Length {length!r}")
                body = self._exactly(int(length))
            else:  # an answer that ends with the connection
                body = self._until_closed()
                headers["connection"] = "close"
        except BaseException:
            self._drop()  # a half-read answer leaves the connection unusable
            raise
        if headers.get("connection", "").lower() == "close":
            self._drop()
        return status, body

    def _head(self) -> tuple[int, dict[str, str]]:
        """The next answer's status and headers (names lowercased)."""
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            if len(self._buffer) > HEAD_LIMIT:
                raise http.client.LineTooLong("the answer's head")
            if not self._fill():
                if self._buffer:
                    raise http.client.IncompleteRead(bytes(self._buffer))
                raise http.client.RemoteDisconnected("the server closed the connection without answering")
        lines = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
        del self._buffer[:end + 4]
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise http.client.BadStatusLine(lines[0])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if version == "HTTP/1.0" and headers.get("connection", "").lower() != "keep-alive":
            headers["connection"] = "close"
        return int(code), headers

    def _exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            if not self._fill():
                raise http.client.IncompleteRead(bytes(self._buffer), size - len(self._buffer))
        body = bytes(self._buffer[:size])
        del self._buffer[:size]
        return body

    def _line(self) -> bytes:
        while (end := self._buffer.find(b"\r\n")) < 0:
            if not self._fill():
                raise http.client.IncompleteRead(bytes(self._buffer))
        line = bytes(self._buffer[:end])
        del self._buffer[:end + 2]
        return line

    def _chunked(self) -> bytes:
        body = bytearray()
        while True:
            size_text = self._line().split(b";")[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise http.client.HTTPException(f"bad chunk size {size_text!r}") from None
            if size == 0:
                while self._line():  # trailers, then the blank line
                    pass
                return bytes(body)
            body += self._exactly(size)
            self._exactly(2)  # the chunk's CRLF

    def _until_closed(self) -> bytes:
        while self._fill():
            pass
        body = bytes(self._buffer)
        self._buffer.clear()
        return body

    def _fill(self) -> bool:
        """Read more of the connection into the buffer; False at its end."""
        if self._socket is None:
            raise http.client.RemoteDisconnected("the connection was closed")
        data = self._socket.recv(READ)
        self._buffer += data
        return bool(data)

    def close(self) -> None:
        with self._lock:
            self._drop()
            self._sent, self._answer, self._held = False, None, None  # an answer owed goes with the connection

    def _drop(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        self._buffer.clear()


def _encode(method: str, url: str, body: bytes | None, content_type: str, host: str) -> bytes:
    """One request, whole; `url` is a full address (only its path and query are sent)."""
    parts = urllib.parse.urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    head = f"{method} {target} HTTP/1.1\r\nHost: {host}\r\nAccept-Encoding: identity\r\n"
    if body is not None:
        head += f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
    return (head + "\r\n").encode("utf-8") + (body or b"")
