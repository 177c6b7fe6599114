"""Where a proxied MCP server's exchanges go: numbered by MCP session, masked, then written.

`mockllm record` writes each server's exchanges to `mcp.{NAME}.jsonl` in its output folder as they
end; a record-mode run of the server keeps them for its recording (`server/mcp.py`). Either way an
exchange is told which agent session called (the session header), which MCP session it belongs to
(numbered in the order the server gave their ids) and its place in it, and every string in its
messages passes the recording's `--redact` patterns. No header is written.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from mockllm.mcp.jsonrpc import PROTOCOL_HEADER, SESSION_HEADER, protocol_of
from mockllm.mcp.log import Exchange, Http
from mockllm.record.redact import Redactor
from mockllm.replay.routing import header_session


class ExchangeSink:
    def __init__(self, write: Callable[[Exchange], None], redactor: Redactor | None = None,
                 session_headers: Sequence[str] = ()) -> None:
        self._write = write
        self.redactor = redactor or Redactor()
        self.session_headers = tuple(session_headers)
        self._numbers: dict[str, int] = {}  # Mcp-Session-Id -> 1, 2, ...
        self._next = itertools.count(1)
        self._orders: dict[int | None, itertools.count[int]] = {}
        # Server streams (GET) still open: (exchange, its messages so far, status), by exchange id.
        self.open: dict[int, tuple[Exchange, list[Any], int]] = {}

    def continue_from(self, numbers: Mapping[str, int]) -> None:
        """Number sessions after a recording's own (`numbers`: its session ids' numbers), which keep theirs."""
        self._numbers.update(numbers)
        self._next = itertools.count(max(numbers.values(), default=0) + 1)

    def number(self, session_id: str | None) -> int | None:
        """The MCP session's number, given on first sight."""
        if not session_id:
            return None
        number = self._numbers.get(session_id)
        if number is None:
            number = self._numbers[session_id] = next(self._next)
        return number

    def begin(self, http: Http, headers: Mapping[str, str], request: Any) -> Exchange:
        """An exchange as its request arrives (its order is taken now, so the order is arrival order)."""
        session_id = headers.get(SESSION_HEADER)
        number = self.number(session_id)
        order = next(self._orders.setdefault(number, itertools.count()))
        return Exchange(seq=0, time=int(time.time() * 1000), http=http, request=request,
                        session=header_session(headers, self.session_headers), mcp_session=number,
                        protocol=protocol_of(request, headers.get(PROTOCOL_HEADER)), order=order)

    def streaming(self, exchange: Exchange, messages: list[Any], status: int) -> None:
        """A server stream is open: what it has said so far can be kept by a recording that ends first."""
        self.open[id(exchange)] = (exchange, messages, status)

    def still_open(self) -> list[Exchange]:
        """The open streams as they stand, finished copies (a run's recording ends before they do)."""
        out = []
        for exchange, messages, status in self.open.values():
            copy = msgspec.structs.replace(exchange, status=status, sse=True,
                                           response=self.redactor.value(list(messages)))
            out.append(copy)
        return out

    def end(self, exchange: Exchange, status: int, sse: bool, messages: list[Any],
            given_session_id: str | None, started: float) -> None:
        """Finish and write `exchange`: its answer, and the session id the server gave (an `initialize`'s)."""
        self.open.pop(id(exchange), None)
        exchange.status = status
        exchange.sse = sse
        exchange.response = self.redactor.value(messages)
        exchange.request = self.redactor.value(exchange.request)
        if given_session_id and exchange.mcp_session is None:  # it began the session: the first of it
            exchange.mcp_session = self.number(given_session_id)
            exchange.session_id = given_session_id
            exchange.order = next(self._orders.setdefault(exchange.mcp_session, itertools.count()))
        exchange.ms = round((time.perf_counter() - started) * 1000, 3)
        self._write(exchange)
