"""A scenario at a glance: its sessions (kind, cut, events, entries) and side routes.

`mockllm inspect` (text and `--json`) and `GET /_mockllm/scenarios` show the same summary, built
here once. Field order is the JSON's key order.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from mockllm.dsh.header import SessionKind
from mockllm.dsh.names import MANIFEST_FILE
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


class EmbeddingsSummary(msgspec.Struct, frozen=True):
    file: str
    calls: int  # request and answer pairs recorded
    apis: dict[str, int]  # calls per API (`openai/embeddings`, ...)
    models: list[str]


class ScenarioSummary(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str
    sessions: list[SessionSummary]
    # Left out when none is declared: `inspect --json`'s documented shape predates side routes.
    side_routes: list[SideRouteSummary] = []
    # How a record mode recorded it (`mockllm.json`'s "recorded": at, by, mode, upstream); left out
    # for a scenario recorded otherwise.
    recorded: dict[str, Any] | None = None
    # Its embeddings.json, left out when it has none.
    embeddings: EmbeddingsSummary | None = None


def summarize(scenario: Scenario) -> ScenarioSummary:
    """The scenario's sessions, in script order, and its side routes."""
    store = scenario.embeddings
    embeddings = None if store is None else EmbeddingsSummary(
        store.path.name, len(store), {api: sum(p.api == api for p in store.recorded)
                                      for api in dict.fromkeys(p.api for p in store.recorded)}, store.models())
    return ScenarioSummary(scenario.name, [_session(s) for s in scenario.sessions],
                           [_side_route(r) for r in scenario.side_routes], recorded_by(scenario.path), embeddings)


def recorded_by(folder: Path) -> dict[str, Any] | None:
    """What `mockllm.json` says of how the scenario was recorded, if a record mode recorded it."""
    try:
        doc = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    recorded = doc.get("recorded") if isinstance(doc, dict) else None
    return recorded if isinstance(recorded, dict) else None


def age(recorded: dict[str, Any], now: datetime | None = None) -> str:
    """How long ago a recording was made, in words ("3 days ago"), from its `at`."""
    try:
        at = datetime.fromisoformat(str(recorded.get("at")))
    except ValueError:
        return "at an unknown time"
    seconds = ((now or datetime.now(UTC)) - at).total_seconds()
    for unit, size in (("year", 365 * 86400), ("month", 30 * 86400), ("day", 86400), ("hour", 3600),
                       ("minute", 60)):
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count > 1 else ''} ago"
    return "just now"


def _session(session: SessionScript) -> SessionSummary:
    return SessionSummary(session.id, session.file, session.parent, session.kind, session.cut, session.events,
                          len(session.entries))


def _side_route(route: SideRoute) -> SideRouteSummary:
    return SideRouteSummary(route.model, route.file, route.repeat, len(route.entries))
