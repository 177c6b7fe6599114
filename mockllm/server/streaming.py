"""Writing an outcome: one streamed response with its headers, written burst, paced or held.

The frames come framed by their dialect (SSE events, NDJSON lines): this module writes bytes, with
the dialect's streaming Content-Type (`Dialect.stream_type`).

Every paced stream sleeps through `Pacer`, which the server closes on shutdown: sleeping streams
then send the rest of their events at once and end, so shutdown never waits for a schedule and a
client still gets a whole answer. A client that leaves cancels its handler (aiohttp's
handler_cancellation), which cancels a sleep or a hold at once; CancelledError is never swallowed.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Protocol

from aiohttp import web

from mockllm.replay.outcome import HeldInfo, Hold, Outcome, Refusal, Stream, Whole
from mockllm.replay.pacing import Schedule
from mockllm.replay.run import Run
from mockllm.server.mock_errors import mock_error
from mockllm.wire.dialect import Dialect

log = logging.getLogger("mockllm")

SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
_STREAM_HEADERS: dict[str, dict[str, str]] = {SSE_HEADERS["Content-Type"]: SSE_HEADERS}


def stream_headers(dialect: Dialect) -> dict[str, str]:
    """A streamed answer's headers in `dialect`'s media type (made once per type: one per request costs)."""
    headers = _STREAM_HEADERS.get(dialect.stream_type)
    if headers is None:
        headers = _STREAM_HEADERS[dialect.stream_type] = {**SSE_HEADERS, "Content-Type": dialect.stream_type}
    return headers
# Events due within this many seconds are written now: a timer that fires a hair early needs no second sleep.
EARLY_S = 0.0005


class EventWriter(Protocol):
    """What the pacing writer writes to (an aiohttp StreamResponse)."""

    async def write(self, data: bytes) -> None: ...


class Pacer:
    """Writes the paced streams of one server; `close()` (at shutdown) wakes them all."""

    def __init__(self) -> None:
        self._sleeping: set[asyncio.Future[None]] = set()
        self.closed = False

    async def write(self, response: EventWriter, schedule: Schedule) -> None:
        """Write each event when it is due, counted from now; events due together go in one write.
        Once closed, the rest goes out at once."""
        loop = asyncio.get_running_loop()
        events, offsets, start = schedule.events, schedule.offsets, loop.time()
        i, n = 0, len(events)
        while i < n:
            wait = start + offsets[i] - loop.time()
            if wait > EARLY_S and not self.closed:
                await self._sleep(wait)
            due = float("inf") if self.closed else loop.time() - start + EARLY_S
            j = i + 1
            while j < n and offsets[j] <= due:
                j += 1
            await response.write(events[i] if j == i + 1 else b"".join(events[i:j]))
            i = j

    async def sleep(self, delay: float) -> None:
        """Wait `delay` seconds (a fault's slow first byte), cut short at shutdown."""
        if not self.closed:
            await self._sleep(delay)

    async def _sleep(self, delay: float) -> None:
        # asyncio.sleep's own mechanism (a future and a timer), with the future kept so close() can wake it.
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        timer = loop.call_later(delay, _wake, waiter)
        self._sleeping.add(waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._sleeping.discard(waiter)

    @property
    def sleeping(self) -> int:
        """Paced streams waiting for their next event now."""
        return len(self._sleeping)

    def close(self) -> None:
        """Shutdown: wake every sleeping stream, and let none sleep again."""
        self.closed = True
        for waiter in self._sleeping:
            _wake(waiter)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class OutcomeWriter:
    """Writes what a run decided; owns the server's paced sleeps and held calls, released on shutdown."""

    def __init__(self) -> None:
        self.pacer = Pacer()
        self._held: set[asyncio.Future[None]] = set()

    def at_once(self, outcome: Outcome, dialect: Dialect) -> web.Response | None:
        """The whole response of an outcome with nothing to wait for (no delay, pace, cut or hold),
        or None for one that takes time: what the fast lane writes itself, and `write` too."""
        if isinstance(outcome, Stream):
            waits = outcome.delay or outcome.schedule is not None
            if waits or outcome.held is not None or outcome.cut_after is not None:
                return None
            return _whole_stream(outcome, dialect)
        if isinstance(outcome, Whole):
            return None if outcome.delay else _whole(outcome, dialect)
        if isinstance(outcome, Refusal):
            return mock_error(outcome.status, outcome.code, outcome.message, dialect=dialect)
        return None

    async def write(self, request: web.Request, run: Run, dialect: Dialect, outcome: Outcome) -> web.StreamResponse:
        response = self.at_once(outcome, dialect)
        if response is not None:
            if isinstance(outcome, Stream):
                await _write_stream(request, run, outcome, response)
            return response
        if isinstance(outcome, Stream):
            if outcome.delay:
                await self.pacer.sleep(outcome.delay)
            if outcome.held is not None:
                return await self._stream_and_hold(request, run, outcome, outcome.held, stream_headers(dialect))
            try:
                headers = stream_headers(dialect)
                if outcome.cut_after is not None:
                    return await self._stream_cut(request, outcome, outcome.cut_after, headers)
                if outcome.schedule is not None:
                    return await self._stream_paced(request, outcome.schedule, headers)
            except (asyncio.CancelledError, ConnectionResetError):
                run.left_early(outcome)  # its retry gets the same entry again
                raise
            response = _whole_stream(outcome, dialect)  # a fault's delay is over: the rest at once
            await _write_stream(request, run, outcome, response)
            return response
        if isinstance(outcome, Whole):
            await self.pacer.sleep(outcome.delay)
            return _whole(outcome, dialect)
        assert isinstance(outcome, Hold)
        await self._hold(run, outcome.held)  # returns only when the server shuts down
        return mock_error(503, "shutting_down", f"run {run.id}: mockllm is shutting down; the held call was "
                          "released", dialect=dialect)

    async def _stream_cut(self, request: web.Request, outcome: Stream, events: int,
                          headers: dict[str, str]) -> web.StreamResponse:
        """A fault: the answer's first `events` wire events (paced if asked), then the connection is
        dropped with no closing event, as a provider's stream that dies halfway."""
        response = web.StreamResponse(headers=headers)  # chunked: the client sees the body end early
        await response.prepare(request)
        if outcome.schedule is not None:
            schedule = outcome.schedule
            await self.pacer.write(response, Schedule(schedule.events[:events], schedule.offsets[:events]))
        else:
            sent, _ = outcome.reply.paced_events(outcome.include_usage)
            if sent[:events]:
                await response.write(b"".join(sent[:events]))
        transport = request.transport
        if transport is not None:
            transport.abort()  # no terminating chunk: the client's read fails, as on a reset
        return response

    async def _stream_paced(self, request: web.Request, schedule: Schedule,
                            headers: dict[str, str]) -> web.StreamResponse:
        response = web.StreamResponse(headers=headers)
        response.content_length = schedule.length
        await response.prepare(request)
        await self.pacer.write(response, schedule)
        await response.write_eof()
        return response

    async def _stream_and_hold(self, request: web.Request, run: Run, outcome: Stream, held: HeldInfo,
                               headers: dict[str, str]) -> web.StreamResponse:
        """Stream a hang's prefix (or an aborted call's chunks), paced if asked, then hold until the client leaves."""
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        if outcome.schedule is None:
            await response.write(outcome.reply.stream_bytes(outcome.include_usage))
        else:
            await self.pacer.write(response, outcome.schedule)
        if outcome.ready_file is not None:
            # A harness waits for this file before it cancels: written once the first delta is out.
            held["ready_file"] = outcome.ready_file
            held["ready_file_written"] = outcome.cwd is not None and _touch(outcome.cwd, outcome.ready_file)
        await self._hold(run, held)
        await response.write_eof()
        return response

    async def _hold(self, run: Run, held: HeldInfo) -> None:
        """Stall until the client goes away (the handler is then cancelled) or the server shuts down."""
        if self.pacer.closed:  # shutting down: a paced prefix that ended after release held no more
            return
        future = asyncio.get_running_loop().create_future()
        self._held.add(future)
        try:
            with run.holding_call(held):
                await future
        finally:
            self._held.discard(future)

    def release(self) -> None:
        """On shutdown: end held streams now, and send paced streams' rest at once, instead of stalling
        shutdown for its whole grace period."""
        self.pacer.close()
        for held in self._held:
            if not held.done():
                held.set_result(None)


def _whole_stream(outcome: Stream, dialect: Dialect) -> web.Response:
    """A stream with nothing to wait for: the headers and the whole stream go in one write, with a
    Content-Length (which spares the client the chunked framing). Each write is a syscall, and on
    loopback the receiver's work too: three (headers, first event, the rest) cost the server
    10-14 us more CPU per request than one, and the first byte came no sooner (bench.py's TTFB)."""
    return web.Response(body=outcome.reply.stream_bytes(outcome.include_usage), headers=stream_headers(dialect))


async def _write_stream(request: web.Request, run: Run, outcome: Stream, response: web.Response) -> None:
    """Written in the handler, not by aiohttp after it returns, so a client gone before it is
    written is seen (`left_early`: its retry gets the same entry again)."""
    try:
        await response.prepare(request)
        await response.write_eof()
    except (asyncio.CancelledError, ConnectionResetError):
        run.left_early(outcome)
        raise


def _whole(outcome: Whole, dialect: Dialect) -> web.Response:
    extra = dialect.error_headers(outcome.body) if outcome.status != 200 else None
    # an error: some dialects name its type in a header too (Bedrock's x-amzn-errortype)
    return web.Response(status=outcome.status, body=outcome.body, content_type="application/json",
                        headers={**(outcome.headers or {}), **extra} if extra else outcome.headers)


def _touch(cwd: str, ready_file: str) -> bool:
    """Create `ready_file` (empty) under `cwd`; False when it cannot be (the report says so)."""
    path = Path(cwd) / ready_file
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError as exc:
        log.warning("could not write the ready file %s: %s", path, exc)
        return False
    return True
