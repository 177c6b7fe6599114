"""The record-mode proxy: forwards each model call to the upstream, streams its answer back to the
client as it arrives, and hands what it saw to the session tree.

Every registered dialect's routes are served at the proxy's root, as under a replay base root
(`/v1/chat/completions`, `/v1beta/models/{model}:…`, `/api/chat`), and forwarded to the upstream
(`upstream_url`): a path under `/v1` to the upstream base (`/v1` included) plus the rest of the
path, any other path to the upstream base without its `/v1` plus the whole path (`forward`: each
upstream piece is written to the client the moment it arrives, and decoded once the call is
over, its events split by the dialect's frame reader: SSE, NDJSON). Anthropic's `POST
/v1/messages/count_tokens` is forwarded as it is, and a count the upstream gave (a 200) is kept
with its request in the tree's `count_tokens.json`, which replay answers from. Other requests
(`GET /v1/models`, Ollama's `/api/tags`, ...) are forwarded and not recorded.

Headers: the client's headers go upstream as they came (hop-by-hop ones aside), mockllm's own
included: an upstream that is itself a mockllm (replaying a tree while a new one is recorded)
routes by them, and a provider ignores them. Secrets (`Authorization`, `x-api-key`, ...) are
forwarded and never written: nothing from a request's headers reaches the log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
from aiohttp import web

from mockllm.errors import TOO_DEEP, RecordError, RequestError
from mockllm.hosting.bodies import MAX_BODY, read_body
from mockllm.record.call import ObservedCall, observe
from mockllm.record.forward import Forwarder, OnFailure, Target, now_ms, offers_tools
from mockllm.record.tree import Caller, Lineage, SessionTree
from mockllm.record.upstream import Exchange, Upstream
from mockllm.replay.conversations import ConversationIndex
from mockllm.replay.routing import calling_session, header_session, text_header
from mockllm.scenario.embeddings import RecordedEmbedding
from mockllm.wire import DEFAULT, DIALECTS
from mockllm.wire.dialect import Dialect
from mockllm.wire.embeddings import EMBEDDINGS_APIS, EmbeddingsAPI
from mockllm.wire.request import Request, system_text

# `mockllm record` writes each call after it is answered, off the client's path. Under load that
# work could fall behind without bound (killed after 61 answered calls, 31 were not on disk): once
# this many answered calls (or file writes) wait, a new call is forwarded only when they are on disk.
LAG_BOUND = 8
log = logging.getLogger("mockllm.record.command")

PARENT_HEADER = "x-mockllm-parent"
FORK_HEADER = "x-mockllm-fork"
COUNT_TOKENS_ROUTE = "/v1/messages/count_tokens"  # Anthropic's, beside its model route


class Recorder:
    """Routes each call to its session and records it into `tree`."""

    def __init__(self, tree: SessionTree, upstream: str, forwarder: Forwarder,
                 session_headers: tuple[str, ...]) -> None:
        self.tree = tree
        self.session_headers = session_headers  # options.session_header_names(): lowercased, in lookup order
        self.upstream = upstream.rstrip("/")
        self.upstream_root = self.upstream.removesuffix("/v1")  # for routes beside /v1 (Gemini, Ollama)
        self.forwarder = forwarder
        self._conversations = ConversationIndex()
        self._headerless: dict[str, str] = {}  # conversation live id -> recorded session id

    @classmethod
    def into(cls, tree: SessionTree, upstream: str, client: Upstream, session_headers: tuple[str, ...],
             on_failure: OnFailure | None = None, *, defer: bool = False) -> Recorder:
        """A recorder writing `tree`, forwarding through `client` (`defer`: see `Forwarder`)."""
        forwarder = Forwarder(client, tree, on_failure, defer=defer)
        forwarder.shown = frozenset(session_headers)
        return cls(tree, upstream, forwarder, session_headers)

    def session_of(self, headers: Mapping[str, str], request: Request) -> str:
        """The calling session's recorded id, found as replay will find it (`replay.routing`)."""
        return calling_session(header_session(headers, self.session_headers), request,
                               self.forwarder.replies.get, self._by_conversation)

    def _by_conversation(self, request: Request) -> str:
        live_id, new = self._conversations.route(request.messages)
        if new:  # an agent that names none of its sessions: each conversation gets an id of its own
            self._headerless[live_id] = self.tree.new_id()
        return self._headerless[live_id]

    async def forward(self, request: web.Request, dialect: Dialect | None, *, body: bytes | None = None,
                      neutral: Request | None = None, url: str | None = None,
                      exchange: Exchange | None = None) -> web.StreamResponse:
        """Forward one call (to `url`, else where `upstream_url` says) and record it; `body` and
        `neutral` when the caller has read and decoded the request already, `exchange` when it has
        begun sending it (`Forwarder.start`)."""
        if body is None:
            body = await read_body(request, MAX_BODY)
            if body is None:
                return refused(dialect, f"request body over {MAX_BODY} bytes (inflated)", 413)
        url = url or self.upstream_url(request.path_qs)
        try:  # before anything is sent: a session the recording cannot name is refused, not recorded
            self.check_headers(request.headers)
        except RequestError as exc:
            if exchange is not None:
                exchange.close()
            return refused(dialect, str(exc))
        if not self.forwarder.defer and self.backlog() >= LAG_BOUND:
            await self.caught_up()
        if exchange is None:  # sent now on an idle connection: decoding and routing overlap the upstream's work
            exchange = self.forwarder.start(request, url, body, dialect)
        if dialect is not None and neutral is None:
            try:
                neutral = dialect.decode_routed(body, request.match_info)
            except RequestError as exc:
                log.warning("%s: not recorded: %s", request.path, exc)
            except RecursionError:
                log.warning("%s: not recorded: %s", request.path, TOO_DEEP)
        # Routed and numbered as it arrives, before it is forwarded: the order answers end in must
        # not decide which session a request joins, nor the order of sessions in the tree. What it
        # brings is read then too, unless the call is recorded later anyway (`defer`).
        target = None
        if neutral is not None and dialect is not None:
            caller, started, arrival = self._caller(request.headers, neutral), now_ms(), self.tree.arrived()
            if self.forwarder.defer:  # what it brings is read when it is recorded (its system prompt too)
                target = Target(caller, ObservedCall([], False, started, arrival=arrival), neutral)
            else:
                # A session's first system prompt is written in its log (replay binds twins by it): read
                # only while the session has recorded nothing, so later calls decode no more than before.
                first = caller.side_route is None and caller.session not in self.tree.sessions
                target = Target(caller, observe(neutral.tail, started, arrival=arrival,
                                                offers_tools=offers_tools(neutral),
                                                system=system_text(neutral.messages) if first else None,
                                                tools=neutral.offered_tools if first else None))
        return await self.forwarder.forward(request, url, body, dialect, target, exchange)

    async def count_tokens(self, request: web.Request, *, body: bytes | None = None,
                           url: str | None = None) -> web.StreamResponse:
        """Forward a `count_tokens` call (to `url`, else where `upstream_url` says); the answer goes
        back as it came, and a count the upstream gave is kept in the tree."""
        if body is None:
            body = await read_body(request, MAX_BODY)
            if body is None:
                return refused(None, f"request body over {MAX_BODY} bytes (inflated)", 413)
        response = await self.forwarder.forward(request, url or self.upstream_url(request.path_qs), body, None, None)
        pair = counted_pair(body, response)
        if pair is not None:
            try:
                self.tree.record_count(*pair)
            except RecordError as exc:  # it ended after the recording closed: the client has its answer still
                log.warning("%s: count not recorded: %s", request.path, exc)
        return response

    async def embeddings(self, request: web.Request, api: EmbeddingsAPI) -> web.StreamResponse:
        """Forward an embeddings call; the answer goes back as it came, and an answer the upstream gave
        (a 200) is kept in the tree's `embeddings.json`."""
        body = await request.read()
        response = await self.forwarder.forward(request, self.upstream_url(request.path_qs), body, None, None)
        pair = embedded_pair(api, request.match_info, body, response)
        if pair is not None:
            try:
                self.tree.record_embedding(pair)
            except RecordError as exc:  # it ended after the recording closed: the client has its answer still
                log.warning("%s: embeddings not recorded: %s", request.path, exc)
        return response

    def backlog(self) -> int:
        """Calls answered and not yet on disk, counting the file work (a log's batch, a sidecar) each waits on."""
        return self.forwarder.in_flight + self.tree.unwritten

    async def caught_up(self) -> None:
        """Wait until every call answered so far is recorded and on disk."""
        await self.forwarder.settled()
        await self.tree.flushed()

    def check_headers(self, headers: Mapping[str, str]) -> None:
        """Raise RequestError for a session or lineage header that is not UTF-8 (`routing.text_header`):
        its value would be written in the session's log header, and no log can hold it."""
        header_session(headers, self.session_headers)
        text_header(headers, PARENT_HEADER)

    def upstream_url(self, path_qs: str) -> str:
        """Where a path of the proxy goes upstream: under `/v1`, the upstream base plus the rest;
        beside it (`/v1beta/…`, `/api/…`), the upstream base without its `/v1` plus the whole path."""
        return upstream_url(self.upstream, path_qs)

    def _caller(self, headers: Mapping[str, str], request: Request) -> Caller:
        """A `--side-route` model's side route (no session routing at all, as replay serves it), else
        the calling session and what its headers say of its lineage."""
        if request.model is not None and request.model in self.tree.side:
            return Caller(side_route=request.model)
        return Caller(self.session_of(headers, request), lineage_of(headers))


def upstream_url(base: str, path_qs: str) -> str:
    """A path under a base root, sent to an upstream `base` (`/v1` included): see `Recorder.upstream_url`."""
    if path_qs == "/v1" or path_qs.startswith(("/v1/", "/v1?")):
        return base + path_qs[len("/v1"):]
    return base.removesuffix("/v1") + path_qs


def counted_pair(body: bytes, response: web.StreamResponse) -> tuple[Any, Any] | None:
    """A forwarded `count_tokens` call's (request, answer) as JSON, when the upstream counted it (a
    200 with a JSON body); None otherwise (an error, an unreachable upstream: nothing to replay)."""
    if response.status != 200 or not isinstance(response, web.Response) or not isinstance(response.body, bytes):
        return None
    try:
        return msgspec.json.decode(body), msgspec.json.decode(response.body)
    except (msgspec.DecodeError, RecursionError):
        return None


def embedded_pair(api: EmbeddingsAPI, params: Mapping[str, str], body: bytes,
                  response: web.StreamResponse) -> RecordedEmbedding | None:
    """A forwarded embeddings call as recorded, when the upstream answered it (a 200 with a JSON body);
    None otherwise (an error, an unreachable upstream, a body no replay could match)."""
    if response.status != 200 or not isinstance(response, web.Response) or not isinstance(response.body, bytes):
        return None
    try:
        call, request = api.read(body, params)
        answer = msgspec.json.decode(response.body)
    except (RequestError, msgspec.DecodeError):
        return None
    return RecordedEmbedding(api.name, call.model, request, answer) if isinstance(answer, dict) else None

def refused(dialect: Dialect | None, message: str, status: int = 400) -> web.Response:
    """An error in the dialect's shape (OpenAI's for a path no dialect reads), never retried."""
    code = "request_too_large" if status == 413 else "invalid_request"
    body = (dialect or DEFAULT).error_body(f"mockllm record: {message}", code, status)
    return web.Response(status=status, body=body, content_type="application/json", headers={"x-should-retry": "false"})


def lineage_of(headers: Mapping[str, str]) -> Lineage:
    """What a call's headers say of its session's lineage (`x-mockllm-parent`, `x-mockllm-fork`); a parent
    that is not UTF-8 text names no session (`Recorder.check_headers` refuses it where it can)."""
    parent = headers.get(PARENT_HEADER) or None
    if parent is not None and not parent.isascii():
        try:
            parent.encode("utf-8")
        except UnicodeEncodeError:
            parent = None
    return Lineage(parent,
                   headers.get(FORK_HEADER, "").strip().lower() in ("true", "1", "yes"))


def create_app(recorder: Recorder, install: Callable[[web.Application], None] | None = None) -> web.Application:
    """The proxy's routes; `install` adds more before the catch-all forward (the MCP servers' `/mcp/NAME`)."""
    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post(COUNT_TOKENS_ROUTE, recorder.count_tokens)
    for api in EMBEDDINGS_APIS:  # before the dialects': Gemini's `{model}:{verb}` would take its routes
        for route in api.routes:
            app.router.add_post(route, _embeddings_handler(recorder, api))
    if install is not None:
        install(app)
    for dialect in DIALECTS:
        for route in dialect.routes:
            app.router.add_post(route, _handler(recorder, dialect))
    app.router.add_route("*", "/{tail:.*}", _handler(recorder, None))
    return app


def _embeddings_handler(recorder: Recorder, api: EmbeddingsAPI) -> Any:
    async def handle(request: web.Request) -> web.StreamResponse:
        return await recorder.embeddings(request, api)

    return handle


def _handler(recorder: Recorder, dialect: Dialect | None) -> Any:
    async def handle(request: web.Request) -> web.StreamResponse:
        return await recorder.forward(request, dialect)

    return handle
