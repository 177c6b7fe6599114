"""A run's report as the admin API answers it, and the words a failing test shows for it.

`GET /_mockllm/runs/{run}` and `DELETE /_mockllm/runs/{run}` (DESIGN.md §3) answer the same core:
whether every script was drained (`consumed`), the failures the server answered (404, 410, 422…),
and per recorded session how many calls were served and remain. `describe()` turns that into
the message a test fails with, so the API's `assert_consumed()` and the pytest plugin say the same.
"""

from __future__ import annotations

from typing import Any

import msgspec

from mockllm.errors import MockllmError


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


class SideRouteReport(msgspec.Struct, frozen=True):
    """A side route of the run (a title model): calls served from its own script and remaining."""

    model: str
    file: str
    served: int = 0
    entries: int = 0
    remaining: int = 0


class DivergenceReport(msgspec.Struct, frozen=True):
    """The first place a session's requests differed from the recording (`call` is 0-based)."""

    kind: str
    session: str
    live_id: str
    call: int
    what: str
    expected: str
    got: str
    diff: str = ""


class RunReport(msgspec.Struct, frozen=True):
    run: str
    scenario: str
    consumed: bool
    failures: list[Failure] = []
    sessions: list[SessionReport] = []
    side_routes: list[SideRouteReport] = []
    divergences: list[DivergenceReport] = []
    # The server's whole answer: while a run is live it also holds bindings, cursors and the journal.
    state: dict[str, Any] = {}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> RunReport:
        return msgspec.convert({**body, "state": body}, cls)

    @property
    def unconsumed(self) -> list[SessionReport]:
        """Sessions with recorded calls left."""
        return [s for s in self.sessions if s.remaining > 0]

    def problems(self, *, require_consumed: bool = True) -> list[str]:
        """What is wrong with the run, one line each; empty when it went as recorded."""
        out = [_failure_line(f, self._file_of(f.session)) for f in self.failures]
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
        lines = [head, *("  " + p for p in problems)]
        if self.divergences:  # why it went wrong, most often: where the agent's requests changed
            lines.append("  where requests first differed from the recording:")
            lines += [f"    {_divergence_line(d)}" for d in self.divergences]
        lines.append("  sessions (calls served / recorded):")
        lines += [f"    {_session_line(s)}" for s in self.sessions]
        return "\n".join(lines)

    def _file_of(self, live_id: str | None) -> str | None:
        return next((s.file for s in self.sessions if live_id is not None and s.live_id == live_id), None)


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


def _calls(first: int, last: int) -> str:
    return f"call {first}" if first == last else f"calls {first}-{last}"


def _failure_line(failure: Failure, file: str | None) -> str:
    where = f"session {file} (live id {failure.session})" if file else f"live session {failure.session}"
    call = f", call {failure.call + 1}" if failure.call is not None else ""
    return f"failure {failure.code} in {where}{call}: {failure.message}"


def _unconsumed_line(s: SessionReport) -> str:
    served = f"served {_calls(1, s.served)}" if s.served else "never called"
    return f"unconsumed: session {s.file} ({s.kind}, recorded id {s.id}) {served}; " \
           f"{_calls(s.served + 1, s.entries)} of {s.entries} not requested"


def _divergence_line(d: DivergenceReport) -> str:
    diff = f" ({d.diff})" if d.diff else ""
    return f"session {d.session} (live id {d.live_id}) call {d.call + 1}, {d.what}: expected {d.expected!r}, " \
           f"got {d.got!r}{diff}"


def _session_line(s: SessionReport) -> str:
    bound = f"live id {s.live_id}" if s.live_id is not None else "never bound"
    return f"{s.file} ({s.kind}): {s.served}/{s.entries}, {bound}"
