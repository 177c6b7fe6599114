"""The Python API's admin connection (`hosting/admin_client.py`) reads a server's answers whole in
every way HTTP/1.1 delimits them, over one kept-alive socket, against a scripted server."""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator

import pytest

from mockllm.hosting.admin_client import AdminConnection

CLOSE = b"<close>"


class Scripted:
    """A server on 127.0.0.1 answering each request it reads with the next of `answers` (raw
    bytes, closing the connection after those that end with CLOSE; None closes it instead); it
    records the requests' heads."""

    def __init__(self, answers: list[bytes | None]) -> None:
        self.answers = answers
        self.heads: list[bytes] = []
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.answers:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            with connection:
                buffer = b""
                while self.answers:
                    while b"\r\n\r\n" not in buffer:
                        data = connection.recv(65536)
                        if not data:
                            break
                        buffer += data
                    if b"\r\n\r\n" not in buffer:
                        break
                    head, _, buffer = buffer.partition(b"\r\n\r\n")
                    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                                   if line.lower().startswith(b"content-length:")), 0)
                    while len(buffer) < length:
                        buffer += connection.recv(65536)
                    buffer = buffer[length:]
                    self.heads.append(head)
                    answer = self.answers.pop(0)
                    if answer is None:
                        break
                    connection.sendall(answer.removesuffix(CLOSE))
                    if answer.endswith(CLOSE):
                        break

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def scripted() -> Iterator[type[Scripted]]:
    made: list[Scripted] = []

    def make(answers: list[bytes | None]) -> Scripted:
        server = Scripted(answers)
        made.append(server)
        return server

    yield make  # type: ignore[misc]
    for server in made:
        server.close()


def test_answers_delimited_every_way_are_read_whole_on_one_connection(scripted):
    server = scripted([
        b'HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{"run":"r-1"}',
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n",
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}",
    ])
    connection = AdminConnection(server.url, 5)
    assert connection.request("POST", f"{server.url}/_mockllm/runs", b'{"scenario":"s"}') == (201, b'{"run":"r-1"}')
    assert connection.request("GET", f"{server.url}/_mockllm/runs/r-1/report.html?x=1") == (200, b"hello world")
    assert connection.request("DELETE", f"{server.url}/_mockllm/runs/r-2") == (404, b"{}")
    assert server.connections == 1, "kept alive"
    first, second, _ = server.heads
    assert first.startswith(b"POST /_mockllm/runs HTTP/1.1\r\n") and b"Content-Length: 16" in first
    assert b"Host: 127.0.0.1:" in first and b"Content-Type: application/json" in first
    assert second.startswith(b"GET /_mockllm/runs/r-1/report.html?x=1 HTTP/1.1\r\n")
    connection.close()


def test_an_answer_that_ends_with_its_connection_and_a_stale_connection_sent_again(scripted):
    server = scripted([b"HTTP/1.0 200 OK\r\n\r\nto the end" + CLOSE,
                       b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", None,
                       b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nagain"])
    connection = AdminConnection(server.url, 5)
    assert connection.request("GET", f"{server.url}/a") == (200, b"to the end")
    assert connection._socket is None, "an answer read to the connection's end closes it"
    assert connection.request("GET", f"{server.url}/b") == (200, b"ok")
    # the server closes the kept-alive connection at the next request without answering: sent again once
    assert connection.request("GET", f"{server.url}/c") == (200, b"again")
    assert server.connections == 3
    connection.close()


def test_a_call_sent_ahead_is_collected_after_another_call(scripted):
    server = scripted([b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\n\r\nahead",
                       b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nnow"])
    connection = AdminConnection(server.url, 5)
    connection.send("POST", f"{server.url}/_mockllm/runs", b"{}")
    with pytest.raises(RuntimeError):
        connection.send("POST", f"{server.url}/_mockllm/runs", b"{}")
    assert connection.request("DELETE", f"{server.url}/_mockllm/runs/r-1") == (200, b"now")
    assert connection.collect() == (201, b"ahead")
    with pytest.raises(LookupError):
        connection.collect()
    connection.close()


def written(connection: AdminConnection, monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Each write the connection makes, as made."""
    writes: list[bytes] = []
    send = connection._send

    def noting(data: bytes) -> None:
        writes.append(data)
        send(data)

    monkeypatch.setattr(connection, "_send", noting)
    return writes


def test_a_call_held_for_the_next_goes_behind_it_in_one_write(scripted, monkeypatch):
    server = scripted([b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nended",
                       b"HTTP/1.1 201 Created\r\nContent-Length: 7\r\n\r\ncreated"])
    connection = AdminConnection(server.url, 5)
    writes = written(connection, monkeypatch)
    connection.send("POST", f"{server.url}/_mockllm/runs", b'{"scenario":"s"}', behind_next=True)
    assert writes == [], "held until the next call"
    with pytest.raises(RuntimeError):
        connection.send("POST", f"{server.url}/_mockllm/runs", b"{}")
    assert connection.request("DELETE", f"{server.url}/_mockllm/runs/r-1") == (200, b"ended")
    assert len(writes) == 1 and writes[0].startswith(b"DELETE /_mockllm/runs/r-1 HTTP/1.1\r\n")
    assert connection.collect() == (201, b"created")
    assert [head.split(b" ")[0] for head in server.heads] == [b"DELETE", b"POST"]
    assert writes[0].index(b"DELETE") < writes[0].index(b"POST /_mockllm/runs")
    assert writes[0].endswith(b'{"scenario":"s"}')
    connection.close()


def test_a_held_call_no_call_follows_goes_alone_when_collected(scripted, monkeypatch):
    server = scripted([b"HTTP/1.1 201 Created\r\nContent-Length: 7\r\n\r\ncreated"])
    connection = AdminConnection(server.url, 5)
    writes = written(connection, monkeypatch)
    connection.send("POST", f"{server.url}/_mockllm/runs", b"{}", behind_next=True)
    assert connection.collect() == (201, b"created")
    assert len(writes) == 1 and writes[0].startswith(b"POST /_mockllm/runs ")
    with pytest.raises(LookupError):
        connection.collect()
    connection.close()


def test_a_held_call_goes_again_with_its_call_on_a_fresh_connection(scripted):
    server = scripted([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", None,
                       b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nended",
                       b"HTTP/1.1 201 Created\r\nContent-Length: 7\r\n\r\ncreated"])
    connection = AdminConnection(server.url, 5)
    assert connection.request("GET", f"{server.url}/b") == (200, b"ok")
    connection.send("POST", f"{server.url}/_mockllm/runs", b"{}", behind_next=True)
    # the kept-alive connection is closed at the next request, unanswered: both go again on a fresh one
    assert connection.request("DELETE", f"{server.url}/_mockllm/runs/r-1") == (200, b"ended")
    assert connection.collect() == (201, b"created")
    assert server.connections == 2
    assert [head.split(b" ")[0] for head in server.heads] == [b"GET", b"DELETE", b"DELETE", b"POST"]
    connection.close()


def test_a_held_call_is_dropped_with_its_connection(scripted, monkeypatch):
    server = scripted([])
    connection = AdminConnection(server.url, 5)
    writes = written(connection, monkeypatch)
    connection.send("POST", f"{server.url}/_mockllm/runs", b"{}", behind_next=True)
    connection.close()
    with pytest.raises(LookupError):
        connection.collect()
    assert writes == []


@pytest.mark.parametrize("answer", [b"SPDY/3 200 OK\r\n\r\n",
                                    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort" + CLOSE,
                                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"],
                         ids=["bad-status-line", "short-body", "bad-chunk"])
def test_a_broken_answer_raises_and_drops_the_connection(scripted, answer):
    server = scripted([answer, None])
    connection = AdminConnection(server.url, 5)
    with pytest.raises(http.client.HTTPException):
        connection.request("GET", f"{server.url}/x")
    assert connection._socket is None
    connection.close()
