"""Forwarding one model call to its upstream and passing the answer back as it arrives: the part of
recording that sits on the client's path, shared by `mockllm record` and the server's record modes.

Each upstream piece is written to the client the moment it arrives, and only kept (with its
arrival time) on the way: nothing is decoded while the answer streams (but for a dialect whose
answers are continued by id, whose id routing needs at once). When the call is over the kept
pieces are decoded with the dialect's stream decoder and the call is handed to a `Sink` (the
session tree being recorded, or a run's live sessions), never on a client's path:
- `mockllm record` (`defer=False`) records each call as it ends, on a background task that yields
  to the loop every few events, so a call arriving meanwhile waits for one slice at most, never
  for the decoding of a whole answer; its tree stays durable call by call.
- a record-mode run (`defer=True`) is written only when it ends, so its calls are decoded then
  (`settle`), in the order they ended: during the run a live call costs what forwarding costs.

How a stream ends decides how it is recorded: as the upstream sent it when the client read its end
(the openai SDK closes its connection right after `[DONE]`, often before the upstream's own end
arrives: that client had everything); as an aborted call when the client left before the end (an
agent cancelling); as a cut when the upstream broke off. Failures a record-mode run cannot keep
(an unreachable upstream, a 5xx, an auth or rate-limit refusal, a stream that broke off or ended in
an error) are also told to `on_failure`, so the run says why it wrote nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple, Protocol

import msgspec
from aiohttp import web
from multidict import CIMultiDict

from mockllm.dsh.chunks import Failure, FinishChunk, FinishReason
from mockllm.errors import RecordError
from mockllm.record.call import ObservedCall, TimedChunk, read_inputs
from mockllm.record.redact import Redactor
from mockllm.record.tree import Caller, Failed
from mockllm.record.upstream import Answer, Exchange, Upstream, UpstreamCut, UpstreamError
from mockllm.shown_headers import header_secrets
from mockllm.shown_url import shown_url, url_secrets
from mockllm.wire import DEFAULT
from mockllm.wire.dialect import Dialect, FrameReader, SSEEvent, StreamDecoder
from mockllm.wire.request import Request, system_text

log = logging.getLogger("mockllm.record.command")

# Hop-by-hop and framing headers: each side of the proxy sets its own.
_HOP = frozenset(("host", "connection", "keep-alive", "transfer-encoding", "content-length", "te", "trailer",
                  "upgrade", "proxy-authorization", "proxy-connection", "accept-encoding", "content-encoding"))
_HOP_BYTES = frozenset(name.encode() for name in _HOP)
# Upstream answers a record-mode run must not keep: the recording would replay a refusal, not the agent.
UNKEPT_STATUSES = frozenset({401, 403, 407, 429})
# SSE events decoded between two yields to the loop (~15 us each): a slice stays well under 0.5 ms.
SLICE = 16


def now_ms() -> int:
    return int(time.time() * 1000)


class Sink(Protocol):
    """Where forwarded calls are recorded (`tree.SessionTree` has these), masking what its `redactor` masks."""

    redactor: Redactor

    def record(self, caller: Caller, call: ObservedCall) -> None: ...

    def record_failure(self, caller: Caller, call: ObservedCall, failed: Failed) -> None: ...

    def record_cut(self, caller: Caller, call: ObservedCall, failure: Failure) -> None: ...


class Target(NamedTuple):
    """A call to record: where (its session or side route) and what the proxy saw of its request;
    `request` set: its inputs are read from it only when the call is recorded (off the client's path)."""

    caller: Caller
    call: ObservedCall
    request: Request | None = None


# A failure a record-mode run cannot keep: (the call's caller, HTTP status the client got, what happened).
OnFailure = Callable[[Caller, int, str], None]
# Recording one ended call: a generator that yields between slices of its work.
Work = Callable[..., Iterator[None]]


class Forwarder:
    def __init__(self, upstream: Upstream, sink: Sink, on_failure: OnFailure | None = None, *,
                 defer: bool = False) -> None:
        self.upstream = upstream
        self.sink = sink
        self.on_failure = on_failure
        self.defer = defer  # record calls only when `settle` is called (a record-mode run, written at its end)
        self.replies: dict[str, str] = {}  # upstream reply id -> recorded session id (Responses chains)
        self.shown: frozenset[str] = frozenset()  # headers naming sessions (`--session-header`): not credentials
        self.in_flight = 0  # calls forwarded and not yet recorded
        self._pending: deque[tuple[Work, tuple[Any, ...]]] = deque()  # in the order calls ended
        self._worker: asyncio.Task[None] | None = None
        self._settled = asyncio.Event()
        self._settled.set()

    async def settled(self) -> None:
        """Wait until every call forwarded so far is recorded (or found unrecordable); a deferring
        forwarder records them now, on a thread, so the server goes on serving other runs."""
        if self.defer:
            await asyncio.to_thread(self.settle)
        else:
            await self._settled.wait()

    def settle(self) -> None:
        """Record, in the order they ended, every call that has ended and is not recorded yet."""
        while self._pending:
            work, args = self._pending.popleft()
            self._run(work, args, all_at_once=True)

    def start(self, request: web.Request, url: str, body: bytes, dialect: Dialect | None = None) -> Exchange:
        """Begin forwarding a request: sent now if a kept-alive connection to its upstream is idle
        (`Upstream.start`), so the caller's own work on it overlaps the upstream's. A dialect's call
        goes as the dialect says (`Dialect.upstream_request`: Bedrock signs it again). The credentials
        it carries (in its headers, in the URL) are masked from then on wherever the sink writes."""
        self.sink.redactor.learn([*header_secrets(request.raw_headers, self.shown), *url_secrets(url)])
        headers = forwarded(request.raw_headers)
        if dialect is not None:
            try:
                url, headers = dialect.upstream_request(request.method, url, headers, body)
            except RecordError as exc:  # told when its answer is awaited, as an unreachable upstream
                return Exchange(self.upstream, ("", "", 0), b"", False, UpstreamError(str(exc)))
        return self.upstream.start(request.method, url, headers, body)

    async def forward(self, request: web.Request, url: str, body: bytes, dialect: Dialect | None,
                      target: Target | None, exchange: Exchange | None = None) -> web.StreamResponse:
        """Send the call to `url` (or take the `exchange` begun for it by `start`) and answer the client
        as the upstream answers; `target` None: pass it on and record nothing (a request no dialect
        reads, `GET /v1/models`, ...)."""
        if exchange is None:
            exchange = self.start(request, url, body, dialect)
        try:  # closed whatever happens: a connection read to its end goes back to the pool, any other is dropped
            return await self._answer(request, exchange, url, dialect, target)
        finally:
            exchange.close()

    async def _answer(self, request: web.Request, exchange: Exchange, url: str, dialect: Dialect | None,
                      target: Target | None) -> web.StreamResponse:
        try:
            upstream = await exchange.answer()
        except UpstreamError as exc:
            # Nothing was answered, so nothing is recorded: the call never happened as far as replay goes.
            message = self.sink.redactor.text(f"cannot reach the upstream {shown_url(url)}: {exc}")
            log.warning("mockllm record: %s", message)
            if target is not None:
                self._failed(target.caller, 502, message)
            shape = dialect or DEFAULT
            error = shape.error_body(f"mockllm record: {message}", "upstream_unreachable", 502)
            return web.Response(status=502, body=error, content_type="application/json",
                                headers={"x-should-retry": "false", **(shape.error_headers(error) or {})})
        if dialect is None or target is None:
            return await _relay(request, upstream)
        if upstream.status >= 400:
            response = await _relay(request, upstream)
            failed = _failure(upstream.status, _bytes(response))
            if upstream.status >= 500 or upstream.status in UNKEPT_STATUSES:
                self._failed(target.caller, upstream.status, f"the upstream answered {upstream.status} "
                             f"{failed.code}: {failed.message}")
            self._later(self._record_failure, target, failed)
            return response
        if upstream.content_type == _media_type(dialect.stream_type):
            return await self._stream(request, upstream, dialect, target)
        response = await _relay(request, upstream)
        self._later(self._record_whole, dialect, _bytes(response), target)
        return response

    async def _stream(self, request: web.Request, upstream: Answer, dialect: Dialect,
                      target: Target) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason,
                                      headers=returned(upstream.headers))
        target.call.dialect = dialect.name
        pieces: list[tuple[int, bytes]] = []  # (arrival ms, bytes) of every piece passed on, not yet decoded
        keep = pieces.append
        decoder = reader = None  # made after the first piece is passed on: not on the first byte's path
        ending = "done"
        try:
            await response.prepare(request)
            async for piece in upstream.iter_any():
                await response.write(piece)  # first: the client never waits for the recorder
                if decoder is None:
                    decoder, reader = dialect.stream_decoder(), dialect.frame_reader()
                if decoder.chains:  # its id must be known before the request that continues it arrives
                    assert reader is not None
                    self._decode(decoder, reader.feed(piece), target.call, now_ms(), target.caller)
                else:
                    keep((now_ms(), piece))
            await response.write_eof()
        except (asyncio.CancelledError, ConnectionResetError):
            ending = "left"  # the client went away: before the answer's end (an agent cancelling), or after it
            raise
        except UpstreamCut:
            ending = "cut"  # the upstream broke off; the client sees the same cut
        finally:
            if decoder is None:
                decoder, reader = dialect.stream_decoder(), dialect.frame_reader()
            assert reader is not None
            self._later(self._record_stream, decoder, reader, pieces, now_ms(), ending, target)
        return response

    # -- recording, once the call is over -------------------------------------------------------------

    def _later(self, work: Work, *args: Any) -> None:
        """Record an ended call: now in the background (`mockllm record`), or at `settle` (`defer`)."""
        self.in_flight += 1
        self._settled.clear()
        self._pending.append((work, args))
        if not self.defer and (self._worker is None or self._worker.done()):
            self._worker = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        """Record the calls that ended, a slice at a time, yielding to the loop in between."""
        while self._pending:
            work, args = self._pending.popleft()
            steps = self._run(work, args)
            while next(steps, True) is None:
                await asyncio.sleep(0)

    def _run(self, work: Work, args: tuple[Any, ...], *, all_at_once: bool = False) -> Iterator[None]:
        """Run one call's recording (as an iterator of its slices, unless `all_at_once`)."""
        steps = self._guarded(work, args)
        if all_at_once:
            for _ in steps:
                pass
        return steps

    def _guarded(self, work: Work, args: tuple[Any, ...]) -> Iterator[None]:
        try:
            target = next((a for a in args if isinstance(a, Target)), None)
            if target is not None and target.request is not None:
                read_inputs(target.call, target.request.tail)
                target.call.offers_tools = offers_tools(target.request)
                # Only a session's first call writes it (`events`): read for every call, off every path.
                target.call.system = system_text(target.request.messages)
                target.call.tools = target.request.offered_tools
            yield from work(*args)
        except Exception:  # a bug, a closed tree: it must not end the recording of other calls
            log.exception("a forwarded call could not be recorded")
        finally:
            self.in_flight -= 1
            if not self.in_flight and not self.defer:  # a deferring forwarder settles on a thread: no loop Event
                self._settled.set()

    def _record_stream(self, decoder: StreamDecoder, reader: FrameReader, pieces: list[tuple[int, bytes]], end: int,
                       ending: str, target: Target) -> Iterator[None]:
        caller, call = target.caller, target.call
        for at, piece in pieces:
            events = reader.feed(piece)
            for start in range(0, len(events), SLICE):
                self._decode(decoder, events[start:start + SLICE], call, at, caller)
                yield
        self._decode(decoder, reader.close(), call, end, caller)
        closing = decoder.close()
        # A client that read the answer's end has all of it, whatever it does next: the call is then
        # recorded as the upstream sent it; only leaving before the end is a cut.
        aborted = ending == "left" and not decoder.ended
        if aborted:
            closing[-1] = FinishChunk(FinishReason("aborted"))
        call.chunks.extend(TimedChunk(end, c) for c in closing)
        finish = call.finish
        if finish is not None and finish.kind == "error" and not aborted:
            failure = finish.failure or Failure(finish.message, finish.code)
            self._failed(caller, 200, f"the upstream's stream ended in an error: {failure.code or ''} "
                         f"{failure.message or ''}".rstrip())
            self.sink.record_cut(caller, call, failure)
        else:
            self.sink.record(caller, call)

    def _record_whole(self, dialect: Dialect, body: bytes, target: Target) -> Iterator[None]:
        yield  # started in the background: the client has its answer already
        caller, call = target.caller, target.call
        events = dialect.body_events(body)
        if events is None:
            log.warning("%s: a %s reply that is not a stream was forwarded but not recorded", _named(caller),
                        dialect.name)
            return
        decoder = dialect.stream_decoder()
        end = now_ms()
        self._decode(decoder, events, call, end, caller, keep=False)
        call.dialect, call.body = dialect.name, body  # kept as the provider sent it, not as events made of it
        call.chunks.extend(TimedChunk(end, c) for c in decoder.close())
        self.sink.record(caller, call)

    def _record_failure(self, target: Target, failed: Failed) -> Iterator[None]:
        yield
        self.sink.record_failure(target.caller, target.call, failed)

    def _decode(self, decoder: StreamDecoder, events: list[SSEEvent], call: ObservedCall, at: int,
                caller: Caller, *, keep: bool = True) -> None:
        if keep:  # every event as it came, the envelope's with the content's (`wire.recorded`)
            call.events += events
        for name, data in events:
            try:
                chunks = decoder.feed(name, data)
            except (msgspec.DecodeError, ValueError, TypeError, AttributeError) as exc:
                log.warning("%s: an upstream event could not be read and is not recorded: %s", _named(caller), exc)
                continue
            call.chunks.extend(TimedChunk(at, c) for c in chunks)
        if decoder.reply_id is not None and caller.side_route is None:  # a later request may continue it by id
            self.replies[decoder.reply_id] = caller.session

    def _failed(self, caller: Caller, status: int, message: str) -> None:
        if self.on_failure is not None:  # a run's failure is shown: a key the upstream echoed is masked
            self.on_failure(caller, status, self.sink.redactor.text(message))


def offers_tools(request: Request) -> bool:
    """Whether the request offers any tool, without decoding its (often large) tool definitions."""
    raw = request.raw_tools
    if isinstance(raw, msgspec.Raw):
        return b"".join(bytes(raw).split()) not in (b"", b"[]", b"null")
    return bool(raw)


def _named(caller: Caller) -> str:
    return f"side route {caller.side_route}" if caller.side_route is not None else f"session {caller.session}"


def forwarded(raw_headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The client's headers as the upstream gets them: secrets included (they are forwarded, never
    written), hop-by-hop ones left to each side of the proxy (`Upstream.start` writes its own Host,
    Content-Length and `Accept-Encoding: identity`: the recorder reads the stream it forwards)."""
    return [(name, value) for name, value in raw_headers if name.lower() not in _HOP_BYTES]


def returned(headers: Mapping[str, str]) -> CIMultiDict[str]:
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in _HOP)


async def _relay(request: web.Request, upstream: Answer) -> web.Response:
    """A whole upstream answer, passed on as it came."""
    body = await upstream.read()
    return web.Response(status=upstream.status, reason=upstream.reason, body=body, headers=returned(upstream.headers))


def _bytes(response: web.Response) -> bytes:
    return response.body if isinstance(response.body, bytes) else b""


def _media_type(content_type: str) -> str:
    """`text/event-stream; charset=utf-8` -> `text/event-stream`, as aiohttp reads a response's type."""
    return content_type.partition(";")[0].strip().lower()


def _failure(status: int, body: bytes) -> Failed:
    """An error answer's message and code, from `{"error":{"message","code"|"type"}}` (OpenAI,
    Anthropic), `{"error":{"code":404,"message","status":"NOT_FOUND"}}` (Gemini: its status name is
    the code), `{"error":"message"}` (Ollama: no code) or `{"message"}` (Bedrock: its type, in a
    header, is not kept; replay names it again by status)."""
    error: Any = None
    with contextlib.suppress(msgspec.DecodeError, AttributeError, RecursionError):
        whole = msgspec.json.decode(body)
        error = whole.get("error")
        if error is None and isinstance(whole.get("message"), str):
            error = {"message": whole["message"], "code": whole.get("__type")}
    if isinstance(error, str) and error:
        return Failed(status, error, f"HTTP_{status}")
    if not isinstance(error, dict):
        text = body.decode("utf-8", "replace").strip()
        return Failed(status, text or f"HTTP {status}", f"HTTP_{status}")
    code = error.get("status") if isinstance(error.get("status"), str) else None
    code = code or error.get("code") or error.get("type")
    return Failed(status, str(error.get("message") or f"HTTP {status}"), str(code) if code else f"HTTP_{status}")
