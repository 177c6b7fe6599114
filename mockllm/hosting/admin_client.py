"""A kept-alive HTTP/1.1 connection to one local server, for the synchronous Python API's admin calls.

A test that uses the pytest plugin makes at least two admin calls (create its run, end it). Through
`urllib` each was a new TCP connection and a new opener chain; profiled over a 200-test suite they
were most of the plugin's own time per test. One kept-alive `http.client` connection answers the
same calls in a fraction of that. It is shared by every thread that uses the server (a lock
serialises the calls: each is answered from memory), and never goes through a proxy.
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

    def request(self, method: str, url: str, body: bytes | None = None,
                content_type: str = "application/json") -> tuple[int, bytes]:
        """One call; `url` is a full address on this server (only its path and query are sent)."""
        parts = urllib.parse.urlsplit(url)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        headers = {"Content-Type": content_type} if body is not None else {}
        with self._lock:
            while True:
                fresh = self._connection is None
                connection = self._connection or http.client.HTTPConnection(self.host, self.port,
                                                                              timeout=self.timeout)
                self._connection = connection
                try:
                    connection.request(method, target, body=body, headers=headers)
                    response = connection.getresponse()
                    raw = response.read()
                except STALE:
                    self._drop()
                    if fresh:
                        raise
                    continue  # a stale connection: the server never saw this request
                except BaseException:
                    self._drop()  # a half-read answer leaves the connection unusable
                    raise
                if response.will_close:
                    self._drop()
                return response.status, raw

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
