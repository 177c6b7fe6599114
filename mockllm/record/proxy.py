"""The record-mode proxy: forwards each model call to the upstream, streams its answer back to the
client as it arrives, and hands what it saw to the session tree.

Every registered dialect's route is served under `/v1` and forwarded to the upstream base plus the
same path. Each upstream piece is written to the client the moment it arrives (no buffering:
recording reads a copy of the bytes, it never holds them back), and is fed to the dialect's stream
decoder with its arrival time. The call is recorded when it ends. Other `/v1/...` requests
(`GET /v1/models`, ...) are forwarded and not recorded.

Headers: the client's headers go upstream as they came (hop-by-hop ones aside), mockllm's own
included: an upstream that is itself a mockllm (replaying a tree while a new one is recorded)
routes by them, and a provider ignores them. Secrets (`Authorization`, `x-api-key`, ...) are
forwarded and never written: nothing from a request's headers reaches the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import aiohttp
import msgspec
from aiohttp import web
from multidict import CIMultiDict

from mockllm.dsh.chunks import Failure, FinishChunk, FinishReason
from mockllm.errors import RequestError
from mockllm.record.call import ObservedCall, TimedChunk, observe
from mockllm.record.tree import Caller, Failed, Lineage, SessionTree
from mockllm.replay.conversations import ConversationIndex
from mockllm.replay.routing import calling_session, header_session
from mockllm.wire import DEFAULT, DIALECTS
from mockllm.wire.dialect import Dialect, Request, StreamDecoder
from mockllm.wire.sse_reader import Event, SSEReader

log = logging.getLogger("mockllm.record.command")

PARENT_HEADER = "x-mockllm-parent"
FORK_HEADER = "x-mockllm-fork"
# Hop-by-hop and framing headers: each side of the proxy sets its own.
_HOP = frozenset(("host", "connection", "keep-alive", "transfer-encoding", "content-length", "te", "trailer",
                  "upgrade", "proxy-authorization", "proxy-connection", "accept-encoding", "content-encoding"))


def now_ms() -> int:
    return int(time.time() * 1000)


class Recorder:
    """Routes each call to its session and records it into `tree`."""

    def __init__(self, tree: SessionTree, upstream: str, client: aiohttp.ClientSession,
                 session_headers: Sequence[str]) -> None:
        self.tree = tree
        self.session_headers = session_headers  # options.session_header_names(): lowercased, in lookup order
        self.upstream = upstream.rstrip("/")
        self.client = client
        self._conversations = ConversationIndex()
        self._headerless: dict[str, str] = {}  # conversation live id -> recorded session id
        self._replies: dict[str, str] = {}  # upstream reply id -> recorded session id (Responses chains)

    def session_of(self, headers: Mapping[str, str], request: Request) -> str:
        """The calling session's recorded id, found as replay will find it (`replay.routing`)."""
        return calling_session(header_session(headers, self.session_headers), request, self._replies.get,
                               self._by_conversation)

    def _by_conversation(self, request: Request) -> str:
        live_id, new = self._conversations.route(request.messages)
        if new:  # an agent that names none of its sessions: each conversation gets an id of its own
            self._headerless[live_id] = self.tree.new_id()
        return self._headerless[live_id]

    async def forward(self, request: web.Request, dialect: Dialect | None) -> web.StreamResponse:
        body = await request.read()
        neutral: Request | None = None
        if dialect is not None:
            try:
                neutral = dialect.decode_request(body)
            except RequestError as exc:
                log.warning("%s: not recorded: %s", request.path, exc)
        url = self.upstream + request.path_qs[len("/v1"):]
        started = now_ms()
        # Routed and numbered as it arrives, before it is forwarded: the order answers end in must
        # not decide which session a request joins, nor the order of sessions in the tree.
        target = None if neutral is None else (self._caller(request.headers, neutral), observe(
            neutral.tail, started, arrival=self.tree.arrived(), offers_tools=_offers_tools(neutral)))
        try:
            upstream = await self.client.request(request.method, url, data=body, headers=_forwarded(request.headers))
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            # Nothing was answered, so nothing is recorded: the call never happened as far as replay goes.
            reason = str(exc) or type(exc).__name__
            message = f"mockllm record: cannot reach the upstream {url}: {reason}"
            log.warning("%s", message)
            error = (dialect or DEFAULT).error_body(message, "upstream_unreachable", 502)
            return web.Response(status=502, body=error, content_type="application/json",
                                headers={"x-should-retry": "false"})
        async with upstream:
            if dialect is None or neutral is None or target is None:
                return await _relay(request, upstream)
            caller, call = target
            if upstream.status >= 400:
                response = await _relay(request, upstream)
                failed = _failure(upstream.status, response.body if isinstance(response.body, bytes) else b"")
                self.tree.record_failure(caller, call, failed)
                return response
            if neutral.stream and upstream.content_type == "text/event-stream":
                return await self._stream(request, upstream, dialect, caller, call)
            response = await _relay(request, upstream)
            events = dialect.body_events(response.body if isinstance(response.body, bytes) else b"")
            if events is None:
                log.warning("%s: a %s reply that is not a stream was forwarded but not recorded",
                            _named(caller), dialect.name)
                return response
            decoder = dialect.stream_decoder()
            end = now_ms()
            self._decode(decoder, events, call, end, caller)
            call.chunks.extend(TimedChunk(end, c) for c in decoder.close())
            self.tree.record(caller, call)
            return response

    def _caller(self, headers: Mapping[str, str], request: Request) -> Caller:
        """A `--side-route` model's side route (no session routing at all, as replay serves it), else
        the calling session and what its headers say of its lineage."""
        if request.model is not None and request.model in self.tree.side:
            return Caller(side_route=request.model)
        lineage = Lineage(headers.get(PARENT_HEADER) or None,
                          headers.get(FORK_HEADER, "").strip().lower() in ("true", "1", "yes"))
        return Caller(self.session_of(headers, request), lineage)

    async def _stream(self, request: web.Request, upstream: aiohttp.ClientResponse, dialect: Dialect,
                      caller: Caller, call: ObservedCall) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason,
                                      headers=_returned(upstream.headers))
        decoder = dialect.stream_decoder()
        reader = SSEReader()
        outcome = "done"
        try:
            await response.prepare(request)
            async for piece in upstream.content.iter_any():
                await response.write(piece)  # first: the client never waits for the recorder
                self._decode(decoder, reader.feed(piece), call, now_ms(), caller)
            await response.write_eof()
        except (asyncio.CancelledError, ConnectionResetError):
            outcome = "left"  # the client went away: before the answer's end (an agent cancelling), or after it
            raise
        except aiohttp.ClientPayloadError:
            outcome = "cut"  # the upstream broke off; the client sees the same cut
        finally:
            end = now_ms()
            self._decode(decoder, reader.close(), call, end, caller)
            closing = decoder.close()
            # A client that read the answer's end has all of it, whatever it does next: the openai SDK
            # closes its connection right after `[DONE]`, often before the upstream's own end arrives.
            # The call is then recorded as the upstream sent it; only leaving before the end is a cut.
            if outcome == "left" and not decoder.ended:
                outcome = "aborted"
                closing[-1] = FinishChunk(FinishReason("aborted"))
            call.chunks.extend(TimedChunk(end, c) for c in closing)
            finish = call.finish
            if finish is not None and finish.kind == "error" and outcome != "aborted":
                failure = finish.failure or Failure(finish.message, finish.code)
                self.tree.record_cut(caller, call, failure)
            else:
                self.tree.record(caller, call)
        return response

    def _decode(self, decoder: StreamDecoder, events: Iterable[Event], call: ObservedCall, at: int,
                caller: Caller) -> None:
        for name, data in events:
            try:
                chunks = decoder.feed(name, data)
            except (msgspec.DecodeError, ValueError, TypeError, AttributeError) as exc:
                log.warning("%s: an upstream event could not be read and is not recorded: %s", _named(caller), exc)
                continue
            call.chunks.extend(TimedChunk(at, c) for c in chunks)
        if decoder.reply_id is not None and caller.side_route is None:  # a later request may continue it by id
            self._replies[decoder.reply_id] = caller.session


def _offers_tools(request: Request) -> bool:
    """Whether the request offers any tool, without decoding its (often large) tool definitions."""
    raw = request.raw_tools
    if isinstance(raw, msgspec.Raw):
        return b"".join(bytes(raw).split()) not in (b"", b"[]", b"null")
    return bool(raw)


def _named(caller: Caller) -> str:
    return f"side route {caller.side_route}" if caller.side_route is not None else f"session {caller.session}"


def _forwarded(headers: Mapping[str, str]) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        if name.lower() not in _HOP:
            out.add(name, value)
    out["Accept-Encoding"] = "identity"  # the recorder reads the stream it forwards
    return out


def _returned(headers: Mapping[str, str]) -> CIMultiDict[str]:
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in _HOP)


async def _relay(request: web.Request, upstream: aiohttp.ClientResponse) -> web.Response:
    """A whole upstream answer, passed on as it came."""
    body = await upstream.read()
    return web.Response(status=upstream.status, reason=upstream.reason, body=body,
                        headers=_returned(upstream.headers))


def _failure(status: int, body: bytes) -> Failed:
    """An error answer's message and code, from `{"error":{"message","code"|"type"}}` (OpenAI, Anthropic)."""
    error: Any = None
    with contextlib.suppress(msgspec.DecodeError, AttributeError):
        error = msgspec.json.decode(body).get("error")
    if not isinstance(error, dict):
        text = body.decode("utf-8", "replace").strip()
        return Failed(status, text or f"HTTP {status}", f"HTTP_{status}")
    code = error.get("code") or error.get("type")
    return Failed(status, str(error.get("message") or f"HTTP {status}"), str(code) if code else f"HTTP_{status}")


def create_app(recorder: Recorder) -> web.Application:
    app = web.Application(client_max_size=1024**3)
    for dialect in DIALECTS:
        app.router.add_post("/v1" + dialect.path, _handler(recorder, dialect))
    app.router.add_route("*", "/v1/{tail:.*}", _handler(recorder, None))
    return app


def _handler(recorder: Recorder, dialect: Dialect | None) -> Any:
    async def handle(request: web.Request) -> web.StreamResponse:
        return await recorder.forward(request, dialect)

    return handle
