"""The admin endpoints under `/_mockllm/`: health, scenarios, and creating, reading and ending runs.

A run is created as its record mode has it (`live.LiveCalls.open_run`); ending a run that records
writes its recording, unless `DELETE /_mockllm/runs/{run}?discard=REASON` says not to (the pytest
plugin's word for a failed test), and its report says what was written, or why nothing was.
"""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from mockllm.errors import TOO_DEEP
from mockllm.hosting.bodies import read_body
from mockllm.options import RUN_FIELDS
from mockllm.replay.report import RecordingReport
from mockllm.replay.reporting import build_report, build_state
from mockllm.replay.run import Run
from mockllm.replay.runs import Runs, TooManyRuns
from mockllm.scenario.load import Suite
from mockllm.scenario.summary import summarize
from mockllm.server.live import LiveCalls
from mockllm.server.mock_errors import mock_error, too_large
from mockllm.wire import DEFAULT
from mockllm.wire.dialect import Dialect

RUNS_PATH = "/_mockllm/runs"  # POST creates a run; RUNS_PATH/{run}: GET its state, DELETE ends it
HEALTH_PATH = "/_mockllm/health"


def base_url(request: web.Request, path: str) -> str:
    return f"{request.scheme}://{request.host}{path}"


def scenario_error(suite: Suite, name: str, dialect: Dialect = DEFAULT) -> web.Response | None:
    """The error for a scenario name that names no loaded scenario, or None when it is loaded."""
    if name in suite.broken:
        return mock_error(422, "scenario_invalid", f"scenario {name} failed to load: {suite.broken[name]}",
                          dialect=dialect)
    if name not in suite.scenarios:
        known = ", ".join(sorted(suite.scenarios)) or "none"
        return mock_error(404, "unknown_run", f"unknown scenario {name!r}; loaded scenarios: {known}",
                          dialect=dialect)
    return None


class Admin:
    def __init__(self, suite: Suite, runs: Runs, max_body: int, live: LiveCalls) -> None:
        self.suite = suite
        self.runs = runs
        self.max_body = max_body
        self.live = live

    async def health(self, request: web.Request) -> web.Response:
        return self.healthy()

    def healthy(self) -> web.Response:
        """The answer to `GET /_mockllm/health`: up, and what it serves."""
        return web.json_response({"status": "ok", "scenarios": len(self.suite.scenarios),
                                  "broken": len(self.suite.broken), "runs": len(self.runs)})

    async def scenarios(self, request: web.Request) -> web.Response:
        out: list[dict[str, Any]] = []
        for name, scenario in self.suite.scenarios.items():
            summary = summarize(scenario)
            out.append({"name": name, "valid": True, "base_url": base_url(request, f"/scenarios/{name}/v1"),
                        "sessions": msgspec.to_builtins(summary.sessions),
                        "side_routes": msgspec.to_builtins(summary.side_routes),
                        "default_run": self.runs.default_id(name)})
        for name, error in self.suite.broken.items():
            out.append({"name": name, "valid": False, "errors": [str(p) for p in error.problems]})
        return web.json_response({"scenarios": out, "skipped": self.suite.skipped})

    async def create_run(self, request: web.Request) -> web.Response:
        raw = await read_body(request, self.max_body)
        if raw is None:
            return too_large(self.max_body)
        return self.created(raw, base_url(request, ""))

    def created(self, raw: bytes, origin: str) -> web.Response:
        """The answer to `POST /_mockllm/runs` with body `raw`: the run created, or why not.
        `origin`: the server's address as the client reached it (`http://host:port`)."""
        try:
            body = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            body = None
        except RecursionError:
            return mock_error(400, "invalid_request", TOO_DEEP)
        if not isinstance(body, dict) or not isinstance(body.get("scenario"), str):
            return mock_error(400, "invalid_request", 'expected {"scenario": "NAME"} and optionally '
                              f"{', '.join(repr(f) for f in RUN_FIELDS)}")
        name = body["scenario"]
        try:
            run = self.live.open_run(name, body)
        except ValueError as exc:
            return mock_error(400, "invalid_request", str(exc))
        except TooManyRuns as exc:
            return mock_error(429, "too_many_runs", str(exc))
        if not isinstance(run, Run):
            return run
        return web.json_response({"run": run.id, "base_url": f"{origin}/runs/{run.id}/v1"}, status=201)

    async def get_run(self, request: web.Request) -> web.Response:
        run = self.runs.get(request.match_info["run"])
        if run is None:
            return _unknown_run(request.match_info["run"])
        return _json(build_state(run))

    async def end_run(self, request: web.Request) -> web.Response:
        run = self.runs.end(request.match_info["run"])
        if run is None:
            return _unknown_run(request.match_info["run"])
        recording = await self.live.end(run, request.query.get("discard"))
        return _ended(run, recording)

    def end_at_once(self, run_id: str) -> web.Response | None:
        """`DELETE /_mockllm/runs/{run_id}` for a run that writes nothing as it ends (its report, or
        404), or None: it records, and its end awaits the writing (`end_run`)."""
        run = self.runs.get(run_id)
        if run is None:
            return _unknown_run(run_id)
        if self.live.records(run):
            return None
        self.runs.end(run_id)
        return _ended(run, None)


def _unknown_run(run_id: str) -> web.Response:
    return mock_error(404, "unknown_run", f"unknown run {run_id!r}")


def _ended(run: Run, recording: RecordingReport | None) -> web.Response:
    report = build_report(run)  # after the recording: its calls' failures are in the run by then
    if recording is not None:
        report = msgspec.structs.replace(report, recording=recording)
    return _json(report)


def _json(value: object) -> web.Response:
    return web.Response(body=msgspec.json.encode(value), content_type="application/json", charset="utf-8")
