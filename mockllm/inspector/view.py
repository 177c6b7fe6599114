"""One run as the inspector shows it: a lane per session, each call on its lane with its outcome.

Built from the report Structs only (`RunState`: the report, bindings and journal; the scenario's
`ScenarioSummary` for kinds and cuts), so the live page, the one-file report and a unit test
with no socket all see the same thing. Journal records stay the dicts the state holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from mockllm.dsh.names import EMBEDDINGS_FILE
from mockllm.mcp.replay import McpCall
from mockllm.replay.report import DivergenceReport, Failure, RunState, SessionReport, SideRouteReport
from mockllm.scenario.summary import ScenarioSummary, SessionSummary

Outcome = Literal["served", "diverged", "failed", "fault", "retry", "live"]
# In the legend's order. "live" is for calls sent on to an upstream (record on a miss), when that lands.
OUTCOMES: tuple[Outcome, ...] = ("served", "diverged", "failed", "fault", "retry", "live")
ENTRY_KINDS = {"ChunksEntry": "chunks", "ThrowEntry": "throw", "HangEntry": "hang"}


@dataclass(slots=True, eq=False)
class CallView:
    number: int  # 0-based in the run, counting calls the journal no longer keeps
    record: dict[str, Any]  # the journal record, as the run's state holds it
    outcome: Outcome
    lane: str  # the key of its lane
    divergence: DivergenceReport | None = None  # set on the session's first divergence: described in full
    failure: Failure | None = None  # the failure this call was answered with, if it is in the report
    held: bool = False

    @property
    def entry_kind(self) -> str | None:
        kind = self.record.get("kind")
        return ENTRY_KINDS.get(kind, kind) if isinstance(kind, str) else None


@dataclass(slots=True, eq=False)
class McpView:
    """A call to an MCP server, on the lane of the session that made it, after the model calls before it."""

    number: int  # 0-based among the run's MCP calls
    call: McpCall
    lane: str
    column: int  # 1-based: the timeline column of the last model call that came before it (1 if none)

    @property
    def outcome(self) -> Outcome:
        return "live" if self.call.live else "diverged" if self.call.error else "served"


@dataclass(slots=True, eq=False)
class Lane:
    key: str  # the recorded file; a side route's file; `live:<id>` for a session bound to no script
    title: str
    kind: str  # primary, spawn, fork, side route, embeddings, unrecorded
    summary: SessionSummary | None = None
    session: SessionReport | None = None
    side: SideRouteReport | None = None
    live_id: str | None = None
    bound: str = ""  # how the live session was bound, in words
    calls: list[CallView] = field(default_factory=list)
    mcp: list[McpView] = field(default_factory=list)  # MCP calls the session made

    @property
    def served(self) -> int:
        return self.session.served if self.session else self.side.served if self.side else 0

    @property
    def entries(self) -> int:
        return self.session.entries if self.session else self.side.entries if self.side else 0


@dataclass(slots=True, eq=False)
class RunView:
    state: RunState
    lanes: list[Lane]
    calls: list[CallView]
    ended: bool = False
    first_at: float | None = None  # when the first kept call arrived (epoch seconds)
    mcp: list[McpView] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        """What went wrong; calls not yet requested count only once the run has ended."""
        return self.state.problems(require_consumed=self.ended)


def outcome_of(record: dict[str, Any]) -> Outcome:
    """One colour per call: what matters most about it first."""
    if record.get("live"):
        return "live"
    if record.get("error"):
        return "failed"  # a mock-made error: unrecorded session, script exhausted, refused under strict
    if record.get("fault"):
        return "fault"
    if record.get("retry"):
        return "retry"
    if record.get("diverged"):
        return "diverged"
    return "served"


def bound_how(session: SessionReport, state: RunState) -> str:
    """How a recorded session got its live session, in words."""
    if session.live_id is None:
        return "not bound" if session.entries else "never calls (no model calls recorded)"
    if session.live_id == session.id:
        return "by its recorded id"
    noted = {n.kind for n in state.notices if n.session == session.file and n.call == 0}
    if "bound_to_closest" in noted:
        return "by content, to the closest recording: no recorded first request matched its own in every part"
    if "bound_by_arrival" in noted:
        return "by content, among twins in recorded order: their first requests are alike"
    if state.settings.bind == "content":
        return "by content: its first request matched"
    return "in first-call order"


def run_view(state: RunState, summary: ScenarioSummary | None = None, *, ended: bool = False) -> RunView:
    """The run's lanes and calls, each call matched with its divergence and failure if any."""
    summaries = {s.file: s for s in summary.sessions} if summary is not None else {}
    lanes: dict[str, Lane] = {}
    for session in state.sessions:
        lanes[session.file] = Lane(session.file, session.file, session.kind or "session", summaries.get(session.file),
                                   session, live_id=session.live_id, bound=bound_how(session, state))
    for side in state.side_routes:
        lanes[side.file] = Lane(side.file, side.file, "side route", side=side, bound=f"model {side.model}")
    calls = []
    for index, record in enumerate(state.journal):
        script = record.get("script")
        key = script if isinstance(script, str) and script in lanes else f"live:{record.get('session')}"
        if script == EMBEDDINGS_FILE and key not in lanes:  # embeddings calls: no session, a lane of their own
            key = EMBEDDINGS_FILE
            lanes[key] = Lane(key, key, "embeddings", bound="answered by content, in any order")
        if key not in lanes:
            live = str(record.get("session"))
            lanes[key] = Lane(key, f"live session {live}", "unrecorded", live_id=live,
                              bound="bound to no recorded session")
        call = CallView(state.journal_dropped + index, record, outcome_of(record), key)
        lanes[key].calls.append(call)
        calls.append(call)
    _match_divergences(state, calls)
    _match_failures(state, calls)
    held = {(h.session, h.script, h.call) for h in state.held}
    for call in calls:
        call.held = (call.record.get("session"), call.record.get("script"), call.record.get("call")) in held
    first_at = state.journal[0].get("at") if state.journal else None
    mcp = _mcp_calls(state, lanes, calls)
    return RunView(state, list(lanes.values()), calls, ended, first_at if isinstance(first_at, float) else None, mcp)


def _mcp_calls(state: RunState, lanes: dict[str, Lane], calls: list[CallView]) -> list[McpView]:
    """Each MCP call on the lane of the session that made it (its session header named the live id),
    else on a lane of its server's own."""
    by_live = {lane.live_id: lane for lane in lanes.values() if lane.live_id is not None}
    times = [c.record.get("at") for c in calls]
    out = []
    for number, call in enumerate(state.mcp):
        lane = by_live.get(call.session) if call.session is not None else None
        if lane is None:
            key = f"mcp:{call.server}"
            lane = lanes.get(key)
            if lane is None:
                lane = lanes[key] = Lane(key, f"MCP server {call.server}", "mcp",
                                         bound="calls no session header named")
        before = sum(1 for at in times if isinstance(at, float) and at <= call.time)
        view = McpView(number, call, lane.key, max(before, 1))
        lane.mcp.append(view)
        out.append(view)
    return out


def _match_divergences(state: RunState, calls: list[CallView]) -> None:
    for divergence in state.divergences:
        call = next((c for c in calls if c.record.get("diverged") and c.record.get("script") == divergence.session
                     and c.record.get("call") == divergence.call and c.divergence is None), None)
        if call is not None:
            call.divergence = divergence


def _match_failures(state: RunState, calls: list[CallView]) -> None:
    for failure in state.failures:
        call = next((c for c in calls if c.failure is None and c.record.get("error") == failure.code
                     and c.record.get("session") == failure.session and c.record.get("call") == failure.call), None)
        if call is not None:
            call.failure = failure


def divergence_call(view: RunView, divergence: DivergenceReport) -> CallView | None:
    """The call a divergence was found on, while the journal keeps it."""
    return next((c for c in view.calls if c.divergence is divergence), None)
