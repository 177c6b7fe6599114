"""Runs: independent replays of one scenario, with their bindings, cursors and journal (no HTTP).

A live session (named by a request header, or found by its conversation) binds to a recorded
session's script on its first call: to the script with the same recorded id if there is one,
else to the next unbound script in script order (first-call order, as dsh binds). Each binding
then has its own cursor, advanced when a request arrives, so a session's call order (not stream
timing) fixes which entry it gets.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from mockllm.conversations import ConversationIndex
from mockllm.errors import ReplayFailure
from mockllm.journal import Failures, Journal
from mockllm.options import Headerless, RunSettings, ServeOptions
from mockllm.scenario import Scenario, SessionScript
from mockllm.wire.dialect import Dialect, Request

ANONYMOUS = "anonymous"


@dataclass(slots=True)
class Binding:
    script: int  # index into scenario.sessions
    live_id: str
    cursor: int = 0  # entries served so far
    continued: int | None = None  # the call whose reply the latest chained request continued


class Turn(NamedTuple):
    """What one request was given: the bound session and the 0-based entry index.

    A named tuple: one is made per model call, and a frozen dataclass costs several times more.
    """

    script: int
    call: int
    session: SessionScript
    live_id: str


@dataclass(slots=True)
class Run:
    id: str
    scenario: Scenario
    settings: RunSettings = field(default_factory=RunSettings)
    headerless: Headerless = "conversation"
    created: float = field(default_factory=time.time)
    bindings: dict[str, Binding] = field(default_factory=dict)  # live id -> binding
    failures: Failures = field(default_factory=Failures)
    journal: Journal = field(default_factory=Journal)
    holding: int = 0  # streams currently held open by a hang or an aborted finish
    # What each held call is, for the report: live session, file, call, and its ready file if any.
    held: list[dict[str, Any]] = field(default_factory=list)
    side_calls: list[int] = field(default_factory=list)  # per side route: calls it was asked so far
    # (file, call) -> how pacing served that call when it could not pace it as asked (mockllm.pacing).
    pacing: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    _bound: dict[int, Binding] = field(default_factory=dict)
    _conversations: ConversationIndex = field(default_factory=ConversationIndex)

    def __post_init__(self) -> None:
        self.side_calls = [0] * len(self.scenario.side_routes)

    @property
    def cwd(self) -> str | None:
        """Replaces `{{cwd}}` in recorded strings; where ready files are written."""
        return self.settings.cwd

    def live_session(self, header_id: str | None, request: Request, dialect: Dialect) -> str:
        """The live id of the calling session: its header, else the session whose reply it continues,
        else its conversation."""
        if header_id is not None:
            return header_id
        if request.continues is not None:
            binding = self._continued(dialect.reply_of(request.continues))
            if binding is not None:
                return binding.live_id
        if self.headerless == "anonymous":
            return ANONYMOUS
        live_id, _ = self._conversations.route(request.messages)
        return live_id

    def _continued(self, reply: tuple[int, int] | None) -> Binding | None:
        """The session a request continuing reply (script, call) belongs to, if it is a step of its chain.

        It is when that reply is the latest one the session was served (the next step), or the one
        its latest chained request continued (a retry of that step). A request continuing an older
        reply branches off the chain, as a fork child continues its parent's earlier turn: it is
        routed by its conversation, like a fork that sends its history. So is a reply id this run
        never served (another run's, or not one of ours).
        """
        binding = self._bound.get(reply[0]) if reply is not None else None
        if binding is None or reply is None:
            return None
        call = reply[1]
        if call == binding.cursor - 1 or call == binding.continued:
            binding.continued = call
            return binding
        return None

    def take(self, live_id: str) -> Turn:
        """Bind if new, then hand out the session's next entry and advance its cursor."""
        binding = self.bindings.get(live_id) or self._bind(live_id)
        session = self.scenario.sessions[binding.script]
        if binding.cursor >= len(session.entries):
            call = binding.cursor
            binding.cursor += 1  # later calls are counted too, so the report shows how far over it went
            raise self.fail(ReplayFailure(
                410, "script_exhausted",
                f"run {self.id}: session {session.file} (recorded id {session.id}, live id {live_id}) made call "
                f"{call + 1} but its script has {len(session.entries)} entries; the agent made more model calls "
                "than were recorded: re-record the scenario, or append an entry in replay.override.json",
                live_id, call,
            ))
        turn = Turn(binding.script, binding.cursor, session, live_id)
        binding.cursor += 1
        return turn

    def _bind(self, live_id: str) -> Binding:
        sessions = self.scenario.sessions
        chosen = next((i for i, s in enumerate(sessions) if s.id == live_id and i not in self._bound), None)
        if chosen is None:
            # Sessions recorded with no model calls never call, so they take no place in first-call order.
            chosen = next((i for i, s in enumerate(sessions) if i not in self._bound and s.entries), None)
        if chosen is None:
            bound = ", ".join(f"{sessions[b.script].file}<-{b.live_id}" for b in self._bound.values()) or "none"
            raise self.fail(ReplayFailure(
                404, "unrecorded_session",
                f"run {self.id}: live session {live_id} is new, but every recorded session with model calls "
                f"is already bound ({bound}); the agent started a session that was not recorded: re-record "
                "the scenario, or send the recorded id in the x-mockllm-session header",
                live_id, 0,
            ))
        binding = self.bindings[live_id] = self._bound[chosen] = Binding(chosen, live_id)
        return binding

    def take_side(self, route: int) -> int:
        """The entry a side route serves next (its own cursor; `repeat` serves the last one again)."""
        side = self.scenario.side_routes[route]
        call = self.side_calls[route]
        self.side_calls[route] += 1
        if call < len(side.entries):
            return call
        if side.repeat and side.entries:
            return len(side.entries) - 1
        raise self.fail(ReplayFailure(
            410, "script_exhausted",
            f"run {self.id}: side route {side.model!r} ({side.file}) got call {call + 1} but its script has "
            f"{len(side.entries)} entries; add entries to {side.file}, or set \"repeat\": true in mockllm.json "
            "to serve its last entry again",
            None, call,
        ))

    def script_file(self, live_id: str) -> str | None:
        """The recorded session file `live_id` is bound to, if it is bound."""
        binding = self.bindings.get(live_id)
        return self.scenario.sessions[binding.script].file if binding is not None else None

    def fail(self, failure: ReplayFailure) -> ReplayFailure:
        """Record a failure in the run's report, and return it (to raise or answer with)."""
        self.failures.add(failure)
        return failure

    @property
    def consumed(self) -> bool:
        """Every script with entries was bound and drained, and every side route served in full."""
        return all(
            (b := self._bound.get(i)) is not None and b.cursor >= len(s.entries)
            for i, s in enumerate(self.scenario.sessions)
            if s.entries
        ) and all(calls >= len(r.entries) for calls, r in zip(self.side_calls, self.scenario.side_routes, strict=True))

    def settings_report(self) -> dict[str, Any]:
        settings = self.settings
        return {"pace": settings.pace, "speed": settings.speed, "strict": settings.strict,
                "ignore_input": list(settings.ignore_input), "bind": settings.bind}

    def side_routes_report(self) -> list[dict[str, Any]]:
        out = []
        for calls, route in zip(self.side_calls, self.scenario.side_routes, strict=True):
            served = min(calls, len(route.entries))
            out.append({"model": route.model, "file": route.file, "repeat": route.repeat, "calls": calls,
                        "served": served, "entries": len(route.entries), "remaining": len(route.entries) - served})
        return out

    def sessions_report(self) -> list[dict[str, Any]]:
        out = []
        for i, session in enumerate(self.scenario.sessions):
            binding = self._bound.get(i)
            served = min(binding.cursor, len(session.entries)) if binding else 0
            out.append({
                "id": session.id, "file": session.file, "kind": session.kind,
                "live_id": binding.live_id if binding else None,
                "served": served, "entries": len(session.entries), "remaining": len(session.entries) - served,
            })
        return out

    def report(self) -> dict[str, Any]:
        """The final report DELETE answers with."""
        return {
            "run": self.id, "scenario": self.scenario.name, "consumed": self.consumed,
            "failures": [f.as_dict() for f in self.failures.first],
            # Past the first FAILURES_KEPT, failures are only counted, per code.
            "failures_more": dict(self.failures.more), "sessions": self.sessions_report(),
            "side_routes": self.side_routes_report(), "held": list(self.held),
            "pacing": list(self.pacing.values()),
        }

    def state(self) -> dict[str, Any]:
        """The live state GET answers with."""
        return {
            **self.report(),
            "cwd": self.cwd, "settings": self.settings_report(), "holding": self.holding,
            "bindings": {live: self.scenario.sessions[b.script].id for live, b in self.bindings.items()},
            "cursors": {live: b.cursor for live, b in self.bindings.items()},
            "journal": [r.as_dict() for r in self.journal],
            "journal_dropped": self.journal.dropped,
        }


class Runs:
    """Every run of a server: the default run per scenario, and runs created by clients."""

    def __init__(self, scenarios: dict[str, Scenario], options: ServeOptions) -> None:
        self._scenarios = scenarios
        self._options = options
        self._settings = RunSettings.of(options)
        self._runs: dict[str, Run] = {}
        self._defaults: dict[str, str] = {}
        self._ids = itertools.count(1)

    def create(self, scenario: str, overrides: Mapping[str, Any] | None = None) -> Run:
        """A new run of `scenario`, with the server's settings and a run's JSON `overrides` over them
        (`POST /_mockllm/runs` fields; a bad one is a ValueError naming it)."""
        options = self._options
        settings = self._settings.with_json(overrides) if overrides else self._settings
        run = Run(f"run-{next(self._ids)}", self._scenarios[scenario], settings, options.headerless,
                  journal=Journal(options.journal_limit))
        self._runs[run.id] = run
        return run

    def default(self, scenario: str) -> Run:
        """The run behind /scenarios/{name}/v1, created on first use."""
        run_id = self._defaults.get(scenario)
        if run_id is None or run_id not in self._runs:
            run = self.create(scenario)
            self._defaults[scenario] = run.id
            return run
        return self._runs[run_id]

    def default_id(self, scenario: str) -> str | None:
        """The id of the scenario's default run, once it has been used."""
        run_id = self._defaults.get(scenario)
        return run_id if run_id in self._runs else None

    def get(self, run_id: str) -> Run | None:
        return self._runs.get(run_id)

    def end(self, run_id: str) -> Run | None:
        """Remove a run; a default run is replaced by a fresh one on next use."""
        return self._runs.pop(run_id, None)

    def __len__(self) -> int:
        return len(self._runs)
