"""The HTTP face: `create_app()` builds the aiohttp application; handlers stay thin.

Addresses (DESIGN.md §3): `/scenarios/{name}/v1/…` (the scenario's default run), `/runs/{run}/v1/…`
(a run made with `POST /_mockllm/runs`), `/v1/…` when exactly one scenario is loaded, and the
admin endpoints under `/_mockllm/`. Under each base every registered wire dialect has its route;
this module names none of them. A model route's handler finds the run, reads and decodes the
body, asks the run what the call gets (`Run.answer`), and writes that outcome.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable

from aiohttp import web

from mockllm.errors import RequestError
from mockllm.options import ServeOptions
from mockllm.replay.outcome import Live
from mockllm.replay.routing import header_session
from mockllm.replay.run import Run
from mockllm.replay.runs import Runs
from mockllm.scenario.load import Suite
from mockllm.server.admin import Admin, read_body, scenario_error
from mockllm.server.live import LiveCalls
from mockllm.server.mock_errors import mock_error
from mockllm.server.streaming import OutcomeWriter, Pacer
from mockllm.wire import DEFAULT, DIALECTS, models_body
from mockllm.wire.dialect import Dialect

log = logging.getLogger("mockllm")

MAX_BODY = 64 * 1024 * 1024  # agent histories get long; far past that is a client bug
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class MockServer:
    def __init__(self, suite: Suite, options: ServeOptions) -> None:
        self.suite = suite
        self.options = options
        self.runs = Runs(suite.scenarios, options)
        for catalog in self.runs.catalogs.values():
            catalog.warm(DEFAULT)  # the dialect nearly every agent speaks: rendered before the first request
        self.session_headers = options.all_session_headers
        self.max_body = MAX_BODY  # the app's client_max_size too (create_app)
        self.live = LiveCalls(suite, self.runs, options)
        self.admin = Admin(suite, self.runs, self.max_body, self.live)
        self.writer = OutcomeWriter()

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
            try:
                return await self._answer(request, dialect)
            except (asyncio.CancelledError, ConnectionResetError, web.HTTPException):
                raise
            except Exception as exc:  # a bug must not take the server down or leak into other runs
                log.exception("internal error on %s %s", request.method, request.path)
                return mock_error(500, "mockllm_internal_error", f"mockllm failed on this request: {exc!r}",
                                  dialect=dialect)

        return answer

    async def _answer(self, request: web.Request, dialect: Dialect) -> web.StreamResponse:
        run = self._run_for(request, dialect)
        if not isinstance(run, Run):  # an error response (Run is a plain class: a cheap check)
            return run
        body = await read_body(request, self.max_body)
        if body is None:
            return mock_error(413, "request_too_large", f"request body over {self.max_body} bytes", dialect=dialect)
        try:
            call = dialect.decode_request(body)
        except RequestError as exc:
            return mock_error(400, "invalid_request", f"run {run.id}: {exc}", dialect=dialect)
        session = header_session(request.headers, self.session_headers)
        outcome = run.answer(session, call, dialect, request.raw_headers, body)
        record = outcome.record
        try:
            if isinstance(outcome, Live):  # a record mode: the upstream answers
                response = await self.live.call(request, run, dialect, call, body, outcome)
                record.status = response.status
                return response
            return await self.writer.write(request, run, dialect, outcome)
        finally:
            record.done()
            if log.isEnabledFor(logging.INFO):
                log.info("%s %s %s session %s (%s) call %s: %s %s%.1f ms", run.id, dialect.name, record.kind or "-",
                         record.session, record.script or "unbound",
                         "-" if record.call is None else record.call + 1,
                         record.status, f"{record.error} " if record.error else "", record.duration_ms or 0.0)

    async def models(self, request: web.Request) -> web.Response:
        run = self._run_for(request)
        if not isinstance(run, Run):
            return run
        return web.Response(body=models_body(self.runs.catalogs[run.scenario.name].model),
                            content_type="application/json")

    async def release_held(self, app: web.Application) -> None:
        """On shutdown: held and paced streams end at once instead of stalling shutdown."""
        self.writer.release()

    async def close_live(self, app: web.Application) -> None:
        """On cleanup: recordings of runs never ended are not written; the upstream client closes."""
        await self.live.close()


# A scenario's name is its path in the suite: one level down, it holds a `/` (never before a `v1`,
# which is the base's own: `/scenarios/s/v1/v1/messages` is a client adding /v1 twice).
NAME = r"[^/]+(?:/(?!v1(?:/|$))[^/]+)?"
BASES = (f"/scenarios/{{name:{NAME}}}/v1", "/runs/{run}/v1", "/v1")
_UNDER_BASE = re.compile(rf"^(/scenarios/{NAME}/v1|/runs/[^/]+/v1|/v1)(/.*)?$")


async def _unknown_path(request: web.Request) -> web.Response:
    under = _UNDER_BASE.match(request.path)
    if under is None:
        return mock_error(404, "unknown_path", f"no endpoint at {request.path}: the model API is under "
                          "/scenarios/NAME/v1, /runs/RUN/v1 or (one scenario loaded) /v1")
    base, rest = under.group(1), under.group(2) or ""
    served = ", ".join([*(f"POST {base}{d.path}" for d in DIALECTS), f"GET {base}/models"])
    message = f"no endpoint at {request.path}; under {base} mockllm serves {served}"
    if rest.startswith("/v1/"):
        message += (f". A client that adds /v1 itself (the Anthropic SDK) takes the base without it: "
                    f"{base.removesuffix('/v1') or '/'}")
    return mock_error(404, "unknown_path", message)


def _not_allowed(allowed: str) -> Handler:
    """A 405 in the OpenAI error shape, for every method a path does not serve."""

    async def not_allowed(request: web.Request) -> web.Response:
        message = f"{request.method} {request.path} is not allowed; allowed: {allowed}"
        return mock_error(405, "method_not_allowed", message, {"Allow": allowed})

    return not_allowed


def _add_routes(app: web.Application, path: str, handlers: dict[str, Handler]) -> None:
    """Serve `path` with `handlers` by method; any other method gets a 405.

    Routes, not a middleware: a middleware would wrap every model call in two more coroutines.
    """
    if "GET" in handlers:
        handlers = {**handlers, "HEAD": handlers["GET"]}  # as aiohttp's add_get does
    resource = app.router.add_resource(path)
    for method, handler in handlers.items():
        resource.add_route(method, handler)
    resource.add_route("*", _not_allowed(",".join(sorted(handlers))))


SERVER_KEY: web.AppKey[MockServer] = web.AppKey("mockllm", MockServer)


def create_app(suite: Suite, options: ServeOptions | None = None) -> web.Application:
    """The mock server for a loaded suite (host and port are the caller's to bind)."""
    server = MockServer(suite, options or ServeOptions())
    app = web.Application(client_max_size=server.max_body)
    app[SERVER_KEY] = server
    app.on_shutdown.append(server.release_held)
    app.on_cleanup.append(server.close_live)
    for base in BASES:
        for dialect in DIALECTS:
            _add_routes(app, base + dialect.path, {"POST": server.model_route(dialect)})
        _add_routes(app, base + "/models", {"GET": server.models})
    admin = server.admin
    _add_routes(app, "/_mockllm/health", {"GET": admin.health})
    _add_routes(app, "/_mockllm/scenarios", {"GET": admin.scenarios})
    _add_routes(app, "/_mockllm/runs", {"POST": admin.create_run})
    _add_routes(app, "/_mockllm/runs/{run}", {"GET": admin.get_run, "DELETE": admin.end_run})
    app.router.add_route("*", "/{tail:.*}", _unknown_path)
    return app
