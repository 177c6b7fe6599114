"""Whole pages: the live inspector (`GET /_mockllm/`) and the one-file report of a run
(`GET /_mockllm/runs/{run}/report.html`, saved by the pytest plugin for a failing test).

Both are one HTML document with the stylesheet and scripts of `assets/` inlined: no build step,
no CDN, nothing fetched to read it. The report also carries its run's report as JSON (request
bodies left out: they are in the HTML already), for a tool that would rather read data.
"""

from __future__ import annotations

import functools
import importlib.resources
from collections.abc import Sequence

import msgspec

from mockllm.inspector.markup import BodyUrl, esc, legend, plural, run_html, scenarios_html, tree_html
from mockllm.inspector.view import RunView
from mockllm.scenario.summary import ScenarioSummary


@functools.cache
def asset(name: str) -> str:
    """A file of `assets/`, read once: it ships as package data."""
    return importlib.resources.files("mockllm.inspector").joinpath("assets", name).read_text(encoding="utf-8")


def _document(title: str, body: str, scripts: Sequence[str], data: bytes | None = None) -> str:
    inline = "".join(f"<script>{asset(name)}</script>" for name in scripts)
    blob = ""
    if data is not None:
        # "<" escaped inside JSON strings: the data can never close its <script> element.
        json_text = data.decode().replace("<", "\\u003c")
        blob = f'<script type="application/json" id="mockllm-report">{json_text}</script>'

    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{asset('inspector.css')}</style></head>"
            f"<body>{body}{blob}{inline}</body></html>")


def live_page(scenarios: Sequence[ScenarioSummary], broken: dict[str, list[str]], runs: Sequence[RunView],
              *, base_urls: dict[str, str], body_url: BodyUrl, server: str) -> str:
    """The live inspector as it is now (readable as it is; its script keeps it up to date)."""
    sections = "".join(run_html(view, body_url=body_url, actions=True, calls_open=False) for view in runs)
    if not runs:
        sections = '<p id="no-runs" class="muted">No runs yet: a first call or POST /_mockllm/runs makes one.</p>'
    body = (f'<header class="top"><h1>mockllm inspector</h1><span class="muted">{esc(server)}</span>'
            f"{legend()}<span id=\"status\" class=\"status\">connecting…</span></header>"
            '<div class="page"><aside><h2>Scenarios</h2>'
            f'<div id="scenarios">{scenarios_html(scenarios, broken, base_urls)}</div></aside>'
            f'<main><h2>Runs</h2><div id="runs">{sections}</div></main></div>')
    return _document("mockllm inspector", body, ["common.js", "live.js"])


def report_page(view: RunView, summary: ScenarioSummary | None) -> str:
    """One run as a single self-contained file: the verdict, where it diverged, the scenario's tree,
    the timeline and every call kept, with its request."""
    state = view.state
    problems = view.problems
    verdict, tone = (plural(len(problems), "problem"), "bad") if problems else ("replayed as recorded", "ok")
    if state.diverged_calls and not problems:
        verdict, tone = f"{verdict}; {plural(state.diverged_calls, 'call')} diverged", "warn"
    tree = (f'<div class="panel"><h3>Scenario {esc(summary.name)}</h3>{tree_html(summary)}</div>'
            if summary is not None else "")
    body = (f'<header class="top"><h1>mockllm report: {esc(state.run)} of {esc(state.scenario)}</h1>'
            f'<span class="{tone}">{esc(verdict)}</span></header>'
            f'<div class="report">{tree}{run_html(view)}</div>')
    data = msgspec.json.encode({**msgspec.to_builtins(state),
                                "journal": [{**r, "body": None} for r in state.journal]})
    return _document(f"mockllm report: {state.run} ({state.scenario}): {verdict}", body, ["common.js"], data)
