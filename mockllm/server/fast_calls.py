"""The server's fast lane (`hosting/fast_lane.py`): model calls to a run (`/runs/{run}/…`), every
dialect's, and its embeddings calls, answered by the connection itself when their answer is ready
at once; the two admin calls every test makes (`POST /_mockllm/runs`, `DELETE
/_mockllm/runs/{run}`), when they write nothing (a run that records is ended by aiohttp's handler:
its recording is written as it ends); and the health check (`GET /_mockllm/health`), which an
xdist worker makes first on the connection it then makes every admin call on: answered by aiohttp,
it made that connection aiohttp's for good.

The lane decides a call exactly as the model route's handler does (`MockServer.decide`: the same
decoding, routing and run state) and writes the response that handler would (`OutcomeWriter.
at_once`). It declines, with nothing changed, what the handler must serve: another route, an
unknown run (its 404 is the handler's), a run that records (its calls go upstream). An answer that
takes time (a hold, a pace, a fault's delay) is decided here and written by the handler
(`Decided`, taken by `decided_for`), so the run moves on once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, Protocol

from aiohttp import web
from aiohttp.typedefs import Handler
from yarl import URL

from mockllm.hosting.fast_lane import FastHandler, Responder
from mockllm.hosting.under_root import RoutesUnder
from mockllm.replay.journal import CallRecord, RawHeaders
from mockllm.replay.outcome import Outcome, Stream
from mockllm.replay.run import Run
from mockllm.replay.runs import Runs
from mockllm.server.admin import HEALTH_PATH, RUNS_PATH, Admin
from mockllm.server.embeddings import EmbeddingsRoutes
from mockllm.server.mock_errors import internal_error, mock_error
from mockllm.server.streaming import OutcomeWriter
from mockllm.wire.dialect import Dialect
from mockllm.wire.embeddings import EmbeddingsAPI
from mockllm.wire.request import Request


class CallServer(Protocol):
    """What the lane uses of the server (`app.MockServer`): the model route handler's own steps."""

    runs: Runs
    max_body: int
    writer: OutcomeWriter
    embeddings: EmbeddingsRoutes
    admin: Admin

    def decide(self, run: Run, dialect: Dialect, body: bytes, match_info: Mapping[str, str],
               headers: Mapping[str, str], raw_headers: RawHeaders) -> tuple[Request, Outcome] | web.Response: ...

    def call_done(self, run: Run, dialect: Dialect, record: CallRecord) -> None: ...


class Decided(NamedTuple):
    """What the lane decided for a call whose answer takes time, for the model route's handler to write."""

    run: Run
    dialect: Dialect
    outcome: Outcome


class Route(NamedTuple):
    path: str
    run: str
    dialect: Dialect
    match_info: dict[str, str]
    embeddings: EmbeddingsAPI | None  # set: an embeddings call, not a model call


class AdminCall(NamedTuple):
    """`POST /_mockllm/runs` (`run` None), `DELETE /_mockllm/runs/{run}`, or `GET /_mockllm/health`
    (`health`)."""

    run: str | None
    health: bool = False


def decided_for(request: web.Request) -> Decided | None:
    """The lane's decision for this request, if it made one (taken: it is written once)."""
    handler = request.protocol
    if isinstance(handler, FastHandler) and isinstance(handler.decided, Decided):
        decided, handler.decided = handler.decided, None
        return decided
    return None


class FastCalls:
    """The `Lane` of a server: `route` and `answer`, for the runs' model and embeddings routes
    under `under`, and for creating and ending runs."""

    def __init__(self, server: CallServer, under: RoutesUnder) -> None:
        self.server = server
        self.under = under
        self.dialects: dict[Handler, Dialect] = {}  # each model route's handler under `/runs/{run}`: its dialect
        self.embeddings: dict[Handler, EmbeddingsAPI] = {}  # and each embeddings route's: its API

    def model_route(self, handler: Handler, dialect: Dialect) -> None:
        """`handler` serves `dialect`'s model calls under `/runs/{run}`: the lane answers for it."""
        self.dialects[handler] = dialect

    def embeddings_route(self, handler: Handler, api: EmbeddingsAPI) -> None:
        """`handler` serves `api`'s embeddings calls under `/runs/{run}`: the lane answers for it."""
        self.embeddings[handler] = api

    def route(self, method: str, target: str) -> Route | AdminCall | None:
        """A POST to `target` that is a model or embeddings call to a run: its run id, dialect and
        path parameters (as aiohttp's router would have them); a run's creation or end, or the
        health check: an AdminCall; else None."""
        path = target.partition("?")[0]  # no route of the lane's reads the query (Gemini's `alt=sse`)
        if path == HEALTH_PATH:
            return AdminCall(None, health=True) if method == "GET" else None
        if path.startswith(RUNS_PATH):
            return _admin_call(method, path)
        if method != "POST":
            return None
        if "%" in path:
            path = URL.build(path=path, encoded=True).path_safe  # as aiohttp's router sees it
        found = self.under.match(path, "POST")
        if found is None:
            return None
        handler, match_info = found
        api = self.embeddings.get(handler)
        dialect = api.dialect if api is not None else self.dialects.get(handler)
        if dialect is None:
            return None
        return Route(path, match_info["run"], dialect, match_info, api)

    def answer(self, route: Route | AdminCall, headers: Mapping[str, str], raw_headers: RawHeaders, body: bytes,
               handler: Responder) -> bool:
        """Answer the call through `handler` (True), or leave it to aiohttp (False): before
        anything changed, or with its decision on `handler` for the model route's handler."""
        if isinstance(route, AdminCall):
            return self._admin(route, headers, body, handler)
        server = self.server
        run = server.runs.get(route.run)
        if run is None or run.recording or run.episodes or len(body) > server.max_body:
            return False
        dialect = route.dialect
        try:
            if route.embeddings is not None:  # answered from the recording, or a miss: nothing to wait for
                handler.respond(server.embeddings.at_once(route.embeddings, run, body, route.match_info, raw_headers))
                return True
            decision = server.decide(run, dialect, body, route.match_info, headers, raw_headers)
            if isinstance(decision, web.Response):
                handler.respond(decision)
                return True
            outcome = decision[1]
            response = server.writer.at_once(outcome, dialect)
            if response is None:
                handler.decided = Decided(run, dialect, outcome)
                return False
            try:
                if not handler.respond(response) and isinstance(outcome, Stream):
                    run.left_early(outcome)  # its retry gets the same entry again
            finally:
                server.call_done(run, dialect, outcome.record)
        except Exception as exc:
            handler.respond(mock_error(500, "mockllm_internal_error", internal_error(f"POST {route.path}", exc),
                                       dialect=dialect))
        return True

    def _admin(self, call: AdminCall, headers: Mapping[str, str], body: bytes, handler: Responder) -> bool:
        admin = self.server.admin
        if call.health:
            handler.respond(admin.healthy())
            return True
        if call.run is None:
            host = headers.get("Host")
            if host is None or len(body) > self.server.max_body:
                return False  # aiohttp's handler names the server its own way, and refuses the body
            handler.respond(admin.created(body, f"http://{host}"))
            return True
        response = admin.end_at_once(call.run)  # `?discard=` is read by a run that records only: not here
        if response is None:
            return False
        handler.respond(response)
        return True

    def forget(self, decided: Decided) -> None:
        """A call decided here whose client left before the model route's handler ran: nothing of
        its answer was written, so it ends as a stream whose client left early ends (its retry
        gets the same entry again), a hang as a hang whose client left."""
        outcome = decided.outcome
        if isinstance(outcome, Stream) and outcome.held is None:
            decided.run.left_early(outcome)
        self.server.call_done(decided.run, decided.dialect, outcome.record)


def _admin_call(method: str, path: str) -> AdminCall | None:
    """A run's creation or end, from a path under RUNS_PATH (a run id with an escape in it is left
    to aiohttp's router to unescape)."""
    if method == "POST" and path == RUNS_PATH:
        return AdminCall(None)
    run = path.removeprefix(RUNS_PATH + "/")
    if method == "DELETE" and run and run != path and "/" not in run and "%" not in run:
        return AdminCall(run)
    return None
