"""A kept-alive HTTP/1.1 connection to one local server, for the synchronous Python API's admin calls.

A test that uses the pytest plugin makes at least two admin calls (create its run, end it). Through
`urllib` each was a new TCP connection and a new opener chain; profiled over a 200-test suite they
were most of the plugin's own time per test. One kept-alive `http.client` connection answers the
same calls in a fraction of that. It is shared by every thread that uses the server (a lock
serialises the calls: each is answered from memory), and never goes through a proxy.

A call may also be sent ahead (`send`) and its answer read later (`collect`): the plugin creates
the next test's run while pytest moves on to it, so that test's setup finds the answer waiting
instead of waiting a round trip for it. One call at a time is sent ahead; any other call first
reads its answer off the connection and keeps it for `collect`.
"""

from __future__ import annotations

import http.client
import threading
import urllib.parse

# A kept-alive connection the server has closed since its last answer (its keep-alive timeout)
# fails on the next request before the server saw it: sent again once on a fresh connection.
STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


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
        self._lock = threading.Lock()
        self._connection: http.client.HTTPConnection | None = None
        self._sent = False  # a call sent ahead whose answer is still on the connection
        self._answer: tuple[int, bytes] | BaseException | None = None  # its answer, read off by another call

    def request(self, method: str, url: str, body: bytes | None = None,
                content_type: str = "application/json") -> tuple[int, bytes]:
        """One call; `url` is a full address on this server (only its path and query are sent)."""
        with self._lock:
            self._read_ahead()
            while True:
                fresh = self._connection is None
                try:
                    self._send(method, url, body, content_type)
                    return self._receive()
                except STALE:
                    if fresh:
                        raise
                    # a stale connection: the server never saw this request; sent again on a fresh one

    def send(self, method: str, url: str, body: bytes | None = None, content_type: str = "application/json") -> None:
        """Send a call without waiting for its answer (`collect` reads it). One at a time: a call
        sent ahead before it must have been collected."""
        with self._lock:
            if self._sent or self._answer is not None:
                raise RuntimeError("an admin call sent ahead was not collected")
            self._send(method, url, body, content_type)
            self._sent = True

    def collect(self) -> tuple[int, bytes]:
        """The answer to the call sent ahead: raises what reading it raised, or LookupError when no
        call was sent ahead (or its answer was collected already)."""
        with self._lock:
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

    def _send(self, method: str, url: str, body: bytes | None, content_type: str) -> None:
        parts = urllib.parse.urlsplit(url)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        headers = {"Content-Type": content_type} if body is not None else {}
        connection = self._connection or http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        self._connection = connection
        try:
            connection.request(method, target, body=body, headers=headers)
        except BaseException:
            self._drop()
            raise

    def _receive(self) -> tuple[int, bytes]:
        connection = self._connection
        assert connection is not None
        try:
            response = connection.getresponse()
            raw = response.read()
        except BaseException:
            self._drop()  # a half-read answer leaves the connection unusable
            raise
        if response.will_close:
            self._drop()
        return response.status, raw

    def close(self) -> None:
        with self._lock:
            self._drop()
            self._sent, self._answer = False, None  # an answer owed goes with the connection

    def _drop(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
