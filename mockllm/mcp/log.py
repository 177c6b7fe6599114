"""The recording format of one MCP server: `mcp.{NAME}.jsonl` in the scenario's folder.

Line 1 is the header: `{"type":"mcp/header","version":0,"server":NAME,"transport":"http"|"stdio",
"createdAt":<epoch ms>}`. Every other line is one HTTP exchange with the server, in the order the
answers ended:

    {"type":"mcp/exchange","seq":N,"time":<epoch ms>,"http":"POST"|"GET"|"DELETE",
     "request":<the JSON-RPC message or batch, POST only>,"status":200,"sse":true|false,
     "response":[<every JSON-RPC message the answer carried, in order>],
     "session":<the calling agent session>,"mcp_session":<1, 2, ... : which MCP session>,
     "session_id":<the Mcp-Session-Id the server gave>,"protocol":<MCP-Protocol-Version sent>,
     "order":<its place among its MCP session's exchanges>,"ms":<how long the answer took>}

`session` is what the request's session header said (the agent session that called, as model
calls are routed); `mcp_session` numbers the server's MCP sessions in the order they began
(absent where the protocol version has none, 2026-07-28's sessionless calls). An SSE answer's
`response` holds each event's message (notifications and server requests before the response);
a JSON answer's its one message (a batch's answers one by one). No header is ever written: the
client's `Authorization` is forwarded and forgotten. Unknown line types are kept and skipped,
as in a session log; unknown fields too.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec

from mockllm.errors import AlreadyRecorded, RecordingError

HEADER = "mcp/header"
EXCHANGE = "mcp/exchange"
FILE = re.compile(r"mcp\.(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)\.jsonl")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
Http = Literal["POST", "GET", "DELETE"]
Transport = Literal["http", "stdio"]


def file_name(server: str) -> str:
    return f"mcp.{server}.jsonl"


def check_name(server: str) -> str:
    """`server` if it can name a file and a URL path segment; a ValueError saying what is allowed otherwise."""
    if not NAME.fullmatch(server):
        raise ValueError(f"MCP server name {server!r}: letters, digits, '_', '.' and '-' only, starting with "
                         "a letter or digit")
    return server


class Header(msgspec.Struct, kw_only=True, tag_field="type", tag=HEADER):
    server: str
    version: int = 0
    transport: Transport = "http"
    createdAt: int = 0


class Exchange(msgspec.Struct, kw_only=True, omit_defaults=True, tag_field="type", tag=EXCHANGE):
    seq: int
    time: int
    http: Http = "POST"
    request: Any = None
    status: int = 200
    sse: bool = False
    response: list[Any] = []
    session: str | None = None
    mcp_session: int | None = None
    session_id: str | None = None
    protocol: str | None = None
    order: int = 0
    ms: float = 0.0
    line: int = 0  # where it was read (1-based): not written (`encode` drops it)

    @property
    def method(self) -> str | None:
        """The request's method (a POST of one request or notification); None otherwise."""
        request = self.request
        if isinstance(request, dict) and isinstance(request.get("method"), str):
            return request["method"]  # type: ignore[no-any-return]
        return None

    @property
    def answer(self) -> Any:
        """The response to the request: the message of `response` that carries its id (None: none did)."""
        request = self.request
        if not isinstance(request, dict) or "id" not in request:
            return None
        return next((m for m in self.response if isinstance(m, dict) and "method" not in m
                     and m.get("id") == request["id"]), None)


@dataclass(slots=True)
class McpLog:
    """One server's recording, as read."""

    path: Path
    header: Header
    exchanges: list[Exchange] = field(default_factory=list)

    @property
    def server(self) -> str:
        return self.header.server

    @property
    def file(self) -> str:
        return self.path.name


_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


def encode(item: Header | Exchange) -> bytes:
    """One line of the file, newline included."""
    row = msgspec.to_builtins(item)
    row.pop("line", None)
    return _encoder.encode(row) + b"\n"


def read_log(path: Path) -> McpLog:
    """Read `path`; a RecordingError names its file and line and says what is wrong."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise RecordingError(path, None, f"cannot read: {exc.strerror or exc}") from None
    expected = FILE.fullmatch(path.name)
    if not lines:
        raise RecordingError(path, None, "empty: an MCP recording starts with its mcp/header line")
    header = _header(path, lines[0])
    if expected is not None and expected["name"] != header.server:
        raise RecordingError(path, 1, f"header names server {header.server!r}, the file name "
                             f"{expected['name']!r}")
    log = McpLog(path, header)
    seqs: set[int] = set()
    for number, raw in enumerate(lines[1:], start=2):
        if not raw.strip():
            continue
        row = _object(path, number, raw)
        if row.get("type") != EXCHANGE:
            if not isinstance(row.get("type"), str):
                raise RecordingError(path, number, 'a line without a "type"')
            continue  # a later version's line: kept, skipped
        try:
            exchange = msgspec.convert(row, Exchange)
        except msgspec.ValidationError as exc:
            raise RecordingError(path, number, f"not an mcp/exchange: {exc}") from None
        _check_exchange(path, number, exchange)
        if exchange.seq in seqs:
            raise RecordingError(path, number, f"seq {exchange.seq} appears twice")
        seqs.add(exchange.seq)
        exchange.line = number
        log.exchanges.append(exchange)
    return log


def _object(path: Path, number: int, raw: bytes) -> dict[str, Any]:
    try:
        row = _decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise RecordingError(path, number, f"not JSON: {exc}") from None
    if not isinstance(row, dict):
        raise RecordingError(path, number, "not a JSON object")
    return row


def _header(path: Path, raw: bytes) -> Header:
    row = _object(path, 1, raw)
    if row.get("type") != HEADER:
        raise RecordingError(path, 1, f'the first line is not an mcp/header (type {row.get("type")!r})')
    try:
        header = msgspec.convert(row, Header)
    except msgspec.ValidationError as exc:
        raise RecordingError(path, 1, f"bad mcp/header: {exc}") from None
    if header.version != 0:
        raise RecordingError(path, 1, f"version {header.version}: this mockllm reads MCP recordings of version 0")
    return header


def _check_exchange(path: Path, number: int, exchange: Exchange) -> None:
    if exchange.http == "POST":
        request = exchange.request
        messages = request if isinstance(request, list) else [request]
        if not messages or not all(isinstance(m, dict) and m.get("jsonrpc") == "2.0" for m in messages):
            raise RecordingError(path, number, 'a POST exchange\'s "request" must be a JSON-RPC 2.0 message '
                                 "or a batch of them")
    for message in exchange.response:
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            raise RecordingError(path, number, f'"response" holds {str(message)[:80]!r}, not a JSON-RPC 2.0 '
                                 "message")


class LogWriter:
    """Writes one server's recording as its exchanges end: the header on the first, then a line each,
    flushed at once (an interrupted recording keeps every exchange that ended)."""

    def __init__(self, path: Path, header: Header) -> None:
        self.path = path
        self.header = header
        self._file: Any = None
        self.seq = 0
        self.closed = False

    def write(self, exchange: Exchange) -> None:
        if self.closed:
            return
        if self._file is None:
            if self.path.exists():
                raise AlreadyRecorded(f"{self.path} already exists: record into a new or empty folder")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "xb")  # noqa: SIM115 (held open across writes; closed by close())
            self._file.write(encode(self.header))
        exchange.seq = self.seq
        self.seq += 1
        self._file.write(encode(exchange))
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self.closed = True
        if self._file is not None:
            self._file.close()
            self._file = None


def write_log(path: Path, header: Header, exchanges: list[Exchange]) -> None:
    """The whole file at once, written beside and renamed into place (new_episodes' rewrite)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(encode(header) + b"".join(encode(e) for e in exchanges))
    os.replace(partial, path)
