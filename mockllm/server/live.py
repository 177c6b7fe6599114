"""Record modes in the server: what a new run is, given its record mode and whether its scenario has a
recording; the live calls of the runs that record; their recordings, written when they end.

| record_mode | the scenario has a recording | it has none |
| --- | --- | --- |
| `none` | replayed | refused, naming how to record it |
| `once` | replayed | recorded from scratch |
| `new_episodes` | replayed; what it cannot serve goes live | recorded from scratch |
| `rewrite` | recorded from scratch, replaced at the end | recorded from scratch |

Only runs made with `POST /_mockllm/runs` record; a scenario's default run always replays. A run may
ask for a record mode of its own (`"record_mode"`) only when the server's is not `none`, or when
its operator allowed it (`--allow-run-record-modes`, on by default for the Python API and the
pytest plugin, whose caller starts the server for its own runs): a server started to replay never
reaches the network because a client asked it to; such a run is refused with 403
`record_mode_not_allowed`. The
recording code is record mode's own (`mockllm.record.recording`); this module only connects it
to runs, and puts a written scenario in the suite, so the next run replays it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from mockllm.errors import RecordError, ReplayFailure, ScenarioError
from mockllm.options import ServeOptions
from mockllm.record.episode_recording import EpisodeRecording
from mockllm.record.forward import OnFailure
from mockllm.record.recording import RunRecording, TreeRecording, Upstreams
from mockllm.record.tree import Caller
from mockllm.record.upstream import Exchange, Upstream
from mockllm.replay.catalog import warm
from mockllm.replay.outcome import Live
from mockllm.replay.report import RecordingReport
from mockllm.replay.run import Run
from mockllm.replay.runs import Runs
from mockllm.scenario.load import Suite, is_scenario, load_scenario, name_problem
from mockllm.scenario.side_routes import SideRouteSpec
from mockllm.server.advice import pytest_command, record_run_command, serve_command, upstream_note
from mockllm.server.mock_errors import mock_error
from mockllm.wire.dialect import Dialect
from mockllm.wire.embeddings import EmbeddingsAPI
from mockllm.wire.request import Request

log = logging.getLogger("mockllm")



class LiveCalls:
    def __init__(self, suite: Suite, runs: Runs, options: ServeOptions) -> None:
        self.suite = suite
        self.runs = runs
        self.options = options
        self.upstreams = Upstreams(options.upstream)
        self.recordings: dict[str, RunRecording] = {}  # by run id
        # No read timeout: an answer may stream for as long as the upstream takes.
        self.client = Upstream()

    def open_run(self, name: str, body: Mapping[str, Any]) -> Run | web.Response:
        """A new run of scenario `name` as its record mode has it (see the table above), or the error
        to answer. A bad field is a ValueError naming it."""
        mode = self.runs.settings(body).record_mode
        if mode != "none" and self.options.record_mode == "none" and not self.options.allow_run_record_modes:
            return mock_error(403, "record_mode_not_allowed", (
                f"record_mode {mode} refused: this server was started with record mode none and "
                "--allow-run-record-modes false: its operator lets no run reach the upstream. Start it with "
                "--record-mode MODE, or without --allow-run-record-modes false, to let runs record "
                "(mockllm.Server: allow_run_record_modes=True); see docs/security.md"))
        exists = name in self.suite.scenarios
        if mode == "none" or (mode == "once" and exists):
            return self._not_loaded(name, mode) or self.runs.create(name, body)
        problem = self._cannot_record(name, mode)
        if problem is not None:
            return mock_error(400, "invalid_request", problem)
        cwd = self.runs.settings(body).cwd
        if mode == "new_episodes" and exists:
            run = self.runs.create(name, body, episodes=True)
            self.recordings[run.id] = EpisodeRecording(self.suite.scenarios[name], self.upstreams, self.client,
                                                       _failing(run), cwd, run.bindings)
            return run
        folder = self.suite.folder_of(name)
        run = self.runs.create_recording(name, folder, body)
        try:
            self.recordings[run.id] = TreeRecording(mode, name, folder, self.upstreams, self.client, _failing(run),
                                                    cwd, self.options.all_session_headers, self._side_routes(name))
        except (OSError, RecordError) as exc:  # a folder that cannot be made: the run never was
            self.runs.discard(run.id)
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            return mock_error(400, "invalid_request", f"cannot record scenario {name!r} at {folder}: {why}")
        return run

    def _side_routes(self, name: str) -> list[SideRouteSpec]:
        """The side routes a recording of scenario `name` keeps apart: those it declares (when it has a
        recording: `rewrite` records it anew), and the server's `--side-route` ones."""
        scenario = self.suite.scenarios.get(name)
        declared = [SideRouteSpec(r.model, r.file, r.repeat) for r in scenario.side_routes] if scenario else []
        models = {r.model for r in declared}
        return [*declared, *(r for r in self.options.side_route_specs if r.model not in models)]

    def _not_loaded(self, name: str, mode: str) -> web.Response | None:
        if name in self.suite.broken:
            return mock_error(422, "scenario_invalid", f"scenario {name} failed to load: {self.suite.broken[name]}")
        if name in self.suite.scenarios:
            return None
        known = ", ".join(sorted(self.suite.scenarios)) or "none"
        if self.upstreams:  # this server can record it: a run that asks to
            how = (f"in pytest, {pytest_command(self.options.upstream)}; else create its run with "
                   f"\"record_mode\": \"once\": {record_run_command(self.runs.origin, name)}")
        else:
            how = (f"serve with an upstream, {serve_command(self.suite.path, self.options.upstream, 'once')}; "
                   f"in pytest, {pytest_command(self.options.upstream)}")
        return mock_error(404, "unknown_run", (
            f"unknown scenario {name!r}; loaded scenarios: {known}. It has no recording in {self.suite.path}, and "
            f"record mode {mode} only replays. Record it: {how}{upstream_note(self.options.upstream)}"))

    def _cannot_record(self, name: str, mode: str) -> str | None:
        """Why this server cannot record scenario `name`, or None."""
        if not self.upstreams:
            return (f"record_mode {mode} needs an upstream to send live calls to: start the server with one, "
                    f"{serve_command(self.suite.path, (), mode)} (mockllm.Server(upstream=...); in pytest, "
                    f"{pytest_command((), mode)}){upstream_note(())}")
        if not self.suite.recordable:
            return (f"record_mode {mode} writes into a recordings folder, and this server serves "
                    f"{self.suite.path}, which is not one: serve a suite folder (a new or empty one will do)")
        if mode == "once" and name in self.suite.broken:
            return f"scenario {name} has a recording that failed to load: {self.suite.broken[name]}"
        problem = name_problem(name)
        if problem is not None:
            return problem
        folder = self.suite.folder_of(name)
        if self.suite.single and folder != self.suite.path:
            return f"this server serves the one scenario {self.suite.path}; to record {name!r}, serve its suite folder"
        group = name.partition("/")[0]
        if "/" in name and is_scenario(self.suite.path / group):
            return f"scenario name {name!r}: {group} is a scenario itself, and cannot hold another"
        if "/" in name and (self.suite.path / group).exists() and not (self.suite.path / group).is_dir():
            return f"scenario name {name!r}: {self.suite.path / group} is not a folder, and cannot hold a scenario"
        if folder.exists() and not is_scenario(folder):
            return f"{folder} exists and is not a scenario: it is not replaced; name another scenario"
        return None

    def send_early(self, request: web.Request, run: Run, dialect: Dialect, body: bytes) -> Exchange | None:
        """A run that records from scratch sends every call upstream: begin it before the call is
        decoded and routed (sent at once on an idle kept-alive connection), so that work overlaps the
        upstream's and adds nothing to the first byte. None: the run does not record from scratch."""
        recording = self.recordings.get(run.id) if run.recording else None
        return recording.send_early(request, _under_root(request), body, dialect) if recording else None

    async def call(self, request: web.Request, run: Run, dialect: Dialect, neutral: Request, body: bytes,
                   live: Live, early: Exchange | None = None) -> web.StreamResponse:
        """Send a live call to the upstream (or take its `early` exchange) and stream its answer back,
        recording it for the run."""
        recording = self.recordings.get(run.id)
        if recording is None:  # the run ended while this call was on its way
            if early is not None:
                early.close()
            return mock_error(410, "run_ended", f"run {run.id} has ended; its recording takes no more calls",
                              dialect=dialect)
        return await recording.call(request, _under_root(request), body, dialect, neutral, live, early)

    async def count_tokens(self, request: web.Request, run: Run, body: bytes) -> web.StreamResponse | None:
        """Send a `count_tokens` call of a recording run upstream, keeping the count for its recording;
        None when the run records nothing (it only replays)."""
        recording = self.recordings.get(run.id)
        if recording is None:
            return None
        return await recording.count_tokens(request, _under_root(request), body)

    async def embeddings(self, request: web.Request, run: Run, body: bytes,
                         api: EmbeddingsAPI) -> web.StreamResponse | None:
        """Send an embeddings call of a recording run upstream, keeping the answer for its recording;
        None when the run records nothing (it only replays)."""
        recording = self.recordings.get(run.id)
        if recording is None:
            return None
        return await recording.embeddings(request, _under_root(request), body, api)

    def records(self, run: Run) -> bool:
        """Whether `run` has a recording to write as it ends (`end`)."""
        return run.id in self.recordings

    async def end(self, run: Run, discard: str | None = None) -> RecordingReport | None:
        """The run ended: write its recording (unless `discard` says why not) and serve it from now on."""
        recording = self.recordings.pop(run.id, None)
        if recording is None:
            return None

        def failures() -> str | None:
            return "; ".join(f.message for f in run.failures.first[:3]) or None

        report = await recording.finish(keep=discard is None, failures=failures, why_not=discard or "")
        if report.written:
            self._serve(recording)
        return report

    def _serve(self, recording: RunRecording) -> None:
        name = recording.name
        try:
            scenario = load_scenario(recording.folder, name=name, side_routes=self.options.side_route_specs)
        except ScenarioError as exc:
            log.error("scenario %s was recorded but does not load: %s", name, exc)
            self.suite.broken[name] = exc
            return
        self.suite.broken.pop(name, None)
        self.runs.add_scenario(scenario)
        warm(self.runs.catalogs[name], self.options)

    async def close(self) -> None:
        """The server stops: recordings of runs never ended are not written."""
        for recording in self.recordings.values():
            recording.discard()
        self.recordings.clear()
        await self.client.close()


def _under_root(request: web.Request) -> str:
    """A request's path under its base root (`/v1/chat/completions`, `/api/chat`, …), query included, as
    the client sent it: forwarded undecoded (`%E4%B8%AD`, `%20`, `%0D%0A` stay as they came), as
    `mockllm record` forwards it."""
    info = request.match_info
    root = f"/runs/{info['run']}" if "run" in info else f"/scenarios/{info['name']}" if "name" in info else ""
    # The root's segments, counted in the decoded path, are as many in the raw one.
    segments = root.count("/")
    raw = request.raw_path
    return "/" + raw.split("/", segments + 1)[-1] if segments else raw


def _failing(run: Run) -> OnFailure:
    """What a recording tells its run of an upstream failure: one of the run's failures."""

    def failed(caller: Caller, status: int, message: str) -> None:
        run.fail(ReplayFailure(status if status >= 400 else 502, "upstream_failed", f"run {run.id}: {message}",
                               caller.session or None, None))

    return failed

