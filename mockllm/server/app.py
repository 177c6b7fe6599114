"""The HTTP face: `create_app()` builds the aiohttp application; handlers stay thin.

Addresses (DESIGN.md §3): `/scenarios/{name}/v1/…` (the scenario's default run), `/runs/{run}/v1/…`
(a run made with `POST /_mockllm/runs`), `/v1/…` when exactly one scenario is loaded, and the
admin endpoints under `/_mockllm/`. Under each base every registered wire dialect has its route;
this module names none of them. Every mock-made error is the dialect's error body with
`x-should-retry: false`, so SDKs fail at once instead of retrying into a deterministic error.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web

from mockllm.errors import ReplayFailure, RequestError, TemplateError
from mockllm.options import RUN_FIELDS, ServeOptions
from mockllm.replay import views as run_views
from mockllm.replay.catalog import Catalog
from mockllm.replay.journal import CallRecord
from mockllm.replay.pacing import Pacer, Schedule
from mockllm.replay.run import Run, Runs
from mockllm.scenario.load import Suite
from mockllm.script.entries import Entry, HangEntry
from mockllm.wire import DEFAULT, DIALECTS, models_body
from mockllm.wire.dialect import Dialect
from mockllm.wire.reply import Reply
from mockllm.wire.request import Request

log = logging.getLogger("mockllm")

MAX_BODY = 64 * 1024 * 1024  # agent histories get long; far past that is a client bug
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
NO_RETRY = {"x-should-retry": "false"}
# How long answered requests wait to be compared with the recording: long enough to batch them
# behind the answers of a burst, short enough that a journal read soon after shows them (a
# report drains the queue anyway).
REVIEW_DELAY = 0.005


def mock_error(status: int, code: str, message: str, headers: dict[str, str] | None = None,
               dialect: Dialect = DEFAULT) -> web.Response:
    """An error made by the mock itself (not a replayed one), in `dialect`'s shape: never retried.

    Errors outside any model route (admin, unknown paths) take the OpenAI shape."""
    return web.Response(status=status, body=dialect.error_body(message, code, status),
                        content_type="application/json", headers={**NO_RETRY, **(headers or {})})


class MockServer:
    def __init__(self, suite: Suite, options: ServeOptions) -> None:
        self.suite = suite
        self.options = options
        self.catalogs = {name: Catalog(scenario) for name, scenario in suite.scenarios.items()}
        for catalog in self.catalogs.values():
            catalog.warm(DEFAULT)  # the dialect nearly every agent speaks: rendered before the first request
        self.runs = Runs(suite.scenarios, options)
        self.session_headers = options.all_session_headers
        self.max_body = MAX_BODY  # the app's client_max_size too (create_app)
        self._held: set[asyncio.Future[None]] = set()  # streams held by a hang, released on shutdown
        self.pacer = Pacer()  # paced streams' sleeps, woken on shutdown

    # -- resolving the run a request is for -------------------------------------------------

    def _scenario_error(self, name: str, dialect: Dialect = DEFAULT) -> web.Response | None:
        if name in self.suite.broken:
            return mock_error(422, "scenario_invalid", f"scenario {name} failed to load: {self.suite.broken[name]}",
                              dialect=dialect)
        if name not in self.suite.scenarios:
            known = ", ".join(sorted(self.suite.scenarios)) or "none"
            return mock_error(404, "unknown_run", f"unknown scenario {name!r}; loaded scenarios: {known}",
                              dialect=dialect)
        return None

    def _run_for(self, request: web.Request, dialect: Dialect = DEFAULT) -> Run | web.Response:
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
        return self._scenario_error(name, dialect) or self.runs.default(name)

    # -- the model API ------------------------------------------------------------------------

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
        body = await self._read_body(request)
        if body is None:
            return mock_error(413, "request_too_large", f"request body over {self.max_body} bytes", dialect=dialect)
        try:
            call = dialect.decode_request(body)
        except RequestError as exc:
            return mock_error(400, "invalid_request", f"run {run.id}: {exc}", dialect=dialect)

        headers = request.headers
        # A side route's model (a title model, warm-ups) never reaches session routing.
        side = run.scenario.side_models.get(call.model) if call.model is not None else None
        if side is None:
            live_id = run.live_session(self._session_header(headers), call, dialect)
        else:
            live_id = f"side route {call.model}"
        record = run.journal.record(dialect.name, live_id, call.stream, request.raw_headers, body)
        try:
            return await self._serve_call(request, run, dialect, call, record, side)
        finally:
            record.done()
            if log.isEnabledFor(logging.INFO):
                log.info("%s %s %s session %s (%s) call %s: %s %s%.1f ms", run.id, dialect.name, record.kind or "-",
                         live_id, record.script or "unbound", "-" if record.call is None else record.call + 1,
                         record.status, f"{record.error} " if record.error else "", record.duration_ms or 0.0)

    async def _serve_call(self, request: web.Request, run: Run, dialect: Dialect, call: Request,
                          record: CallRecord, side: int | None) -> web.StreamResponse:
        catalog = self.catalogs[run.scenario.name]
        try:
            if side is None:
                turn = run.take(record.session, call)
                if turn.divergence is not None:
                    record.diverged = turn.divergence.what
                # Not needed to answer: compared a little later, in a batch, off the client's wait.
                if not run.checks_first and run.review_later(turn, call, record):
                    asyncio.get_running_loop().call_later(REVIEW_DELAY, _review, run)
                script, index, file = turn.script, turn.call, turn.session.file
            else:
                index = run.take_side(side)
                script, file = catalog.side_script(side), run.scenario.side_routes[side].file
        except ReplayFailure as failure:
            # Past the end, the call number is the one asked for; an unrecorded session has no file.
            record.status, record.error, record.call = failure.status, failure.code, failure.call
            if failure.code == "request_diverged":
                record.diverged = failure.message
            record.script = run.script_file(record.session) if side is None else run.scenario.side_routes[side].file
            return mock_error(failure.status, failure.code, failure.message, dialect=dialect)
        entry = catalog.entry(script, index)
        record.script, record.call, record.kind = file, index, type(entry).__name__
        try:
            reply = catalog.reply(dialect, script, index, call, run.cwd)
        except TemplateError as exc:
            unmatched = run.fail(ReplayFailure(
                422, "from_request_unmatched", f"run {run.id}: {file} call {index + 1}: {exc}", record.session, index))
            record.status, record.error = 422, unmatched.code
            return mock_error(422, unmatched.code, unmatched.message, dialect=dialect)
        record.status = reply.status
        if reply.status != 200:
            # A replayed provider error: exactly as the provider sent it, so an SDK may retry as it did.
            return web.Response(status=reply.status, body=reply.body, content_type="application/json")
        if not call.stream:
            if reply.hold_when_not_streaming:
                # Returns only when the server shuts down.
                await self._hold(run, {"session": record.session, "script": file, "call": index})
                return mock_error(503, "shutting_down", f"run {run.id}: mockllm is shutting down; "
                                  "the held call was released", dialect=dialect)
            record.status = reply.body_status
            return web.Response(status=reply.body_status, body=reply.body, content_type="application/json")
        schedule = None if run.settings.pace == "burst" else self.pacer.plan(
            run, reply, call.include_usage, catalog.timing(script, index), (script, index, file))
        if reply.ending == "hold":
            held = {"session": record.session, "script": file, "call": index}
            return await self._stream_and_hold(request, run, reply, call.include_usage, entry, held, schedule)
        if schedule is not None:
            return await self._stream_paced(request, schedule)
        return await self._stream(request, reply, call.include_usage)

    async def _read_body(self, request: web.Request) -> bytes | None:
        """The request body, or None when it is over the size limit.

        A small body arrives with its request head, so when the handler runs it is all buffered
        already: it is taken as it is, sparing aiohttp's read loop (measured in a running server:
        ~5 us of the ~19 us a request spent before its first write). Anything else is read as usual.
        """
        content = request.content
        if content.is_eof():
            body = content.read_nowait()
            return body if len(body) <= self.max_body else None
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            return None

    def _session_header(self, headers: Mapping[str, str]) -> str | None:
        """The first session header present, in the order they are configured."""
        for name in self.session_headers:
            value = headers.get(name)
            if value is not None:
                return value
        return None

    async def _stream(self, request: web.Request, reply: Reply, include_usage: bool) -> web.StreamResponse:
        # Nothing to wait for: two writes. The first event goes out with the headers at once (a
        # client's time to first token), the rest of the stream in one write. One write per event
        # costs a syscall each; one write for all made the first byte wait for the whole body
        # (measured: +8-25 us to first byte on a 14 KB stream). A Content-Length spares the client
        # the chunked framing.
        response = web.StreamResponse(headers=SSE_HEADERS)
        first, rest = reply.stream_parts(include_usage)
        response.content_length = len(first) + len(rest)
        await response.prepare(request)
        await response.write(first)
        if rest:
            await response.write(rest)
        await response.write_eof()
        return response

    async def _stream_paced(self, request: web.Request, schedule: Schedule) -> web.StreamResponse:
        # The pacing writer sends each event when it is due (mockllm/pacing.py), whatever the dialect.
        response = web.StreamResponse(headers=SSE_HEADERS)
        response.content_length = schedule.length
        await response.prepare(request)
        await self.pacer.write(response, schedule)
        await response.write_eof()
        return response

    async def _stream_and_hold(self, request: web.Request, run: Run, reply: Reply, include_usage: bool,
                               entry: Entry, held: dict[str, Any], schedule: Schedule | None) -> web.StreamResponse:
        """Stream a hang's prefix (or an aborted call's chunks), paced if asked, then hold until the client leaves."""
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        if schedule is None:
            await response.write(reply.stream_bytes(include_usage))
        else:
            await self.pacer.write(response, schedule)
        if isinstance(entry, HangEntry) and entry.readyFile is not None:
            # A harness waits for this file before it cancels: written once the first delta is out.
            held["ready_file"] = entry.readyFile
            held["ready_file_written"] = run.cwd is not None and _touch(run.cwd, entry.readyFile)
        await self._hold(run, held)
        await response.write_eof()
        return response

    async def _hold(self, run: Run, held: dict[str, Any]) -> None:
        """Stall until the client goes away (the handler is then cancelled) or the server shuts down."""
        if self.pacer.closed:  # shutting down: a paced prefix that ended after release_held holds no more
            return
        run.holding += 1
        run.held.append(held)
        future = asyncio.get_running_loop().create_future()
        self._held.add(future)
        try:
            await future
        finally:
            self._held.discard(future)
            run.held.remove(held)
            run.holding -= 1

    async def release_held(self, app: web.Application) -> None:
        """On shutdown: end held streams now, and send paced streams' rest at once, instead of stalling
        shutdown for its whole grace period."""
        self.pacer.close()
        for held in self._held:
            if not held.done():
                held.set_result(None)

    async def models(self, request: web.Request) -> web.Response:
        run = self._run_for(request)
        if not isinstance(run, Run):
            return run
        return web.Response(body=models_body(self.catalogs[run.scenario.name].model), content_type="application/json")

    # -- admin --------------------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "scenarios": len(self.suite.scenarios),
                                  "broken": len(self.suite.broken), "runs": len(self.runs)})

    async def scenarios(self, request: web.Request) -> web.Response:
        out: list[dict[str, Any]] = []
        for name, scenario in self.suite.scenarios.items():
            out.append({"name": name, "valid": True, "base_url": _base(request, f"/scenarios/{name}/v1"),
                        "sessions": [{"id": s.id, "file": s.file, "parent": s.parent, "kind": s.kind, "cut": s.cut,
                                      "events": s.events, "entries": len(s.entries)} for s in scenario.sessions],
                        "side_routes": [r.summary() for r in scenario.side_routes],
                        "default_run": self.runs.default_id(name)})
        for name, error in self.suite.broken.items():
            out.append({"name": name, "valid": False, "errors": [str(p) for p in error.problems]})
        return web.json_response({"scenarios": out, "skipped": self.suite.skipped})

    async def create_run(self, request: web.Request) -> web.Response:
        raw = await self._read_body(request)
        if raw is None:
            return mock_error(413, "request_too_large", f"request body over {self.max_body} bytes")
        try:
            body = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("scenario"), str):
            return mock_error(400, "invalid_request", 'expected {"scenario": "NAME"} and optionally '
                              f"{', '.join(repr(f) for f in RUN_FIELDS)}")
        name = body["scenario"]
        problem = self._scenario_error(name)
        if problem is not None:
            return problem
        try:
            run = self.runs.create(name, body)
        except ValueError as exc:
            return mock_error(400, "invalid_request", str(exc))
        return web.json_response({"run": run.id, "base_url": _base(request, f"/runs/{run.id}/v1")}, status=201)

    async def get_run(self, request: web.Request) -> web.Response:
        run = self.runs.get(request.match_info["run"])
        if run is None:
            return mock_error(404, "unknown_run", f"unknown run {request.match_info['run']!r}")
        return web.json_response(run_views.state(run))

    async def end_run(self, request: web.Request) -> web.Response:
        run = self.runs.end(request.match_info["run"])
        if run is None:
            return mock_error(404, "unknown_run", f"unknown run {request.match_info['run']!r}")
        return web.json_response(run_views.report(run))


def _review(run: Run) -> None:
    try:
        run.review_pending()
    except Exception:  # a comparison bug must not break the loop's callbacks
        log.exception("comparing run %s's requests with the recording failed", run.id)


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


def _base(request: web.Request, path: str) -> str:
    return f"{request.scheme}://{request.host}{path}"


BASES = ("/scenarios/{name}/v1", "/runs/{run}/v1", "/v1")
_UNDER_BASE = re.compile(r"^(/scenarios/[^/]+/v1|/runs/[^/]+/v1|/v1)(/.*)?$")


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
    for base in BASES:
        for dialect in DIALECTS:
            _add_routes(app, base + dialect.path, {"POST": server.model_route(dialect)})
        _add_routes(app, base + "/models", {"GET": server.models})
    _add_routes(app, "/_mockllm/health", {"GET": server.health})
    _add_routes(app, "/_mockllm/scenarios", {"GET": server.scenarios})
    _add_routes(app, "/_mockllm/runs", {"POST": server.create_run})
    _add_routes(app, "/_mockllm/runs/{run}", {"GET": server.get_run, "DELETE": server.end_run})
    app.router.add_route("*", "/{tail:.*}", _unknown_path)
    return app
