"""A scenario at a glance: its sessions (kind, cut, events, entries) and side routes.

`mockllm inspect` (text and `--json`) and `GET /_mockllm/scenarios` show the same summary, built
here once. Field order is the JSON's key order.
"""

from __future__ import annotations

import msgspec

from mockllm.dsh.header import SessionKind
from mockllm.scenario.load import Scenario, SessionScript
from mockllm.scenario.side_routes import SideRoute


class SessionSummary(msgspec.Struct, frozen=True):
    id: str
    file: str
    parent: str | None
    kind: SessionKind
    cut: int
    events: int  # logical events, packed rows expanded
    entries: int


class SideRouteSummary(msgspec.Struct, frozen=True):
    model: str
    file: str
    repeat: bool
    entries: int


class ScenarioSummary(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str
    sessions: list[SessionSummary]
    # Left out when none is declared: `inspect --json`'s documented shape predates side routes.
    side_routes: list[SideRouteSummary] = []


def summarize(scenario: Scenario) -> ScenarioSummary:
    """The scenario's sessions, in script order, and its side routes."""
    return ScenarioSummary(scenario.name, [_session(s) for s in scenario.sessions],
                           [_side_route(r) for r in scenario.side_routes])


def _session(session: SessionScript) -> SessionSummary:
    return SessionSummary(session.id, session.file, session.parent, session.kind, session.cut, session.events,
                          len(session.entries))


def _side_route(route: SideRoute) -> SideRouteSummary:
    return SideRouteSummary(route.model, route.file, route.repeat, len(route.entries))
