"""The Python API: a mockllm server inside a test suite or a tool.

`Server` runs one in a background thread; `AsyncServer` on the caller's running loop. Both listen
on a free 127.0.0.1 port unless told otherwise, take the serve options (`ServeOptions`) as
keywords, and hand out runs: independent replays of one scenario. A run talks to its server over
the admin HTTP API only (DESIGN.md §3), never through the server's objects (another thread or loop).

    with mockllm.Server("recordings") as srv:
        with srv.run("tool-loop") as run:
            client = OpenAI(base_url=run.base_url, api_key="x", default_headers=run.headers("agent-1"))
            ...
            run.assert_consumed()

Leaving the server's context stops it: held streams (hangs) are released, the port is freed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import json
import os
import socket
import threading
import urllib.parse
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from mockllm.errors import MockllmError
from mockllm.hosting.admin_client import AdminConnection
from mockllm.options import SESSION_HEADERS, ServeOptions, in_process
from mockllm.replay.report import RunReport, check
from mockllm.starting import PathLike, load_to_serve, start
from mockllm.starting import ServerStartError as ServerStartError  # the API's name for it, as before

# The server (aiohttp, the loader, the dialects) is imported where a server starts in this process:
# a test process whose server runs beside it (`process=True`, the pytest plugin's default) never
# pays for those imports, and its child starts while nothing here waits on them.
if TYPE_CHECKING:
    import aiohttp

    from mockllm.process import ServerProcess
    from mockllm.scenario.load import Suite
    from mockllm.server.running import RunningServer

# Start-up is a bind on loopback after the suite is loaded; far past this something is stuck.
START_TIMEOUT = 30.0
# Admin calls answer from memory; a stalled one means the server thread is wedged.
ADMIN_TIMEOUT = 30.0


class AdminError(MockllmError):
    """The server refused an admin call (unknown scenario, broken scenario, unknown run…)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        self.status = status
        self.code = code
        self.message = message
        super().__init__(f"{status} {code}: {message}")




def _admin_result(status: int, raw: bytes) -> dict[str, Any]:
    """A decoded admin answer; an error answer (OpenAI error body) becomes an AdminError."""
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        body = {}
    if status >= 400:
        error = body.get("error") if isinstance(body, dict) else None
        error = error if isinstance(error, dict) else {}
        raise AdminError(status, str(error.get("code", "http_error")),
                         str(error.get("message", raw[:500].decode(errors="replace"))))
    if not isinstance(body, dict):
        raise AdminError(status, "bad_answer", f"expected a JSON object, got {raw[:200]!r}")
    return body


def _run_body(scenario: str, cwd: PathLike | None, fields: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"scenario": scenario, **fields}
    if cwd is not None:
        body["cwd"] = os.fspath(cwd)
    return body


def _ending(admin: str, discard: str | None) -> str:
    """The DELETE address that ends a run, saying why its recording is not kept when it is not."""
    return admin if discard is None else f"{admin}?{urllib.parse.urlencode({'discard': discard})}"


def _raised(exc: BaseException | None) -> str | None:  # a block that raised keeps no recording: why
    return None if exc is None else f"the block using the run raised {type(exc).__name__}: {exc}"[:300]


def session_headers(session_id: str) -> dict[str, str]:
    """The request headers that route a client to the live session `session_id`."""
    return {SESSION_HEADERS[0]: session_id}


class _RunInfo:
    """What every run knows about itself, sync or async."""

    def __init__(self, server_url: str, body: dict[str, Any], scenario: str) -> None:
        self.id: str = body["run"]
        self.scenario = scenario
        self.base_url: str = body["base_url"]  # ends in /v1: an OpenAI client's base_url
        # The base without /v1, for every client that adds its own version path: google-genai's
        # base_url (it adds /v1beta or /v1), the ollama client's host (it adds /api) and a boto3
        # bedrock-runtime client's endpoint_url (it adds /model/…). One name
        # for all of them, since it is one address: a client's name would only repeat it.
        self.root_url: str = self.base_url.removesuffix("/v1")
        # The Anthropic SDK adds /v1 itself: its base_url is the root too (named before root_url was).
        self.anthropic_base_url: str = self.root_url
        self._admin = f"{server_url}/_mockllm/runs/{self.id}"
        self._final: RunReport | None = None

    def headers(self, session_id: str) -> dict[str, str]:
        """The header dict that routes a client to the live session `session_id` of this run."""
        return session_headers(session_id)

    def mcp_url(self, server: str) -> str:
        """The Streamable HTTP endpoint of this run's MCP server `server` (`…/runs/{run}/mcp/{server}`)."""
        return f"{self.root_url}/mcp/{server}"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id} of {self.scenario!r} at {self.base_url}>"


class RunHandle(_RunInfo):
    """One replay of a scenario on a `Server` (its own bindings, cursors and failures).

    A context manager: leaving it ends the run.
    """

    def __init__(self, server: Server, body: dict[str, Any], scenario: str) -> None:
        super().__init__(server.url, body, scenario)
        self._server = server

    def report(self) -> RunReport:
        """The run's report now (live state), or its final report once ended."""
        if self._final is not None:
            return self._final
        return RunReport.from_json(self._server.admin("GET", self._admin))

    def end(self, *, discard: str | None = None) -> RunReport:
        """End the run (the server forgets it) and return its final report; again, the same report.

        A run that records writes its recording now (its report's `recording` says what, or why
        not), unless `discard` gives the reason not to (a test that failed)."""
        if self._final is None:
            self._final = RunReport.from_json(self._server.admin("DELETE", _ending(self._admin, discard)))
        return self._final

    def report_html(self) -> str:
        """The run as one self-contained HTML file (`GET /_mockllm/runs/{run}/report.html`): live,
        or ended lately (the server keeps its latest ended runs' reports)."""
        return self._server.fetch_text(f"{self._admin}/report.html")

    def assert_consumed(self) -> None:
        """Raise RunNotClean (an AssertionError carrying the whole report) when any failure was
        answered (404, 410, 422…) or a recorded call was not requested."""
        check(self.report())

    def assert_no_failures(self) -> None:
        """Like `assert_consumed`, but calls left unrequested are fine."""
        check(self.report(), require_consumed=False)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.end(discard=_raised(exc))


class Server:
    """A mockllm server in a background thread, for synchronous code.

    `path` is a scenario or a suite folder (None: what `mockllm serve` serves with no PATH);
    `options` are `ServeOptions` field names (`headerless="anonymous"`, `port=8081`, …).
    Loading errors and a failed bind raise from `start()` (or `with`) at once.
    `process=True` serves from a process of its own beside this one instead of a thread (see
    `mockllm.process`; the pytest plugin's default): the same API, but the server no longer
    shares this process's interpreter lock, and `suite` stays None (the child holds it).
    """

    def __init__(self, path: PathLike | None = None, *, process: bool = False,
                 listening: socket.socket | None = None, **options: Any) -> None:
        self.path = path
        self.options: ServeOptions = in_process(**options)
        self.process = process
        # process=True: a socket bound and listening already, handed to the server process (which then
        # serves on it, not on the options' host and port); closed here once the process has it.
        self.listening = listening
        self._attached = False  # a handle on a server another process owns (`attach`)
        self._child: ServerProcess | None = None
        self._launched: ServerProcess | None = None  # launched, not yet waited for
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._url: str | None = None
        self.suite: Suite | None = None
        self._connection: AdminConnection | None = None  # kept alive for every admin call
        self._prepared: dict[str, Any] | None = None  # the body of a run created ahead (`prepare`), not yet taken

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT`, no trailing slash."""
        if self._url is None:
            raise MockllmError("the server is not running: use `with Server(...)` or call start()")
        return self._url

    @property
    def scenarios(self) -> list[str]:
        """The names of the valid scenarios served."""
        if self._child is not None or self._attached:  # the server's process holds the suite: ask it
            listed = self.admin("GET", f"{self.url}/_mockllm/scenarios").get("scenarios", [])
            return sorted(s["name"] for s in listed if isinstance(s, dict) and s.get("valid"))
        return sorted(self.suite.scenarios) if self.suite else []

    def launch(self) -> Self:
        """With `process=True`: start the server process without waiting for it, so it loads while
        the caller goes on; `start()` then waits for it (and raises what it could not do). The
        pytest plugin launches its server while pytest collects."""
        if not self.process:
            raise MockllmError("only a Server(process=True) can be launched ahead of start()")
        if self._launched is None and self._child is None:
            from mockllm.process import ServerProcess

            self._launched = ServerProcess(Path(self.path) if self.path is not None else None, self.options,
                                           self.listening)
            self.listening = None  # the process has it now
            self._launched.launch()
        return self

    @classmethod
    def attach(cls, url: str, **options: Any) -> Server:
        """A handle on a running server another process started and owns (the pytest plugin's xdist
        workers share their controller's): runs and admin calls as on a server of one's own; `stop()`
        lets it go and leaves it running. `options` are those it was started with (what the caller's
        own checks read, such as `record_mode`)."""
        server = cls(None, **options)
        server._url = url.rstrip("/")
        server._connection = AdminConnection(server._url, ADMIN_TIMEOUT)
        server._attached = True
        return server

    def start(self) -> Self:
        if self._attached:
            raise MockllmError("this Server is attached to a server another process runs: it is started already")
        if self._thread is not None or self._child is not None:
            raise MockllmError("this Server is already started")
        if self.process:
            child = self.launch()._launched
            assert child is not None
            self._launched = None
            self._url = child.wait(START_TIMEOUT, ServerStartError)
            self._child = child
            self._connection = AdminConnection(self._url, ADMIN_TIMEOUT)
            return self
        self.suite = load_to_serve(self.path, self.options)
        started: concurrent.futures.Future[str] = concurrent.futures.Future()
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(self.suite, started),),
                                        name="mockllm-server", daemon=True)
        self._thread.start()
        try:
            self._url = started.result(timeout=START_TIMEOUT)
            self._connection = AdminConnection(self._url, ADMIN_TIMEOUT)
        except concurrent.futures.TimeoutError:
            raise ServerStartError(f"the server did not start within {START_TIMEOUT} s") from None
        except BaseException:
            self._thread.join()
            self._thread = None
            raise
        return self

    async def _main(self, suite: Suite, started: concurrent.futures.Future[str]) -> None:
        try:
            server = await start(suite, self.options)
        except BaseException as exc:
            started.set_exception(exc)
            return
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        started.set_result(server.base_url)
        try:
            await self._stop.wait()
        finally:
            await server.close()

    def stop(self) -> None:
        """Stop serving: held streams end, the port is free when this returns. Idempotent."""
        thread, loop, stop = self._thread, self._loop, self._stop
        self._discard_prepared()
        if self._connection is not None:  # first: the server need not wait for an idle connection
            self._connection.close()
            self._connection = None
        for child in (self._child, self._launched):
            if child is not None:
                child.stop()
        self._child = self._launched = self._url = None
        self._attached = False
        if thread is None:
            return
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        thread.join()
        self._thread = self._loop = self._stop = self._url = self._connection = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def run(self, scenario: str, *, cwd: PathLike | None = None, **fields: Any) -> RunHandle:
        """A fresh run of `scenario` (`POST /_mockllm/runs`). `cwd` replaces `{{cwd}}` and anchors
        readyFiles; other `fields` are sent as given (per-run options, DESIGN.md §5).
        An unknown or broken scenario raises AdminError with the server's reason."""
        asked = _run_body(scenario, cwd, fields)
        if self._prepared is not None and self._prepared == asked:  # created ahead: its answer is waiting
            self._prepared = None
            try:
                return RunHandle(self, _admin_result(*self._admin_connection().collect()), scenario)
            except (OSError, http.client.HTTPException, LookupError):
                pass  # the answer was lost with the connection: ask again
            finally:
                self.relay_logs()
        self._discard_prepared()
        return RunHandle(self, self.admin("POST", f"{self.url}/_mockllm/runs", asked), scenario)

    def prepare(self, scenario: str, *, cwd: PathLike | None = None, behind_next_call: bool = False,
                **fields: Any) -> None:
        """Create a run of `scenario` ahead, without waiting for the server's answer: the next
        `run()` asked for the same run takes it, its answer read by then (the pytest plugin prepares
        the next test's run as the test before it ends, which spares each test a round trip). A run
        prepared and not taken is ended by the next `run()` asked for another, or by `stop()`.
        `behind_next_call`: sent with the next admin call, behind it, in one write (the plugin
        sends it behind the ending of the test's run: the server reads both in one wake-up)."""
        self._discard_prepared()
        body = _run_body(scenario, cwd, fields)
        self._admin_connection().send("POST", f"{self.url}/_mockllm/runs", json.dumps(body).encode(),
                                      behind_next=behind_next_call)
        self._prepared = body

    def _discard_prepared(self) -> None:
        """End a run prepared and not taken (an error creating it says nothing to anyone: dropped)."""
        if self._prepared is None or self._connection is None:
            return
        self._prepared = None
        try:
            status, raw = self._connection.collect()
            if status == 201:
                run = json.loads(raw)["run"]
                self.admin("DELETE", _ending(f"{self.url}/_mockllm/runs/{run}", "prepared for a test that did not "
                                             "use it"))
        except (MockllmError, OSError, http.client.HTTPException, LookupError, ValueError, KeyError):
            pass

    def admin(self, method: str, url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One admin call: the decoded JSON answer, or AdminError."""
        data = json.dumps(body).encode() if body is not None else None
        try:
            return _admin_result(*self._admin_connection().request(method, url, data))
        finally:
            self.relay_logs()

    def fetch_text(self, url: str) -> str:
        """A page the server renders (an inspector report), or AdminError."""
        try:
            status, raw = self._admin_connection().request("GET", url)
        finally:
            self.relay_logs()
        if status >= 400:
            _admin_result(status, raw)  # raises AdminError with the server's reason
        return raw.decode("utf-8")

    def relay_logs(self) -> None:
        """With `process=True`: log again in this process, under the same loggers and levels, what
        the server process has logged so far. Done after every admin call and as the server stops:
        its records come back then, not as they are logged, since no thread here waits for them (see
        `mockllm.process._ChildLogs`). The pytest plugin also relays as each test's call ends."""
        if self._child is not None:
            self._child.relay_logs()

    def _admin_connection(self) -> AdminConnection:
        if self._connection is None:
            raise MockllmError("the server is not running: use `with Server(...)` or call start()")
        return self._connection


class AsyncRunHandle(_RunInfo):
    """One replay of a scenario on an `AsyncServer`; `async with` ends it."""

    def __init__(self, server: AsyncServer, body: dict[str, Any], scenario: str) -> None:
        super().__init__(server.url, body, scenario)
        self._server = server

    async def report(self) -> RunReport:
        """The run's report now (live state), or its final report once ended."""
        if self._final is not None:
            return self._final
        return RunReport.from_json(await self._server.admin("GET", self._admin))

    async def end(self, *, discard: str | None = None) -> RunReport:
        """End the run and return its final report; again, the same report (see `Run.end`)."""
        if self._final is None:
            self._final = RunReport.from_json(await self._server.admin("DELETE", _ending(self._admin, discard)))
        return self._final

    async def report_html(self) -> str:
        """The run as one self-contained HTML file; see `RunHandle.report_html`."""
        return await self._server.fetch_text(f"{self._admin}/report.html")

    async def assert_consumed(self) -> None:
        """Raise RunNotClean when any failure was answered or a recorded call was not requested."""
        check(await self.report())

    async def assert_no_failures(self) -> None:
        """Like `assert_consumed`, but calls left unrequested are fine."""
        check(await self.report(), require_consumed=False)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.end(discard=_raised(exc))


class AsyncServer:
    """A mockllm server on the running event loop, for `async with` (same shape as `Server`)."""

    def __init__(self, path: PathLike | None = None, **options: Any) -> None:
        self.path = path
        self.options: ServeOptions = in_process(**options)
        self.suite: Suite | None = None
        self._server: RunningServer | None = None
        self._http: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT`, no trailing slash."""
        if self._server is None:
            raise MockllmError("the server is not running: use `async with AsyncServer(...)` or await start()")
        return self._server.base_url

    @property
    def scenarios(self) -> list[str]:
        return sorted(self.suite.scenarios) if self.suite else []

    async def start(self) -> Self:
        if self._server is not None:
            raise MockllmError("this AsyncServer is already started")
        self.suite = load_to_serve(self.path, self.options)
        self._server = await start(self.suite, self.options)
        import aiohttp

        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=ADMIN_TIMEOUT))
        return self

    async def stop(self) -> None:
        """Stop serving: held streams end, the port is free when this returns. Idempotent."""
        server, http = self._server, self._http
        self._server = self._http = None
        if http is not None:
            await http.close()
        if server is not None:
            await server.close()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    async def run(self, scenario: str, *, cwd: PathLike | None = None, **fields: Any) -> AsyncRunHandle:
        """A fresh run of `scenario`; see `Server.run`."""
        body = await self.admin("POST", f"{self.url}/_mockllm/runs", _run_body(scenario, cwd, fields))
        return AsyncRunHandle(self, body, scenario)

    async def admin(self, method: str, url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One admin call: the decoded JSON answer, or AdminError."""
        if self._http is None:
            raise MockllmError("the server is not running")
        async with self._http.request(method, url, json=body) as response:
            return _admin_result(response.status, await response.read())

    async def fetch_text(self, url: str) -> str:
        """A page the server renders (an inspector report), or AdminError."""
        if self._http is None:
            raise MockllmError("the server is not running")
        async with self._http.get(url) as response:
            raw = await response.read()
            if response.status >= 400:
                _admin_result(response.status, raw)
            return raw.decode("utf-8")
