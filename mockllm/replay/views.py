"""The JSON views of a run: the report `DELETE /_mockllm/runs/{run}` answers, and the live state
`GET` answers (the report plus settings, bindings, cursors and the journal). One place builds
them, so the admin API, the Python API's `RunReport` and the pytest plugin read the same shape.
"""

from __future__ import annotations

from typing import Any

from mockllm.replay.run import Run


def report(run: Run) -> dict[str, Any]:
    """The final report: consumed, failures, sessions and side routes served, divergences, holds."""
    run.review_pending()  # comparisons queued off the request path: the report shows them all
    return {
        "run": run.id, "scenario": run.scenario.name, "consumed": run.consumed,
        "failures": [f.as_dict() for f in run.failures.first],
        # Past the first FAILURES_KEPT, failures are only counted, per code.
        "failures_more": dict(run.failures.more), "sessions": _sessions(run),
        "divergences": [d.as_dict() for _, d in sorted(run.divergences.items())],
        "diverged_calls": run.diverged_calls,
        "side_routes": _side_routes(run), "held": list(run.held),
        "pacing": list(run.pacing.values()),
    }


def state(run: Run) -> dict[str, Any]:
    """The live state: the report, the run's settings, bindings, cursors and journal."""
    return {
        **report(run),
        "cwd": run.cwd, "settings": _settings(run), "holding": run.holding,
        "bindings": {live: run.scenario.sessions[b.script].id for live, b in run.bindings.items()},
        "cursors": {live: b.cursor for live, b in run.bindings.items()},
        "journal": [r.as_dict() for r in run.journal],
        "journal_dropped": run.journal.dropped,
    }


def _settings(run: Run) -> dict[str, Any]:
    settings = run.settings
    return {"pace": settings.pace, "speed": settings.speed, "strict": settings.strict,
            "ignore_input": list(settings.ignore_input), "bind": settings.bind}


def _sessions(run: Run) -> list[dict[str, Any]]:
    out = []
    for number, session in enumerate(run.scenario.sessions):
        binding = run.bound(number)
        served = min(binding.cursor, len(session.entries)) if binding else 0
        out.append({
            "id": session.id, "file": session.file, "kind": session.kind,
            "live_id": binding.live_id if binding else None,
            "served": served, "entries": len(session.entries), "remaining": len(session.entries) - served,
        })
    return out


def _side_routes(run: Run) -> list[dict[str, Any]]:
    out = []
    for calls, route in zip(run.side_calls, run.scenario.side_routes, strict=True):
        served = min(calls, len(route.entries))
        out.append({"model": route.model, "file": route.file, "repeat": route.repeat, "calls": calls,
                    "served": served, "entries": len(route.entries), "remaining": len(route.entries) - served})
    return out
