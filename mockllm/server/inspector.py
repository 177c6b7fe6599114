"""The inspector's endpoints: the live page, its events, a run's view, one call, reset, and the report.

- `GET /_mockllm/`: the live page (HTML, one document: `mockllm.inspector.pages`).
- `GET /_mockllm/events`: server-sent `run` events as runs change (`events.Hub`).
- `GET /_mockllm/runs`: the runs, live and recently ended (`{"runs": [{"run", "scenario", "ended"}]}`).
- `GET /_mockllm/runs/{run}/view`: the run's HTML as the page shows it (no request bodies).
- `GET /_mockllm/runs/{run}/calls/{n}`: call `n` (0-based) of the run's journal, body included.
- `POST /_mockllm/runs/{run}/reset`: start the run over with the same id and base URL.
- `GET /_mockllm/runs/{run}/report.html`: the run as one self-contained HTML file.
A run ended lately (`replay.runs.ENDED_KEPT`) still has its view, calls and report: a page keeps
showing it, and a failing test fetches its report after ending its run.
Rendering is the inspector package's (pure); this module only finds the run and answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import quote

import msgspec
from aiohttp import web

from mockllm.inspector.markup import run_html
from mockllm.inspector.pages import live_page, report_page
from mockllm.inspector.view import RunView, run_view
from mockllm.replay.reporting import build_state
from mockllm.replay.run import Run
from mockllm.replay.runs import Runs
from mockllm.scenario.load import Scenario, Suite
from mockllm.scenario.summary import ScenarioSummary, summarize
from mockllm.server.admin import base_url
from mockllm.server.events import Hub
from mockllm.server.mock_errors import mock_error

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
HTML = "text/html"
PAGE_RUNS = 50  # runs the live page shows when it loads
# The page and views change as the runs do: never from a cache.
NO_STORE = {"Cache-Control": "no-store"}


def body_url(run: str, number: int) -> str:
    return f"/_mockllm/runs/{quote(run, safe='')}/calls/{number}"


class Inspector:
    def __init__(self, suite: Suite, runs: Runs, hub: Hub) -> None:
        self.suite = suite
        self.runs = runs
        self.hub = hub
        # Summarized once per scenario loaded: a record-mode run adds scenarios (and rewrites them) while served.
        self._summaries: dict[str, tuple[Scenario, ScenarioSummary]] = {}

    def routes(self) -> dict[str, dict[str, Handler]]:
        """Path -> method -> handler, for the app to add (`GET /_mockllm/runs` joins `POST` there)."""
        return {
            "/_mockllm": {"GET": self.to_page},
            "/_mockllm/": {"GET": self.page},
            "/_mockllm/events": {"GET": self.hub.stream},
            "/_mockllm/runs/{run}/view": {"GET": self.view},
            "/_mockllm/runs/{run}/calls/{number}": {"GET": self.call},
            "/_mockllm/runs/{run}/reset": {"POST": self.reset},
            "/_mockllm/runs/{run}/report.html": {"GET": self.report},
        }

    async def to_page(self, request: web.Request) -> web.Response:
        raise web.HTTPPermanentRedirect("/_mockllm/")

    async def page(self, request: web.Request) -> web.Response:
        # The latest PAGE_RUNS only: a page of thousands of runs took seconds to build, and every other
        # run waited meanwhile. The page adds runs as they change; GET /_mockllm/runs lists them all.
        listed = list(self.runs.listing())
        views = [self._view(run, ended) for run, ended in reversed(listed[-PAGE_RUNS:])]
        names = [*self.suite.scenarios]
        broken = {name: [str(p) for p in error.problems] for name, error in self.suite.broken.items()}
        summaries = [s for s in (self.summary(n) for n in names) if s is not None]
        text = live_page(summaries, broken, views, server=base_url(request, ""),
                         base_urls={n: base_url(request, f"/scenarios/{n}/v1") for n in names}, body_url=body_url)
        return web.Response(text=text, content_type=HTML, headers=NO_STORE)

    async def list_runs(self, request: web.Request) -> web.Response:
        listed = [{"run": run.id, "scenario": run.scenario.name, "ended": ended, "default": run.default}
                  for run, ended in self.runs.listing()]
        return web.json_response({"runs": listed}, headers=NO_STORE)

    async def view(self, request: web.Request) -> web.Response:
        found = self._find(request)
        if isinstance(found, web.Response):
            return found
        text = run_html(self._view(*found), body_url=body_url, actions=True, calls_open=False)
        return web.Response(text=text, content_type=HTML, headers=NO_STORE)

    async def call(self, request: web.Request) -> web.Response:
        found = self._find(request)
        if isinstance(found, web.Response):
            return found
        run = found[0]
        number = request.match_info["number"]
        # ASCII digits only, and few: `²` is a digit to str.isdigit, and int() refuses 5,000 of them.
        record = run.journal.numbered(int(number)) if number.isascii() and number.isdigit() and len(number) < 19 \
            else None
        if record is None:
            return mock_error(404, "unknown_call", f"run {run.id} keeps no call {number[:40]}: its journal keeps calls "
                              f"{run.journal.dropped} to {run.journal.total - 1} (numbered from 0)")
        return web.Response(body=msgspec.json.encode(record.as_dict()), content_type="application/json",
                            charset="utf-8", headers=NO_STORE)

    async def reset(self, request: web.Request) -> web.Response:
        run = self.runs.reset(request.match_info["run"])
        if run is None:
            return mock_error(404, "unknown_run", f"unknown run {request.match_info['run']!r}: only a live run "
                              "can be reset")
        return web.json_response({"run": run.id, "base_url": base_url(request, f"/runs/{run.id}/v1")})

    async def report(self, request: web.Request) -> web.Response:
        found = self._find(request)
        if isinstance(found, web.Response):
            return found
        run, ended = found
        summary = self.summary(run.scenario.name)
        text = report_page(run_view(build_state(run), summary, ended=ended), summary)
        return web.Response(text=text, content_type=HTML, headers=NO_STORE)

    def _find(self, request: web.Request) -> tuple[Run, bool] | web.Response:
        run_id = request.match_info["run"]
        found = self.runs.find(run_id)
        if found is None:
            return mock_error(404, "unknown_run", f"unknown run {run_id!r}: never created, or ended too long ago "
                              "(the server keeps the latest ended runs' reports; fetch it before ending more)")
        return found

    def _view(self, run: Run, ended: bool) -> RunView:
        # No request bodies: a long run's journal holds up to 64 KiB per call; the page fetches one when opened.
        return run_view(build_state(run, bodies=False), self.summary(run.scenario.name), ended=ended)

    def summary(self, name: str) -> ScenarioSummary | None:
        """The scenario's summary as it is served now (None for a run still recording it from scratch)."""
        scenario = self.suite.scenarios.get(name)
        if scenario is None:
            return None
        kept = self._summaries.get(name)
        if kept is None or kept[0] is not scenario:
            kept = self._summaries[name] = (scenario, summarize(scenario))
        return kept[1]
