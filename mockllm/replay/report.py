"""A run's report: what `DELETE /_mockllm/runs/{run}` answers, what `GET` answers while the run
is live, and the words a failing test shows for it.

One set of Structs for both sides: `reporting.build_report` and `build_state` make them from a `Run`
and the server encodes them as they are; the Python API decodes the server's answer into the same Structs
(`RunReport.from_json`), so the two sides cannot drift apart. Field order is the JSON's key order.
`describe()` turns a report into the message a test fails with, so the API's `assert_consumed()`
and the pytest plugin say the same.
"""

from __future__ import annotations

from typing import Any

import msgspec

from mockllm.errors import MockllmError
from mockllm.mcp.replay import McpCall
from mockllm.numbering import call_name, calls_name


class Failure(msgspec.Struct, frozen=True):
    """A request the server could not answer from the script (`call` is 0-based)."""

    code: str
    message: str
    session: str | None = None
    call: int | None = None


class SessionReport(msgspec.Struct, frozen=True):
    """One recorded session of the run: its file, who it is bound to, calls served and remaining."""

    id: str
    file: str
    kind: str = ""
    live_id: str | None = None
    served: int = 0
    entries: int = 0
    remaining: int = 0
    retries: int = 0  # requests that repeated a call whose answer did not reach the client whole


class SideRouteReport(msgspec.Struct, frozen=True):
    """A side route of the run (a title model): calls asked, served from its own script, and remaining."""

    model: str
    file: str
    repeat: bool = False
    calls: int = 0  # past the script's end too: a repeating route keeps serving its last entry
    served: int = 0
    entries: int = 0
    remaining: int = 0


class DivergenceReport(msgspec.Struct, frozen=True):
    """The first place a session's requests differed from the recording (`call` is 0-based)."""

    kind: str
    session: str  # the recorded session file
    live_id: str
    call: int
    what: str
    expected: str
    got: str
    diff: str = ""


class HeldCall(msgspec.Struct, frozen=True):
    """A call held open now (a hang, an aborted finish) until its client goes away."""

    session: str  # the live session id
    script: str  # the recorded session file
    call: int
    # Only a hang that names a readyFile has these: the JSON has no key for the others.
    ready_file: str | msgspec.UnsetType = msgspec.UNSET
    ready_file_written: bool | msgspec.UnsetType = msgspec.UNSET


class FaultServed(msgspec.Struct, frozen=True):
    """A fault the run served, as asked (mockllm.replay.faults): where, and what it did."""

    session: str  # the live session id
    file: str
    call: int
    fault: str  # "status 429 retry-after 1s", "cut after 3 events", "delay 200 ms"


class Notice(msgspec.Struct, frozen=True):
    """Worth knowing, and fails nothing: twins told apart by recorded order only (`bound_by_arrival`),
    a session bound to the closest recording for want of a match in every part (`bound_to_closest`),
    framework-made tool-call ids matched by position (`framework_ids`), a tool result that agreed
    only without a `<system-reminder>` block (`reminder_ignored`), a recorded tool call cut
    mid-arguments rendered with empty arguments (`cut_tool_call`). `call` is 0-based."""

    kind: str
    session: str  # the recorded session file
    live_id: str
    call: int
    message: str


class WentLive(msgspec.Struct, frozen=True):
    """Under new_episodes, a session that left the recording: from `call` (0-based) on, its calls went
    to the upstream; `code` says why (request_diverged, script_exhausted, unrecorded_session)."""

    session: str | None  # the recorded session file; None for a session the recording does not have
    live_id: str
    call: int
    code: str
    why: str


class RecordingReport(msgspec.Struct, frozen=True):
    """What a run in a record mode recorded when it ended: where, or why nothing was written."""

    mode: str
    written: bool
    scenario: str
    folder: str
    message: str
    live_calls: int = 0


class PacingNote(msgspec.Struct, frozen=True):
    """How pacing served a call it could not pace as asked (mockllm.replay.pacing)."""

    file: str
    call: int
    served: str
    note: str


class RunReport(msgspec.Struct, frozen=True):
    """The run's report. Everything but `run`, `scenario` and `consumed` has a default, so a report
    decodes from a partial answer as well."""

    run: str
    scenario: str
    consumed: bool
    failures: list[Failure] = []
    # Past the first FAILURES_KEPT (mockllm.replay.journal), failures are only counted, per code.
    failures_more: dict[str, int] = {}
    sessions: list[SessionReport] = []
    divergences: list[DivergenceReport] = []
    diverged_calls: int = 0
    side_routes: list[SideRouteReport] = []
    held: list[HeldCall] = []
    pacing: list[PacingNote] = []
    faults: list[FaultServed] = []
    notices: list[Notice] = []
    # Whether a divergence is a problem of the run ("fail", the default) or only reported ("warn").
    divergence: str = "fail"
    went_live: list[WentLive] = []  # new_episodes: the sessions that left the recording, and why
    recording: RecordingReport | None = None  # a record mode's recording, once the run has ended
    mcp: list[McpCall] = []  # every call to a recorded MCP server, in order (a miss says why)
    # The server's whole answer, as the Python API received it: while a run is live it also holds
    # bindings, cursors and the journal. Unset (never encoded) in a report the server builds.
    state: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> RunReport:
        """A report from the server's decoded answer (`GET` or `DELETE /_mockllm/runs/{run}`)."""
        return msgspec.convert({**body, "state": body}, cls)

    @property
    def unconsumed(self) -> list[SessionReport]:
        """Sessions with recorded calls left."""
        return [s for s in self.sessions if s.remaining > 0]

    def problems(self, *, require_consumed: bool = True) -> list[str]:
        """What is wrong with the run, one line each; empty when it went as recorded. A diverged call
        is one (unless the run's divergence policy is "warn"), with its diff."""
        out = [_failure_line(f, self._file_of(f.session)) for f in self.failures]
        if self.divergence == "fail":
            refused = {(f.session, f.call) for f in self.failures if f.code == "request_diverged"}
            out += [f"diverged: {_divergence_line(d)}" for d in self.divergences
                    if (d.live_id, d.call) not in refused]
        if require_consumed:
            out += [_unconsumed_line(s) for s in self.unconsumed]
            out += [f"unconsumed: side route {r.model!r} ({r.file}) served {r.served} of {r.entries}"
                    for r in self.side_routes if r.remaining > 0]
        return out

    def describe(self, *, require_consumed: bool = True) -> str:
        """The whole report for a person: what went wrong first, then every session's calls."""
        problems = self.problems(require_consumed=require_consumed)
        head = f"mockllm run {self.run} of scenario {self.scenario!r}: "
        head += f"{len(problems)} problem(s)" if problems else "replayed as recorded"
        if self.divergences and self.divergence == "fail":  # under "warn" they are listed below, and fail nothing
            first = self.divergences[0]
            head += (f"; {self.diverged_calls} call(s) differed from the recording, first {first.session} "
                     f"{call_name(first.call)} at {first.what}")
        lines = [head, *("  " + p for p in problems)]
        if self.divergences:  # why it went wrong, most often: where the agent's requests changed
            lines.append("  where requests first differed from the recording"
                         + (" (divergence: warn, so this fails nothing):" if self.divergence == "warn" else ":"))
            lines += [f"    {_divergence_line(d)}" for d in self.divergences]
        if self.faults:
            lines.append(f"  faults served as asked: {len(self.faults)}")
            lines += [f"    {f.file} {call_name(f.call)}: {f.fault}" for f in self.faults]
        if self.went_live:
            lines.append("  went live (new_episodes: the upstream answered these sessions from then on):")
            lines += [f"    {_went_live_line(w)}" for w in self.went_live]
        if self.recording is not None:
            lines.append(f"  recording ({self.recording.mode}): {self.recording.message}")
        if self.notices:  # worth knowing, fails nothing
            lines.append("  notes:")
            lines += [f"    {n.session} (live id {n.live_id}) {call_name(n.call)}: {n.message}" for n in self.notices]
        if self.mcp:
            lines.append(f"  MCP calls: {len(self.mcp)}")
            lines += [f"    {c.server}: {c.what}" + (f" (line {c.line})" if c.line else "")
                      + (f": {c.error}" if c.error else "") for c in self.mcp[:50]]
        lines.append("  sessions (calls served / recorded):")
        lines += [f"    {_session_line(s)}" for s in self.sessions]
        return "\n".join(lines)

    def _file_of(self, live_id: str | None) -> str | None:
        return next((s.file for s in self.sessions if live_id is not None and s.live_id == live_id), None)


class RunSettingsReport(msgspec.Struct, frozen=True):
    """The settings a run replays with (mockllm.options.RunSettings, as `POST /_mockllm/runs` takes them)."""

    pace: str
    speed: float
    strict: bool
    ignore_input: list[str]
    bind: str
    normalize: bool = True
    divergence: str = "fail"


class RunState(RunReport, frozen=True, kw_only=True):
    """The live state `GET /_mockllm/runs/{run}` answers: the report, then the run's settings,
    bindings (live id -> recorded session id), cursors and journal."""

    cwd: str | None
    settings: RunSettingsReport
    holding: int
    bindings: dict[str, str]
    cursors: dict[str, int]
    journal: list[dict[str, Any]]
    journal_dropped: int


class RunNotClean(MockllmError, AssertionError):
    """A run recorded failures or left recorded calls unconsumed; the message is the whole report.

    An AssertionError too, so a test framework reports it as a failed check, not a crash.
    """

    def __init__(self, report: RunReport, *, require_consumed: bool = True) -> None:
        self.report = report
        super().__init__(report.describe(require_consumed=require_consumed))


def check(report: RunReport, *, require_consumed: bool = True) -> None:
    """Raise RunNotClean when the run had failures or (with `require_consumed`) calls left."""
    if report.problems(require_consumed=require_consumed):
        raise RunNotClean(report, require_consumed=require_consumed)


# --- the words ----------------------------------------------------------------------------------


def _failure_line(failure: Failure, file: str | None) -> str:
    where = f"session {file} (live id {failure.session})" if file else f"live session {failure.session}"
    call = f", {call_name(failure.call)}" if failure.call is not None else ""
    return f"failure {failure.code} in {where}{call}: {failure.message}"


def _unconsumed_line(s: SessionReport) -> str:
    served = f"served {calls_name(0, s.served - 1)}" if s.served else "never called"
    return f"unconsumed: session {s.file} ({s.kind}, recorded id {s.id}) {served}; " \
           f"{calls_name(s.served, s.entries - 1)} of {s.entries} not requested"


def _divergence_line(d: DivergenceReport) -> str:
    diff = f" ({d.diff})" if d.diff else ""
    return f"session {d.session} (live id {d.live_id}) {call_name(d.call)}, {d.what}: expected {d.expected!r}, " \
           f"got {d.got!r}{diff}"


def _went_live_line(w: WentLive) -> str:
    where = f"session {w.session}" if w.session else "a session the recording does not have"
    return f"{where} (live id {w.live_id}) from {call_name(w.call)}: {w.code}: {w.why}"


def _session_line(s: SessionReport) -> str:
    bound = f"live id {s.live_id}" if s.live_id is not None else "never bound"
    return f"{s.file} ({s.kind}): {s.served}/{s.entries}, {bound}"
