"""A run's report and live state built from the run: the Structs of `report`, filled in.

Its own module so that `report` (the Structs, which the Python API decodes without the replay
machinery) imports nothing of the run that builds them, and the run can name its report's parts.
"""

from __future__ import annotations

import msgspec

from mockllm.replay.report import (
    DivergenceReport,
    Failure,
    HeldCall,
    RunReport,
    RunSettingsReport,
    RunState,
    SessionReport,
    SideRouteReport,
)
from mockllm.replay.run import Run


def build_report(run: Run) -> RunReport:
    """The run's report now: consumed, failures, sessions and side routes served, divergences, holds."""
    run.review_pending()  # comparisons queued off the request path: the report shows them all
    misses = run.mcp.misses  # an MCP call no recorded call answers is a divergence as a model call's is
    return RunReport(
        run=run.id, scenario=run.scenario.name, consumed=run.consumed,
        failures=[Failure(f.code, f.message, f.session, f.call) for f in run.failures.first],
        failures_more=dict(run.failures.more),
        sessions=_sessions(run),
        divergences=[*(DivergenceReport(d.kind, d.file, d.live_id, d.call, d.what, d.expected, d.got, d.diff)
                       for d in [*(d for _, d in sorted(run.divergences.items())), *run.embedding_misses]),
                     *(DivergenceReport("mcp", m.file, m.session or "-", m.call, m.what, m.nearest, m.what, m.why)
                       for m in misses)],
        diverged_calls=run.diverged_calls + len(run.embedding_misses) + len(misses),
        side_routes=_side_routes(run),
        held=[HeldCall(**held) for held in run.held],
        pacing=list(run.pacing.values()),
        faults=list(run.faults_served),
        notices=list(run.notices),
        divergence=run.settings.divergence,
        went_live=list(run.went_live.values()),
        mcp=run.mcp.calls,
    )


def build_state(run: Run, *, bodies: bool = True) -> RunState:
    """The run's live state: its report, settings, bindings, cursors and journal (without request
    bodies unless `bodies`: the inspector's live view lists calls and fetches one body at a time)."""
    settings = run.settings
    return RunState(
        **msgspec.structs.asdict(build_report(run)),
        cwd=run.cwd,
        settings=RunSettingsReport(settings.pace, settings.speed, settings.strict, list(settings.ignore_input),
                                   settings.bind, settings.normalize, settings.divergence),
        holding=run.holding,
        bindings={live: run.scenario.sessions[b.script].id for live, b in run.bindings.items()},
        cursors={live: b.cursor for live, b in run.bindings.items()},
        journal=[r.as_dict(body=bodies) for r in run.journal],
        journal_dropped=run.journal.dropped,
    )


def _sessions(run: Run) -> list[SessionReport]:
    out = []
    for number, session in enumerate(run.scenario.sessions):
        binding = run.bound(number)
        # A cursor runs past the end when a session asks for more than was recorded.
        served = min(binding.cursor, len(session.entries)) if binding else 0
        # A session that went live (new_episodes) wants none of its script's rest: nothing remains.
        remaining = 0 if binding is not None and binding.live else len(session.entries) - served
        out.append(SessionReport(session.id, session.file, session.kind, binding.live_id if binding else None,
                                 served, len(session.entries), remaining, binding.retries if binding else 0))
    return out


def _side_routes(run: Run) -> list[SideRouteReport]:
    out = []
    for calls, route in zip(run.side_calls, run.scenario.side_routes, strict=True):
        served = min(calls, len(route.entries))
        out.append(SideRouteReport(route.model, route.file, route.repeat, calls, served, len(route.entries),
                                   len(route.entries) - served))
    return out
