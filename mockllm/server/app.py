"""The HTTP face: `create_app()` builds the aiohttp application; handlers stay thin.

Addresses (DESIGN.md §3): `/scenarios/{name}/v1/…` (the scenario's default run), `/runs/{run}/v1/…`
(a run made with `POST /_mockllm/runs`), `/v1/…` when exactly one scenario is loaded, and the
admin endpoints and the inspector (`server/inspector.py`) under `/_mockllm/`. Every registered wire
dialect has its routes under each base root (the base without `/v1`: `/scenarios/{name}`,
`/runs/{run}`, the server's root), since not every API lives under `/v1` (Gemini's `/v1beta/…`,
Ollama's `/api/…`); this module names none of them. A model route's handler finds the run, reads
and decodes the body (with the route's path parameters), asks the run what the call gets
(`Run.answer`), and writes that outcome; an open inspector page hears of it (`events.Hub`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping

import msgspec
from aiohttp import web

from mockllm.errors import TOO_DEEP, RecordingError, RequestError
from mockllm.hosting.bodies import MAX_BODY, read_body
from mockllm.hosting.fast_lane import LANE
from mockllm.hosting.under_root import RoutesUnder
from mockllm.numbering import call_name
from mockllm.options import ServeOptions
from mockllm.replay.catalog import warm
from mockllm.replay.journal import CallRecord, RawHeaders
from mockllm.replay.outcome import Live, Outcome
from mockllm.replay.routing import header_session
from mockllm.replay.run import Run
from mockllm.replay.runs import Runs
from mockllm.scenario.load import Suite
from mockllm.server.admin import HEALTH_PATH, RUNS_PATH, Admin, scenario_error
from mockllm.server.embeddings import EmbeddingsRoutes
from mockllm.server.events import Hub
from mockllm.server.fast_calls import FastCalls, decided_for
from mockllm.server.inspector import Inspector
from mockllm.server.live import LiveCalls
from mockllm.server.mcp import McpRoutes
from mockllm.server.mock_errors import PASSED_ON, internal_error, mock_error, too_large
from mockllm.server.streaming import OutcomeWriter, Pacer
from mockllm.wire import DEFAULT, DIALECTS
from mockllm.wire.dialect import Dialect, InfoRoute
from mockllm.wire.embeddings import EMBEDDINGS_APIS
from mockllm.wire.models import ANTHROPIC_VERSION, models_body
from mockllm.wire.request import Request

log = logging.getLogger("mockllm")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class MockServer:
    def __init__(self, suite: Suite, options: ServeOptions) -> None:
        self.suite = suite
        self.options = options
        self.runs = Runs(suite.scenarios, options)
        for catalog in self.runs.catalogs.values():
            warm(catalog, options)  # rendered before the first request
        self.session_headers = options.all_session_headers
        self.max_body = MAX_BODY  # the app's client_max_size too (create_app)
        self.live = LiveCalls(suite, self.runs, options)
        self.admin = Admin(suite, self.runs, self.max_body, self.live)
        self.writer = OutcomeWriter()
        self.hub = Hub()  # the inspector page's live events
        self.runs.listener = self.hub.run_changed
        self.inspector = Inspector(suite, self.runs, self.hub)
        self.embeddings = EmbeddingsRoutes(self._run_for, self.live, self.max_body, self.hub)

    @property
    def pacer(self) -> Pacer:
        return self.writer.pacer

    def _run_for(self, request: web.Request, dialect: Dialect = DEFAULT) -> Run | web.Response:
        """The run a request's base names, or the error to answer."""
        info = request.match_info
        if "run" in info:
            run = self.runs.get(info["run"])
            if run is None:
                return mock_error(404, "unknown_run", f"unknown run {info['run']!r}: it was never created, or was "
                                  "ended with DELETE; create one with POST /_mockllm/runs", dialect=dialect)
            return run
        if "name" in info:
            name = info["name"]
        elif len(self.suite.scenarios) == 1 and not self.suite.broken:
            name = next(iter(self.suite.scenarios))
        else:
            return mock_error(404, "unknown_run", "/v1 is served only when exactly one scenario is loaded; use "
                              f"/scenarios/NAME/v1 with NAME one of: {', '.join(sorted(self.suite.scenarios))}",
                              dialect=dialect)
        return scenario_error(self.suite, name, dialect) or self.runs.default(name)

    def model_route(self, dialect: Dialect) -> Handler:
        """The handler of `dialect`'s route under every base."""

        async def answer(request: web.Request) -> web.StreamResponse:
            if _is_websocket(request):
                return _upgrade_required(request, dialect)
            try:
                return await self._answer(request, dialect)
            except PASSED_ON:
                raise
            except Exception as exc:
                return mock_error(500, "mockllm_internal_error", internal_error(request, exc), dialect=dialect)

        return answer

    async def _answer(self, request: web.Request, dialect: Dialect) -> web.StreamResponse:
        decided = decided_for(request)
        if decided is not None:  # the fast lane's decision, which takes time to write
            return await self._write(request, decided.run, decided.dialect, decided.outcome)
        run = self._run_for(request, dialect)
        if not isinstance(run, Run):  # an error response (Run is a plain class: a cheap check)
            return run
        body = await read_body(request, self.max_body)
        if body is None:
            return too_large(self.max_body, dialect)
        early = self.live.send_early(request, run, dialect, body)
        try:
            decision = self.decide(run, dialect, body, request.match_info, request.headers, request.raw_headers)
        except BaseException:
            if early is not None:  # begun for nothing: its connection is dropped
                early.close()
            raise
        if isinstance(decision, web.Response):
            if early is not None:
                early.close()
            return decision
        call, outcome = decision
        if not isinstance(outcome, Live):
            return await self._write(request, run, dialect, outcome)
        try:  # a record mode: the upstream answers
            response = await self.live.call(request, run, dialect, call, body, outcome, early)
            outcome.record.status = response.status
            return response
        finally:
            self.call_done(run, dialect, outcome.record)

    def decide(self, run: Run, dialect: Dialect, body: bytes, match_info: Mapping[str, str],
               headers: Mapping[str, str], raw_headers: RawHeaders) -> tuple[Request, Outcome] | web.Response:
        """The call and what it gets (the run's state moves on), or the error to answer for a
        request that is not a call."""
        try:
            call = dialect.decode_routed(body, match_info)
            session = header_session(headers, self.session_headers)
            outcome = run.answer(session, call, dialect, raw_headers, body)
        except RequestError as exc:
            return mock_error(400, "invalid_request", f"run {run.id}: {exc}", dialect=dialect)
        except RecursionError:
            return mock_error(400, "invalid_request", f"run {run.id}: {TOO_DEEP}", dialect=dialect)
        if self.hub.watched:  # an inspector page is open: the cursor just moved
            self.hub.touched(run.id)
        return call, outcome

    async def _write(self, request: web.Request, run: Run, dialect: Dialect, outcome: Outcome) -> web.StreamResponse:
        try:
            return await self.writer.write(request, run, dialect, outcome)
        finally:
            self.call_done(run, dialect, outcome.record)

    def call_done(self, run: Run, dialect: Dialect, record: CallRecord) -> None:
        """A call's answer is written (or its client gone): its journal entry is complete."""
        record.done()
        if self.hub.watched:
            self.hub.touched(run.id)
        if log.isEnabledFor(logging.INFO):
            log.info("%s %s %s session %s (%s) %s: %s %s%.1f ms", run.id, dialect.name, record.kind or "-",
                     record.session, record.script or "unbound",
                     "call -" if record.call is None else call_name(record.call),
                     record.status, f"{record.error} " if record.error else "", record.duration_ms or 0.0)

    async def models(self, request: web.Request) -> web.Response:
        run = self._run_for(request, ANTHROPIC if ANTHROPIC_VERSION in request.headers else DEFAULT)
        if not isinstance(run, Run):
            return run
        return web.Response(body=models_body(self.runs.catalogs[run.scenario.name].model, request.headers),
                            content_type="application/json")

    def info_route(self, dialect: Dialect, info: InfoRoute) -> Handler:
        """The handler of one of `dialect`'s info routes (a model listing): answered from the scenario."""

        async def answer(request: web.Request) -> web.StreamResponse:
            run = self._run_for(request, dialect)
            if not isinstance(run, Run):
                return run
            body = await read_body(request, self.max_body) if request.can_read_body else b""
            models = [self.runs.catalogs[run.scenario.name].model, *(r.model for r in run.scenario.side_routes)]
            status, payload = info.answer(models, body or b"")
            return web.Response(status=status, body=payload, content_type="application/json")

        return answer

    async def count_tokens(self, request: web.Request) -> web.StreamResponse:
        """`POST …/v1/messages/count_tokens`: a recorded count for an equal request; else, in a run
        that records, the upstream's (kept for its recording); else a 404 in Anthropic's shape
        (clients then count locally). A run recording from scratch asks the upstream every time."""
        run = self._run_for(request, ANTHROPIC)
        if not isinstance(run, Run):
            return run
        body = await read_body(request, self.max_body)
        if body is None:
            return too_large(self.max_body, ANTHROPIC)
        try:
            decoded = msgspec.json.decode(body or b"")
        except msgspec.DecodeError:
            return mock_error(400, "invalid_request", f"run {run.id}: the count_tokens body is not JSON",
                              dialect=ANTHROPIC)
        except RecursionError:
            return mock_error(400, "invalid_request", f"run {run.id}: {TOO_DEEP}", dialect=ANTHROPIC)
        counted = None
        if not run.recording:
            try:
                counted = run.scenario.token_count(decoded, run.cwd)
            except RecordingError as exc:
                return mock_error(422, "scenario_invalid", str(exc), dialect=ANTHROPIC)
        if counted is None:
            live = await self.live.count_tokens(request, run, body)
            if live is not None:
                return live
            return mock_error(404, "unrecorded_count_tokens", f"run {run.id}: no recorded count_tokens request of "
                              f"scenario {run.scenario.name} equals this one; count locally", dialect=ANTHROPIC)
        return web.Response(body=counted, content_type="application/json")

    async def release_held(self, app: web.Application) -> None:
        """On shutdown: held and paced streams, and inspector pages' event streams, end at once
        instead of stalling shutdown."""
        self.writer.release()
        self.hub.close()

    async def close_live(self, app: web.Application) -> None:
        """On cleanup: recordings of runs never ended are not written; the upstream client closes."""
        await self.live.close()


# A scenario's name is its path in the suite: one level down, it holds a `/` (never before a `v1`,
# which is the base's own: `/scenarios/s/v1/v1/messages` is a client adding /v1 twice).
NAME = r"[^/]+(?:/(?!v1(?:/|$))[^/]+)??"  # lazy: `/scenarios/s/api/chat` is scenario s's Ollama route
# Base roots: a dialect's routes are under each (OpenAI's and Anthropic's under its `/v1`).
RUNS_ROOT = "/runs/{run}"
ROOTS = (f"/scenarios/{{name:{NAME}}}", RUNS_ROOT, "")
BASES = tuple(root + "/v1" for root in ROOTS)
COUNT_TOKENS = "/messages/count_tokens"  # beside Anthropic's model route, under every base
ANTHROPIC = next(d for d in DIALECTS if d.name == "anthropic")
_UNDER_BASE = re.compile(rf"^(/scenarios/{NAME}/v1|/runs/[^/]+/v1|/v1)(/.*)?$")
_UNDER_ROOT = re.compile(rf"^(/scenarios/{NAME}|/runs/[^/]+)?(/.*)$")
_PATTERN = re.compile(r"\{(\w+):[^{}]*\}")  # a route parameter's regex (aiohttp's `{name:regex}`)


def _is_websocket(request: web.Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


def _upgrade_required(request: web.Request, dialect: Dialect) -> web.Response:
    """Codex CLI tries a WebSocket first and falls back to HTTP streaming on 426 only."""
    return mock_error(426, "upgrade_required", f"{request.path} streams over HTTP (SSE), not WebSocket",
                      {"Upgrade": "HTTP/1.1"}, dialect=dialect)


def _dialect_of(path: str, headers: Mapping[str, str]) -> Dialect:
    """The dialect whose errors a path gets: the one whose routes it extends (Anthropic's
    `/v1/messages/…`, Ollama's `/api/…`), an Anthropic client's by its header, else the default (OpenAI's)."""
    under = _UNDER_ROOT.match(path)
    rest = under.group(2) if under is not None else path
    for dialect in DIALECTS:
        if any(rest.startswith(_literal(prefix)) for prefix in dialect.prefixes):
            return dialect
    return ANTHROPIC if ANTHROPIC_VERSION in headers else DEFAULT


def _literal(route: str) -> str:
    """A route's fixed head, before its first path parameter."""
    return route.partition("{")[0]


async def _unknown_path(request: web.Request) -> web.Response:
    under = _UNDER_BASE.match(request.path)
    if under is None:
        return mock_error(404, "unknown_path", f"no endpoint at {request.path}: the model API is under "
                          "/scenarios/NAME/v1, /runs/RUN/v1 or (one scenario loaded) /v1; clients that add "
                          "their own version path (Anthropic, Gemini, Ollama) take the base without /v1",
                          dialect=_dialect_of(request.path, request.headers))
    base, rest = under.group(1), under.group(2) or ""
    root = base.removesuffix("/v1")
    # The fixed routes under /v1 first, then the ones with path parameters or beside /v1 (Gemini's
    # /v1beta and /v1/models/{model}:{verb}, Ollama's /api).
    routes = [(d, route) for d in DIALECTS for route in d.routes]
    fixed = [r for d, r in routes if r == "/v1" + d.path and "{" not in r]
    served = ", ".join([*(f"POST {root}{r}" for r in fixed),
                        f"GET {base}/models", f"POST {base}{COUNT_TOKENS}",
                        *(f"POST {root}{r}" for _, r in routes if r not in fixed),
                        *(f"{i.method} {root}{i.path}" for d in DIALECTS for i in d.info_routes),
                        *(f"POST {root}{r}" for api in EMBEDDINGS_APIS for r in api.routes)])
    served = _PATTERN.sub(r"{\1}", served)  # `{modelId:.+}` is `{modelId}` to a reader
    message = f"no endpoint at {request.path}; under {base} mockllm serves {served}"
    if rest.startswith("/v1/"):
        message += (f". A client that adds /v1 itself (the Anthropic SDK) takes the base without it: "
                    f"{base.removesuffix('/v1') or '/'}")
    return mock_error(404, "unknown_path", message, dialect=_dialect_of(request.path, request.headers))


def _not_allowed(allowed: str, dialect: Dialect = DEFAULT) -> Handler:
    """A 405 in the route's dialect's error shape, for every method a path does not serve."""

    async def not_allowed(request: web.Request) -> web.Response:
        if _is_websocket(request):  # a WebSocket handshake is a GET
            return _upgrade_required(request, dialect)
        message = f"{request.method} {request.path} is not allowed; allowed: {allowed}"
        return mock_error(405, "method_not_allowed", message, {"Allow": allowed}, dialect=dialect)

    return not_allowed


class _Routes:
    """Where create_app's routes go: those under a parameterized base root (`/runs/{run}`,
    `/scenarios/{name}`) into that root's one resource (`RoutesUnder`: a dict lookup, where
    aiohttp tries every route under a root in turn), the others straight into aiohttp's router.

    Routes, not a middleware: a middleware would wrap every model call in two more coroutines.
    """

    def __init__(self, app: web.Application) -> None:
        self.under = {root: RoutesUnder(root) for root in ROOTS if "{" in root}
        for resource in self.under.values():
            app.router.register_resource(resource)

    def add(self, app: web.Application, path: str, handlers: dict[str, Handler], dialect: Dialect = DEFAULT) -> None:
        """Serve `path` with `handlers` by method; any other method gets a 405. (`app` is the one
        this was made for: McpRoutes.install calls every route adder with its app.)"""
        if "GET" in handlers:
            handlers = {**handlers, "HEAD": handlers["GET"]}  # as aiohttp's add_get does
        handlers = {**handlers, "*": _not_allowed(",".join(sorted(handlers)), dialect)}
        for resource in self.under.values():
            if path.startswith(resource.canonical + "/"):
                resource.add(path.removeprefix(resource.canonical), handlers)
                return
        aiohttp_resource = app.router.add_resource(path)
        for method, handler in handlers.items():
            aiohttp_resource.add_route(method, handler)


SERVER_KEY: web.AppKey[MockServer] = web.AppKey("mockllm", MockServer)


def create_app(suite: Suite, options: ServeOptions | None = None) -> web.Application:
    """The mock server for a loaded suite (host and port are the caller's to bind)."""
    server = MockServer(suite, options or ServeOptions())
    app = web.Application(client_max_size=server.max_body)
    app[SERVER_KEY] = server
    app.on_shutdown.append(server.release_held)
    app.on_cleanup.append(server.close_live)
    routes = _Routes(app)
    fast = FastCalls(server, routes.under[RUNS_ROOT])  # the fast lane, for the runs' model calls
    app[LANE] = fast
    for root in ROOTS:
        for api in EMBEDDINGS_APIS:  # before the dialects': Gemini's `{model}:{verb}` would take its routes
            for route in api.routes:
                embeddings = server.embeddings.handler(api)
                routes.add(app, root + route, {"POST": embeddings}, api.dialect)
                if root == RUNS_ROOT:
                    fast.embeddings_route(embeddings, api)
        for dialect in DIALECTS:
            for route in dialect.routes:
                handler = server.model_route(dialect)
                routes.add(app, root + route, {"POST": handler}, dialect)
                if root == RUNS_ROOT:
                    fast.model_route(handler, dialect)
            for info in dialect.info_routes:
                routes.add(app, root + info.path, {info.method: server.info_route(dialect, info)}, dialect)
        base = root + "/v1"
        routes.add(app, base + COUNT_TOKENS, {"POST": server.count_tokens}, ANTHROPIC)
        routes.add(app, base + "/models", {"GET": server.models})
    admin = server.admin
    routes.add(app, HEALTH_PATH, {"GET": admin.health})
    routes.add(app, "/_mockllm/scenarios", {"GET": admin.scenarios})
    routes.add(app, RUNS_PATH, {"POST": admin.create_run, "GET": server.inspector.list_runs})
    routes.add(app, RUNS_PATH + "/{run}", {"GET": admin.get_run, "DELETE": admin.end_run})
    for path, handlers in server.inspector.routes().items():
        routes.add(app, path, handlers)
    McpRoutes(server).install(app, ROOTS, routes.add)  # `…/mcp/{server}` under every base root
    app.router.add_route("*", "/{tail:.*}", _unknown_path)
    return app
