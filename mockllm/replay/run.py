"""A run: one independent replay of one scenario, which answers each model call (no HTTP).

`Run.answer` takes what the server decoded of a request (its session header, the neutral
request, the dialect) and decides everything about the call: side route or session, binding,
the cursor, the journal record, failures, strict divergence, the comparison queued for later,
the reply, its pacing schedule and whether it holds, and the faults asked for. It returns an
`Outcome` for the server to write. A session's cursor advances when its request arrives, so a
session's call order (not stream timing) fixes which entry it gets.

Record modes: a run that records from scratch (`recording`) answers every call `Live`; under
`new_episodes` a call the recording cannot serve is `Live`, and so is its session's next (`episodes`),
as is a side route's call past its script's end.

Retries stay in step: a request that repeats a call whose answer did not reach the client whole
(a status or cut fault answered it, or the client left mid-stream), in the same session, gets
that call's entry again and moves no cursor. After a fault the cursor never moved, so the next
attempt gets the entry anyway; after a client left mid-stream the request must carry the SDKs'
retry marker (`x-stainless-retry-count` >= 1) or a body equal to that call's. A recorded `throw`
reached the client whole: the retry after it takes the next entry, as it did when recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from mockllm.errors import ReplayFailure, TemplateError
from mockllm.mcp.replay import McpRun
from mockllm.numbering import call_name
from mockllm.options import Headerless, RunSettings
from mockllm.replay import advice
from mockllm.replay.binding import Binding, Bindings
from mockllm.replay.catalog import Catalog
from mockllm.replay.conversations import ConversationIndex
from mockllm.replay.divergence import Divergence, diverged
from mockllm.replay.episodes import LiveSessions
from mockllm.replay.faults import FaultError, FaultPlan
from mockllm.replay.journal import CallRecord, Failures, Journal, RawHeaders
from mockllm.replay.normalize import masked
from mockllm.replay.outcome import Assignment, HeldInfo, Hold, Live, Outcome, Refusal, Stream, Whole
from mockllm.replay.pacing import plan_pacing, untimed_reason
from mockllm.replay.report import FaultServed, Notice, PacingNote, WentLive
from mockllm.replay.retries import digest, fault_headers, retry_count
from mockllm.replay.review import schedule_review
from mockllm.replay.routing import calling_session
from mockllm.scenario.load import Scenario
from mockllm.script.entries import HangEntry
from mockllm.wire.dialect import Dialect
from mockllm.wire.request import Request

log = logging.getLogger("mockllm")

ANONYMOUS = "anonymous"


@dataclass(slots=True)
class Run:
    id: str
    scenario: Scenario
    settings: RunSettings = field(default_factory=RunSettings)
    headerless: Headerless = "conversation"
    created: float = field(default_factory=time.time)
    failures: Failures = field(default_factory=Failures)
    journal: Journal = field(default_factory=Journal)
    catalog: Catalog | None = None  # the scenario's rendered replies, shared by its runs (made if not given)
    holding: int = 0  # streams currently held open by a hang or an aborted finish
    held: list[HeldInfo] = field(default_factory=list)  # what each held call is, for the report
    side_calls: list[int] = field(default_factory=list)  # per side route: calls it was asked so far
    default: bool = False  # a scenario's default run (/scenarios/{name}/v1): its errors say how to reset it
    origin: str = ""  # the server's address, for the commands its errors advise ("" until it listens)
    divergences: dict[int, Divergence] = field(default_factory=dict)  # the first per script
    diverged_calls: int = 0
    # Embeddings requests no recording answers (kind "embedding"): each is a divergence of its own.
    embedding_misses: list[Divergence] = field(default_factory=list)
    # (file, call) -> how pacing served that call when it could not pace it as asked.
    pacing: dict[tuple[str, int], PacingNote] = field(default_factory=dict)
    faults_served: list[FaultServed] = field(default_factory=list)  # each fault as it was served
    # What is worth knowing but fails nothing: bound by arrival, framework-made ids matched by position.
    notices: list[Notice] = field(default_factory=list)
    recording: bool = False  # records from scratch: every call goes to the upstream (once, rewrite)
    episodes: bool = False  # new_episodes: what the recording cannot serve goes to the upstream
    went_live: LiveSessions = field(init=False)
    # (notice kind, script, call) already noted; call -1 for a notice made once per session.
    _noted: set[tuple[str, int, int]] = field(default_factory=set)
    _bindings: Bindings = field(init=False)
    _faults: FaultPlan = field(init=False)
    _pending: list[tuple[Assignment, Request, CallRecord]] = field(default_factory=list)  # answered, not compared
    _review_soon: asyncio.Handle | None = None  # `_pending`'s review, unless something drains it first
    _conversations: ConversationIndex = field(default_factory=ConversationIndex)
    mcp: McpRun = field(init=False)  # the scenario's recorded MCP servers, as this run replays them

    def __post_init__(self) -> None:
        masks = self.settings.masks
        self.mcp = McpRun(self.scenario.mcp, (lambda text: masked(text, masks)) if masks else None)
        self.side_calls = [0] * len(self.scenario.side_routes)
        self._bindings = Bindings(self.scenario)
        self.went_live = LiveSessions(self.scenario, self._bindings)
        self._faults = FaultPlan(self.settings.faults, [(s.id, s.file) for s in self.scenario.sessions])
        if self.catalog is None:
            self.catalog = Catalog(self.scenario)

    def check_faults(self) -> None:
        """Refuse faults that name no recorded session of this scenario (a FaultError naming them)."""
        unmatched = self._faults.unmatched()
        if unmatched:
            sessions = ", ".join(f"{s.id} ({s.file})" for s in self.scenario.sessions)
            raise FaultError(f"fault session {unmatched[0].session!r} is no recorded session of scenario "
                             f"{self.scenario.name}; its sessions: {sessions}")

    @property
    def cwd(self) -> str | None:
        """Replaces `{{cwd}}` in recorded strings; where ready files are written."""
        return self.settings.cwd

    @property
    def bindings(self) -> dict[str, Binding]:
        """Live id -> binding."""
        return self._bindings.by_live_id

    # -- answering a call ------------------------------------------------------------------------

    def answer(self, header_id: str | None, request: Request, dialect: Dialect, raw_headers: RawHeaders,
               body: bytes) -> Outcome:
        """What this call gets. `header_id` is the session header's value, if the request sent one."""
        if self.recording:  # the recording routes it (as `mockllm record` does): no replay state to keep
            record = self.journal.record(dialect.name, header_id or "live", request.stream, raw_headers, body)
            record.kind = "live"
            return Live(record)
        # A side route's model (a title model, warm-ups) never reaches session routing.
        side = self.scenario.side_models.get(request.model) if request.model is not None else None
        live_id = self.live_session(header_id, request, dialect) if side is None else f"side route {request.model}"
        record = self.journal.record(dialect.name, live_id, request.stream, raw_headers, body)
        assert self.catalog is not None
        assigned: Assignment | None = None
        try:
            if side is None:
                taken = self.take(live_id, request, raw_headers, body)
                if isinstance(taken, WentLive):
                    named = live_id != ANONYMOUS and not self._conversations.owns(live_id)
                    return self.went_live.outcome(record, taken, named)
                assigned = taken
                if assigned.divergence is not None:
                    record.diverged = assigned.divergence.what
                # Not needed to answer: compared once the answer is written, off the client's wait.
                if not self.checks_first and self._review_later(assigned, request, record):
                    self._review_soon = schedule_review(self)
                script, index, file = assigned.script, assigned.call, assigned.session.file
            else:
                side_index = self.take_side(side)
                if side_index is None:  # new_episodes: past its script's end, a side route's calls go upstream
                    return self.went_live.side_route(record, self.scenario.side_routes[side], self.side_calls[side] - 1)
                script, index, file = self.catalog.side_script(side), side_index, self.scenario.side_routes[side].file
        except ReplayFailure as failure:
            # Past the end, the call number is the one asked for; an unrecorded session has no file.
            record.status, record.error, record.call = failure.status, failure.code, failure.call
            if failure.code == "request_diverged":
                record.diverged = failure.message
            record.script = self.script_file(live_id) if side is None else self.scenario.side_routes[side].file
            return Refusal(record, failure.status, failure.code, failure.message)
        entry = self.catalog.entry(script, index)
        record.script, record.call, record.kind = file, index, type(entry).__name__
        fault = assigned.fault if assigned is not None else None
        if assigned is not None and assigned.retry:
            record.retry = True
        if fault is not None:
            record.fault = fault.describe()
            self.faults_served.append(FaultServed(live_id, file, index, record.fault))
            if fault.status is not None:
                record.status = fault.status
                return Whole(record, fault.status, dialect.error_body(
                    f"mockllm fault: {record.fault} at {file} {call_name(index)}", None, fault.status),
                    fault_headers(fault), (fault.delay_ms or 0) / 1000)
        try:
            reply = self.catalog.reply(dialect, script, index, request, self.cwd)
        except TemplateError as exc:
            unmatched = self.fail(ReplayFailure(
                422, "from_request_unmatched", f"run {self.id}: {file} {call_name(index)}: {exc}", live_id, index))
            record.status, record.error = 422, unmatched.code
            return Refusal(record, 422, unmatched.code, unmatched.message)
        record.status = reply.status
        if dialect.whole_calls and side is None:
            self._note_cut_calls(script, index, live_id)
        delay = (fault.delay_ms or 0) / 1000 if fault is not None else 0.0
        if reply.status != 200:
            # A replayed provider error: exactly as the provider sent it, so an SDK may retry as it did.
            return Whole(record, reply.status, reply.body, delay=delay)
        held: HeldInfo = {"session": live_id, "script": file, "call": index}
        cut_after = fault.cut_after if fault is not None else None
        if not request.stream and cut_after is not None:  # a whole answer cut: the connection drops at once
            return Stream(record, reply, False, None, cut_after=0, delay=delay, body=body)
        if not request.stream:
            if reply.hold_when_not_streaming:
                return Hold(record, held)
            record.status = reply.body_status
            return Whole(record, reply.body_status, reply.body, delay=delay)
        schedule = None
        if self.settings.pace != "burst":
            schedule, note = plan_pacing(self.settings, reply, request.include_usage,
                                         self.catalog.timing(script, index),
                                         lambda: untimed_reason(self.scenario, script, index))
            if note is not None:
                self._note_pacing(file, index, *note)
        if reply.ending != "hold" or cut_after is not None:
            return Stream(record, reply, request.include_usage, schedule, cut_after=cut_after, delay=delay,
                          body=body)
        ready_file = entry.readyFile if isinstance(entry, HangEntry) else None
        return Stream(record, reply, request.include_usage, schedule, held, ready_file, self.cwd, delay=delay)

    def live_session(self, header_id: str | None, request: Request, dialect: Dialect) -> str:
        """The live id of the calling session, by the rule record mode uses too (`routing.py`): its
        header, else the session whose reply it continues, else its conversation."""

        def continued(reply_id: str) -> str | None:
            assert self.catalog is not None
            binding = self._bindings.continued(self.catalog.reply_of(dialect, reply_id))
            return binding.live_id if binding is not None else None

        return calling_session(header_id, request, continued, self._by_conversation)

    def _by_conversation(self, request: Request) -> str:
        if self.headerless == "anonymous":
            return ANONYMOUS
        live_id, _ = self._conversations.route(request.messages)
        return live_id

    @property
    def checks_first(self) -> bool:
        """Whether a request must be compared before it is answered: under strict (a diverged call is
        refused). Otherwise the comparison only reports, and `review_pending` runs it once the answer
        is on its way, off the client's wait (content binding compares a session's first request
        with the scripts' first inputs when it binds, which is all it needs). Under new_episodes too:
        a diverged call goes to the upstream instead."""
        return self.settings.strict or self.episodes

    def take(self, live_id: str, request: Request | None = None, raw_headers: RawHeaders = (),
             body: bytes | None = None) -> Assignment | WentLive:
        """Bind if new, compare the request with the recording (when `checks_first`; else `answer`
        queues it for later), then hand out the session's next entry and advance its cursor.

        A divergence is noted (the first per session goes into the report); under `strict` the
        request is refused with 409 `request_diverged` and changes nothing: no binding, no cursor.
        A retry of a call the client did not get whole gets that call's entry again; a status or
        cut fault keeps the cursor where it was. Under new_episodes a call the recording cannot
        serve returns WentLive instead of failing.
        """
        went = self.went_live.get(live_id)
        if went is not None:  # the session left the recording: the upstream answers it from now on
            return went
        binding = self._bindings.get(live_id)
        if binding is not None and binding.incomplete is not None:
            call, left = binding.incomplete
            binding.incomplete = None
            if retry_count(raw_headers) >= 1 or (body is not None and digest(body) == left):
                binding.retries += 1
                session = self.scenario.sessions[binding.script]
                return Assignment(binding.script, call, session, live_id, retry=True)
        if binding is None:
            script, noted = self._bindings.choose(live_id, request, self.settings)  # noted once it binds
            if script is None:
                why = advice.unrecorded(self.id, self.scenario, self._bindings, live_id, request, self._conversations,
                                        self.default and self.consumed,
                                        {b.live_id: self.scenario.sessions[b.script].file for b in self._bindings},
                                        self.origin)
                if self.episodes:
                    return self.went_live.go(live_id, None, 0, "unrecorded_session", why)
                raise self.fail(ReplayFailure(404, "unrecorded_session", why, live_id, 0))
            cursor = 0
        else:
            script, cursor, noted = binding.script, binding.cursor, None
        session = self.scenario.sessions[script]
        if cursor >= len(session.entries):
            message = advice.exhausted(self.id, self.scenario, session, live_id, cursor, self.default,
                                       self.origin)
            if self.episodes:
                return self.went_live.go(live_id, script, cursor, "script_exhausted", message)
            binding = binding or self._bindings.bind(script, live_id)
            binding.cursor += 1  # later calls are counted too, so the report shows how far over it went
            raise self.fail(ReplayFailure(410, "script_exhausted", message, live_id, cursor))
        divergence = None
        if request is not None and self.checks_first:
            divergence = self._diverged(script, cursor, live_id, request)
        if divergence is not None and self.episodes:  # not a failure: the call is what new_episodes records
            return self.went_live.go(live_id, script, cursor, "request_diverged", divergence.message(self.id))
        if divergence is not None:
            self._note(script, divergence)
            if self.settings.strict:
                raise self.fail(ReplayFailure(
                    409, "request_diverged", divergence.message(self.id) + "; under strict the call is refused and "
                    "the session's cursor stays where it was (UUIDs, dates, durations and temp folders are masked "
                    "already; mask other volatile spans with --ignore-input REGEX)",
                    live_id, cursor))
        if binding is None:
            binding = self._bindings.bind(script, live_id)
            if noted is not None:  # how it was bound: said once, when it is (a refused first call binds nothing)
                self.notices.append(Notice(noted[0], self.scenario.sessions[script].file, live_id, 0, noted[1]))
        attempt, fault = self._faults.attempt(script, cursor)
        if attempt:
            binding.retries += 1  # the call before it met a status or cut fault: this repeats it
        if fault is None or fault.consumes:
            binding.cursor += 1
        return Assignment(script, cursor, session, live_id, divergence, fault, attempt > 0)

    def left_early(self, outcome: Stream) -> None:
        """The client left before `outcome`'s stream ended: a retry of that call gets its entry again."""
        record = outcome.record
        binding = self._bindings.get(record.session)
        if binding is not None and record.call is not None and outcome.cut_after is None:
            binding.incomplete = (record.call, digest(outcome.body))

    def take_side(self, route: int) -> int | None:
        """The entry a side route serves next (its own cursor; `repeat` serves the last one again); None
        past its end under new_episodes (the call goes upstream)."""
        side = self.scenario.side_routes[route]
        call = self.side_calls[route]
        self.side_calls[route] += 1
        if call < len(side.entries):
            return call
        if side.repeat and side.entries:
            return len(side.entries) - 1
        if self.episodes:
            return None
        raise self.fail(ReplayFailure(410, "script_exhausted", advice.side_exhausted(self.id, side, call), None, call))

    @contextlib.contextmanager
    def holding_call(self, held: HeldInfo) -> Iterator[None]:
        """While a call is held open, the run's state and report list it."""
        self.holding += 1
        self.held.append(held)
        try:
            yield
        finally:
            self.held.remove(held)
            self.holding -= 1

    # -- comparing requests with the recording -----------------------------------------------------

    def _review_later(self, assigned: Assignment, request: Request, record: CallRecord) -> bool:
        """Queue an answered request for comparison with the recording; True when the queue was
        empty (a review is then scheduled). Reports drain the queue first, so what they show never
        depends on when it ran."""
        self._pending.append((assigned, request, record))
        return len(self._pending) == 1

    def review_pending(self) -> None:
        """Compare every queued request with the recording of its call, and note how each differs."""
        if self._review_soon is not None:  # drained now: nothing left for it
            self._review_soon.cancel()
            self._review_soon = None
        pending, self._pending = self._pending, []
        for assigned, request, record in pending:
            divergence = self._diverged(assigned.script, assigned.call, assigned.live_id, request)
            if divergence is not None:
                self._note(assigned.script, divergence)
                record.diverged = divergence.what

    def embedding_missed(self, api: str, model: str, got: str, nearest: str, file: str) -> Divergence:
        """An embeddings request the recording has no answer for: noted as a divergence (the report
        lists it, and it fails the run unless its divergence policy is "warn")."""
        miss = Divergence("embedding", file, api, len(self.embedding_misses),
                          f"an {api} request (model {model}) with no recorded answer", nearest, got, "")
        self.embedding_misses.append(miss)
        return miss

    def _note(self, script: int, divergence: Divergence) -> None:
        self.divergences.setdefault(script, divergence)
        self.diverged_calls += 1

    def _diverged(self, script: int, call: int, live_id: str, request: Request) -> Divergence | None:
        """How this request differs from what was recorded before call `call` of `script`, if it does.

        Described in full only when it will be reported (the session's first, or a refusal under
        strict): otherwise expected, got and diff stay empty."""
        describe = script not in self.divergences or self.settings.strict
        assert self.catalog is not None
        divergence, framework, reminders = diverged(self.scenario, self.settings, script, call, live_id, request,
                                                    describe, self.catalog.tools_called)
        if framework and ("framework_ids", script, -1) not in self._noted:
            self._noted.add(("framework_ids", script, -1))
            self.notices.append(Notice(
                "framework_ids", self.scenario.sessions[script].file, live_id, call,
                "tool results for calls the recorded model never made (a framework's own) were matched by "
                "position among themselves, their ids ignored"))
        if reminders and ("reminder_ignored", script, -1) not in self._noted:
            self._noted.add(("reminder_ignored", script, -1))
            self.notices.append(Notice(
                "reminder_ignored", self.scenario.sessions[script].file, live_id, call,
                "a tool result agreed with the recording only without its <system-reminder> block(s), a note the "
                "agent's harness adds when it decides to; left out of the comparison (--strict compares them "
                "too)"))
        return divergence

    def _note_cut_calls(self, script: int, call: int, live_id: str) -> None:
        """Note once per run and call a recorded tool call cut mid-arguments, sent with `{}` by a wire
        that carries arguments as an object (`whole_calls`)."""
        assert self.catalog is not None
        cut = self.catalog.cut_calls(script, call)
        if cut and ("cut_tool_call", script, call) not in self._noted:
            self._noted.add(("cut_tool_call", script, call))
            self.notices.append(Notice(
                "cut_tool_call", self.scenario.sessions[script].file, live_id, call,
                f"tool call(s) {', '.join(cut)} recorded cut mid-arguments (not a JSON object; max tokens, most "
                "often): sent with empty arguments {}, the only form this dialect's clients accept"))

    def _note_pacing(self, file: str, call: int, served: str, why: str) -> None:
        """Say once per run and call how pacing served it; the log says it once per run and file."""
        key = (file, call)
        if key in self.pacing:
            return
        if not any(f == file for f, _ in self.pacing):
            log.warning("run %s: %s %s: %s", self.id, file, call_name(call), why)
        self.pacing[key] = PacingNote(file, call, served, why)

    def fail(self, failure: ReplayFailure) -> ReplayFailure:
        """Record a failure in the run's report, and return it (to raise or answer with)."""
        self.failures.add(failure)
        return failure

    # -- what reports read -----------------------------------------------------------------------

    def script_file(self, live_id: str) -> str | None:
        """The recorded session file `live_id` is bound to, if it is bound."""
        return self._bindings.file_of(live_id)

    def bound(self, script: int) -> Binding | None:
        """The binding of script `script`, once a live session is bound to it."""
        return self._bindings.of_script(script)

    @property
    def consumed(self) -> bool:
        """Every script with entries was bound and drained, and every side route served in full."""
        return self._bindings.drained and all(
            calls >= len(r.entries) for calls, r in zip(self.side_calls, self.scenario.side_routes, strict=True))

