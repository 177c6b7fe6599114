"""`mockllm check`: validate a scenario or suite, with one `file:line: message` line per problem.

Errors are what loading rejects (one per broken file, every broken file reported). Warnings are
tree-level doubts a scenario still loads with: a fork cut that does not fall on a turn boundary,
a seed that is not its parent's log, a parent that is not in the tree, a recorded id used twice.
The cut is explicit (`seedLength`): check verifies it and never infers a better one.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec

from mockllm.cli.tree_view import counted
from mockllm.dsh.names import TURN_END
from mockllm.dsh.reader import CallChunk, Event, SessionLog
from mockllm.errors import NotAScenarioError
from mockllm.mcp.summary import doubts
from mockllm.scenario.load import Scenario, SessionScript, Suite, load_suite
from mockllm.scenario.side_routes import SideRouteSpec

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Diagnostic:
    path: Path
    line: int | None
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        location = f"{self.path}:{self.line}" if self.line is not None else str(self.path)
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{location}: {prefix}{self.message}"


def run_check(path: Path, *, side_routes: Sequence[SideRouteSpec] = ()) -> int:
    """Print every diagnostic and a summary; 1 on any error (or when PATH is not a scenario/suite)."""
    try:
        suite = load_suite(path, keep_logs=True, side_routes=side_routes)
    except NotAScenarioError as exc:
        print(f"mockllm check: error: {exc}", file=sys.stderr)
        return 1
    diagnostics = check_suite(suite)
    for diagnostic in diagnostics:
        print(diagnostic)
    print(summary(suite, diagnostics))
    return 1 if any(d.severity == "error" for d in diagnostics) else 0


def check_suite(suite: Suite) -> list[Diagnostic]:
    """Every error of the broken scenarios, then the warnings of the loaded ones."""
    diagnostics = [
        Diagnostic(problem.path, problem.line, problem.message)
        for error in suite.broken.values()
        for problem in error.problems
    ]
    for scenario in suite.scenarios.values():
        diagnostics.extend(check_scenario(scenario))
        diagnostics.extend(Diagnostic(log.path, line, message, "warning")
                           for log in scenario.mcp.values() for line, message in doubts(log))
    return diagnostics


def check_scenario(scenario: Scenario) -> list[Diagnostic]:
    """Tree-level warnings for one scenario loaded with `keep_logs=True` (loading rejected the hard errors)."""
    diagnostics: list[Diagnostic] = []
    recorded = [s for s in scenario.sessions if s.header is not None]
    if any(s.log is None for s in recorded):
        raise ValueError(f"check needs the event logs: load {scenario.path} with keep_logs=True")
    by_id: dict[str, SessionScript] = {}
    for session in recorded:
        first = by_id.setdefault(session.id, session)
        if first is not session:
            diagnostics.append(_warn(
                session, 1,
                f"session id {session.id} is also recorded by {first.file}: a live session with that id "
                f"binds to {first.file} only; give each recorded session its own id",
            ))
    for session in recorded:
        if session.kind != "primary":
            diagnostics.extend(_check_parent(session, by_id))
        if session.kind == "fork":
            diagnostics.extend(_check_fork(session, by_id.get(session.parent or "")))
    return diagnostics


def summary(suite: Suite, diagnostics: list[Diagnostic]) -> str:
    """`OK: …` or `FAILED: …`, with what was checked, the warnings and the skipped folders."""
    errors = sum(d.severity == "error" for d in diagnostics)
    warnings = len(diagnostics) - errors
    sessions = sum(len(s.sessions) for s in suite.scenarios.values())
    entries = sum(len(x.entries) for s in suite.scenarios.values() for x in s.sessions)
    loaded = counted(len(suite.scenarios), "scenario")
    checked = f"{loaded} ({counted(sessions, 'session')}, {counted(entries, 'entry', 'entries')})"
    if suite.broken:
        text = (f"FAILED: {counted(errors, 'error')} in {counted(len(suite.broken), 'broken scenario')} "
                f"({', '.join(suite.broken)}); {checked} loaded")
    else:
        text = f"OK: {checked}"
    if warnings:
        text += f", {counted(warnings, 'warning')}"
    if suite.skipped:
        text += f"; skipped (not scenarios): {', '.join(suite.skipped)}"
    return text


def _check_parent(session: SessionScript, by_id: dict[str, SessionScript]) -> list[Diagnostic]:
    if session.parent is None:
        return [_warn(session, 1, "a child log with no parentSession: it is served as a spawn child of nothing; "
                                  "a child's header names the session that started it")]
    if session.parent not in by_id:
        known = ", ".join(f"{s.id} ({s.file})" for s in by_id.values())
        return [_warn(session, 1, f"parentSession {session.parent} names no session in this tree (recorded: {known})")]
    return []


def _check_fork(session: SessionScript, parent: SessionScript | None) -> list[Diagnostic]:
    """A fork's seed is whole turns of its parent: the cut follows a `turn/end`, the prefix is the parent's."""
    log = session.log
    assert log is not None  # only recorded sessions are checked
    diagnostics: list[Diagnostic] = []
    cut = log.header.cut
    # A cut of 0 inherits nothing and splits no turn: the start of a log is a turn boundary.
    if cut > 0 and log.events[cut - 1].type != TURN_END:
        before = log.events[cut - 1]
        diagnostics.append(_warn(
            session, 1,
            f"seedLength {cut} does not fall right after a {TURN_END}: logical event {cut - 1} "
            f"(line {before.line}) is {before.type}; a fork inherits whole turns, so check seedLength "
            "(it counts logical events, packed rows expanded)",
        ))
    if parent is not None and parent.log is not None and parent is not session:
        diagnostic = _seed_mismatch(session, log, parent.log)
        if diagnostic is not None:
            diagnostics.append(diagnostic)
    return diagnostics


def _seed_mismatch(session: SessionScript, log: SessionLog, parent: SessionLog) -> Diagnostic | None:
    """The first inherited event that is not the parent's event at the same index (type and data)."""
    cut = log.header.cut
    for index, (mine, theirs) in enumerate(zip(log.events[:cut], parent.events, strict=False)):
        if mine.type != theirs.type:
            return _warn(
                session, mine.line,
                f"inherited event {index} is {mine.type} but the parent's event {index} "
                f"({parent.path.name}:{theirs.line}) is {theirs.type}: the seed is not the parent's log",
            )
        if _plain(mine) != _plain(theirs):
            return _warn(
                session, mine.line,
                f"inherited event {index} ({mine.type}) has other data than the parent's event {index} "
                f"({parent.path.name}:{theirs.line}): the seed is not the parent's log",
            )
    if len(parent.events) < cut:
        return _warn(
            session, 1,
            f"seedLength {cut} is longer than the parent's log ({parent.path.name} has "
            f"{len(parent.events)} logical events): the seed is not the parent's log",
        )
    return None


def _plain(event: Event) -> Any:
    """The event's data as plain JSON values, so a packed member equals the unpacked chunk it stands for."""
    if isinstance(event.data, CallChunk):
        return msgspec.to_builtins(event.data)
    return msgspec.json.decode(event.data)


def _warn(session: SessionScript, line: int | None, message: str) -> Diagnostic:
    assert session.log is not None
    return Diagnostic(session.log.path, line, message, "warning")

