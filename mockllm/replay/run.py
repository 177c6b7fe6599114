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

from mockllm.errors import ReplayFailure
from mockllm.options import Headerless, RunSettings, ServeOptions
from mockllm.replay.conversations import ConversationIndex
from mockllm.replay.divergence import (
    Divergence,
    compare_inputs,
    describe_mismatch,
    first_mismatch,
    input_name,
    live_inputs,
    tool_not_offered,
)
from mockllm.replay.journal import CallRecord, Failures, Journal
from mockllm.scenario.load import Scenario, SessionScript
from mockllm.wire.dialect import Dialect
from mockllm.wire.request import Message, Request

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
    divergence: Divergence | None = None


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
    default: bool = False  # a scenario's default run (/scenarios/{name}/v1): its errors say how to reset it
    divergences: dict[int, Divergence] = field(default_factory=dict)  # the first per script
    diverged_calls: int = 0
    # (file, call) -> how pacing served that call when it could not pace it as asked (mockllm.replay.pacing).
    pacing: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    _bound: dict[int, Binding] = field(default_factory=dict)
    _pending: list[tuple[Turn, Request, CallRecord]] = field(default_factory=list)  # answered, not yet compared
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

    @property
    def checks_first(self) -> bool:
        """Whether a request must be compared before it is answered: under strict (a diverged call is
        refused) or content binding (the comparison picks the script). Otherwise the comparison
        only reports, and `review_pending` runs it once the answer is on its way, off the client's wait."""
        return self.settings.strict or self.settings.bind == "content"

    def take(self, live_id: str, request: Request | None = None) -> Turn:
        """Bind if new, compare the request with the recording (when `checks_first`; else the caller
        queues it with `review_later`), then hand out the session's next entry and advance its cursor.

        A divergence is noted (the first per session goes into the report); under `strict` the
        request is refused with 409 `request_diverged` and changes nothing: no binding, no cursor.
        """
        binding = self.bindings.get(live_id)
        chosen: Divergence | None = None
        if binding is None:
            script, chosen = self._choose(live_id, request)
            cursor = 0
        else:
            script, cursor = binding.script, binding.cursor
        session = self.scenario.sessions[script]
        if cursor >= len(session.entries):
            binding = binding or self._bind(script, live_id)
            binding.cursor += 1  # later calls are counted too, so the report shows how far over it went
            raise self.fail(ReplayFailure(410, "script_exhausted", self._exhausted(session, live_id, cursor),
                                          live_id, cursor))
        divergence = chosen
        if divergence is None and request is not None and self.checks_first:
            divergence = self._diverged(script, cursor, live_id, request)
        if divergence is not None:
            self._note(script, divergence)
            if self.settings.strict:
                raise self.fail(ReplayFailure(
                    409, "request_diverged", divergence.message(self.id) + "; under strict the call is refused and "
                    "the session's cursor stays where it was (mask volatile spans with --ignore-input REGEX)",
                    live_id, cursor))
        binding = binding or self._bind(script, live_id)
        turn = Turn(script, cursor, session, live_id, divergence)
        binding.cursor += 1
        return turn

    def review_later(self, turn: Turn, request: Request, record: CallRecord) -> bool:
        """Queue an answered request for comparison with the recording; True when the queue was
        empty (the caller then schedules `review_pending`). Reports drain the queue first, so
        what they show never depends on when it ran."""
        self._pending.append((turn, request, record))
        return len(self._pending) == 1

    def review_pending(self) -> None:
        """Compare every queued request with the recording of its call, and note how each differs."""
        pending, self._pending = self._pending, []
        for turn, request, record in pending:
            divergence = self._diverged(turn.script, turn.call, turn.live_id, request)
            if divergence is not None:
                self._note(turn.script, divergence)
                record.diverged = divergence.what

    def _note(self, script: int, divergence: Divergence) -> None:
        self.divergences.setdefault(script, divergence)
        self.diverged_calls += 1

    def _exhausted(self, session: SessionScript, live_id: str, call: int) -> str:
        message = (f"run {self.id}: session {session.file} (recorded id {session.id}, live id {live_id}) made call "
                   f"{call + 1} but its script has {len(session.entries)} entries")
        if self.default:
            return message + (f". This is scenario {self.scenario.name}'s default run, and it is spent: start over "
                              f"with DELETE /_mockllm/runs/{self.id} (the next request gets a fresh default run), "
                              "or give each test its own run with POST /_mockllm/runs. If the agent now makes more "
                              "calls than were recorded, re-record the scenario")
        return message + ("; the agent made more model calls than were recorded: re-record the scenario, or "
                          "append an entry in replay.override.json")

    def _choose(self, live_id: str, request: Request | None) -> tuple[int, Divergence | None]:
        """The script a new live session binds to, and the divergence when content binding found no match."""
        sessions = self.scenario.sessions
        chosen = next((i for i, s in enumerate(sessions) if s.id == live_id and i not in self._bound), None)
        if chosen is not None:
            return chosen, None
        # Sessions recorded with no model calls never call, so they take no place in first-call order.
        first = next((i for i, s in enumerate(sessions) if i not in self._bound and s.entries), None)
        divergence = None
        if self.settings.bind == "content" and request is not None and first is not None:
            chosen, divergence = self._choose_by_content(live_id, request, first)
        if chosen is None:
            chosen = first
        if chosen is None:
            raise self.fail(ReplayFailure(404, "unrecorded_session", self._unrecorded(live_id, request), live_id, 0))
        return chosen, divergence

    def _choose_by_content(self, live_id: str, request: Request, first: int) -> tuple[int | None, Divergence | None]:
        """The first unbound script whose first recorded inputs match the request's (twins, with
        equal first inputs, thus bind among themselves in script order); else no script, and the
        divergence from `first`, the script first-call order binds instead."""
        sessions, settings = self.scenario.sessions, self.settings
        live = live_inputs(request.tail)
        for i in range(first, len(sessions)):
            recorded = sessions[i].inputs[0] if sessions[i].inputs else None
            if (i not in self._bound and sessions[i].entries and recorded
                    and first_mismatch(recorded.items, live, masks=settings.masks, cwd=settings.cwd) is None):
                return i, None
        first_recorded = sessions[first].inputs[0] if sessions[first].inputs else None
        first_inputs = first_recorded.items if first_recorded else ()
        what, expected, got, diff = compare_inputs(first_inputs, live, masks=settings.masks, cwd=settings.cwd) or (
            "its first request", "", "", "")
        return None, Divergence("binding", sessions[first].file, live_id, 0,
                                f"{what} (no unbound session's first recorded call matches it; bound in "
                                "first-call order)", expected, got, diff)

    def _unrecorded(self, live_id: str, request: Request | None) -> str:
        sessions = self.scenario.sessions
        bound = ", ".join(f"{sessions[b.script].file}<-{b.live_id}" for b in self._bound.values()) or "none"
        message = (f"run {self.id}: live session {live_id} is new, but every recorded session with model calls "
                   f"is already bound ({bound})")
        if request is None or not self._conversations.owns(live_id):
            return message + ("; the agent started a session that was not recorded: re-record the scenario, or "
                              "send the recorded id in the x-mockllm-session header")
        closest = self._conversations.closest(request.messages, exclude=live_id)
        if closest is None:
            return message + "; its messages extend no live conversation, and none has started yet"
        other, agreed, expected, got = closest
        where = self.script_file(other) or "unbound"
        return message + (
            f". Its messages extend no live conversation; the closest is {other} ({where}), whose latest request "
            f"agrees with it for {agreed} message(s) and then differs at message {agreed + 1}: there it had "
            f"{_gist(expected)}, this request has {_gist(got)}. The usual cause is a turn sent without the "
            "history before it (send the whole conversation every call); a subagent of its own needs its own "
            "x-mockllm-session header")

    def _diverged(self, script: int, call: int, live_id: str, request: Request) -> Divergence | None:
        """How this request differs from what was recorded before call `call` of `script`, if it does.

        Described in full only when it will be reported (the session's first, or a refusal under
        strict): otherwise expected, got and diff stay empty."""
        describe = script not in self.divergences or self.settings.strict
        session = self.scenario.sessions[script]
        inputs = session.inputs[call] if call < len(session.inputs) else None
        if inputs:  # a call recorded with no inputs of its own (a retry) is not compared
            recorded = inputs.items
            live = live_inputs(request.tail)
            cwd = self.settings.cwd
            number = first_mismatch(recorded, live, masks=self.settings.masks, cwd=cwd)
            if number is not None:
                found = (describe_mismatch(recorded, live, number, cwd) if describe
                         else (input_name(recorded, live, number), "", "", ""))
                return Divergence("input", session.file, live_id, call, *found)
        called = self.scenario.tools_called(script, call)
        if called:
            offered = request.offered_tools
            missing = tool_not_offered(called, offered)
            if missing is not None and offered is not None:
                return Divergence("tool", session.file, live_id, call, f"the tool {missing!r} the recorded call uses",
                                  missing, "offered: " + (", ".join(sorted(offered)) or "no tools"), "")
        return None

    def _bind(self, script: int, live_id: str) -> Binding:
        binding = self.bindings[live_id] = self._bound[script] = Binding(script, live_id)
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

    def bound(self, script: int) -> Binding | None:
        """The binding of script `script`, once a live session is bound to it."""
        return self._bound.get(script)


def _gist(message: Message | None, limit: int = 80) -> str:
    if message is None:
        return "no message"
    text = " ".join(message.text.split())
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    calls = f" calling {', '.join(c.name or '?' for c in message.tool_calls)}" if message.tool_calls else ""
    return f"{message.role or 'a'} message {text!r}{calls}"


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
            run.default = True
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
