"""Load a scenario (one recorded session tree) or a suite (a folder of scenarios).

A scenario folder holds `session.jsonl` (the primary), `session.N.jsonl` (one per subagent, any
depth) and optionally `replay.override.json` for the primary. Each session gets its replay script;
scripts are ordered primary first, then children by header `createdAt`, ties by recorded id (the
order in which dsh binds new live sessions).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mockllm.entries import Entry
from mockllm.errors import MockllmError, NotAScenarioError, RecordingError
from mockllm.header import SessionHeader, SessionKind
from mockllm.recording import SessionLog, read_log
from mockllm.script import calls_to_entries, derive_calls, recorded_model
from mockllm.sidecar import SIDECAR_FILE, Sidecar, read_sidecar

PRIMARY_FILE = "session.jsonl"
_CHILD_FILE = re.compile(r"session\.(\d+)\.jsonl")


@dataclass(slots=True)
class SessionScript:
    """One recorded session and the script derived for it."""

    id: str
    file: str
    parent: str | None
    kind: SessionKind
    cut: int
    events: int
    created_at: int | float
    entries: list[Entry]
    header: SessionHeader | None  # None for an override-only scenario's primary
    model: str | None  # the model the session called, as recorded
    # The whole log, kept only when asked (`keep_logs`): serving needs the scripts, not the events,
    # and a large suite's events would otherwise stay in memory for the server's lifetime.
    log: SessionLog | None = None


@dataclass(slots=True)
class Scenario:
    name: str
    path: Path
    sessions: list[SessionScript]  # in script order

    @property
    def primary(self) -> SessionScript:
        return self.sessions[0]


class ScenarioError(MockllmError):
    """A scenario failed to load; `problems` holds one error per broken file."""

    def __init__(self, name: str, problems: list[RecordingError]) -> None:
        self.name = name
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@dataclass(slots=True)
class Suite:
    path: Path
    scenarios: dict[str, Scenario] = field(default_factory=dict)
    broken: dict[str, ScenarioError] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # sub-folders that are not scenarios


def is_scenario(path: Path) -> bool:
    return (path / PRIMARY_FILE).is_file() or (path / SIDECAR_FILE).is_file()


def session_files(path: Path) -> list[Path]:
    """The primary's log (if any), then child logs by their number."""
    children = sorted(
        (int(m.group(1)), p) for p in path.iterdir() if (m := _CHILD_FILE.fullmatch(p.name)) and p.is_file()
    )
    primary = [path / PRIMARY_FILE] if (path / PRIMARY_FILE).is_file() else []
    return primary + [p for _, p in children]


def load_scenario(path: Path, *, keep_logs: bool = False) -> Scenario:
    """Load and derive every session of one scenario; raises ScenarioError listing every broken file.

    `keep_logs` keeps each session's event list (for `check`, which compares seeds with parents).
    """
    if not path.is_dir() or not is_scenario(path):
        raise NotAScenarioError(f"{path}: not a scenario (no {PRIMARY_FILE} and no {SIDECAR_FILE})")
    files = session_files(path)
    primary = path / PRIMARY_FILE if (path / PRIMARY_FILE).is_file() else None
    sidecar = path / SIDECAR_FILE if (path / SIDECAR_FILE).is_file() else None
    return build_scenario(path.name, path, primary, files[1:] if primary else files, sidecar, keep_logs=keep_logs)


def build_scenario(name: str, path: Path, primary: Path | None, children: Sequence[Path], sidecar_file: Path | None,
                   *, keep_logs: bool = False) -> Scenario:
    """A scenario from explicit files (a folder's, or dsh's DSH_SNAPSHOT_* list); children in any
    order, ordered here as script order wants. A file outside `path` is named by its whole path.
    Raises ScenarioError listing every broken file."""
    problems: list[RecordingError] = []
    sidecar: Sidecar | None = None
    if sidecar_file is not None:
        try:
            sidecar = read_sidecar(sidecar_file)
        except RecordingError as exc:
            problems.append(exc)

    sessions: list[SessionScript] = []
    for file in ([primary] if primary is not None else []) + list(children):
        is_primary = file is primary
        try:
            session = _session_script(file, sidecar if is_primary else None, keep_logs, primary=is_primary)
        except RecordingError as exc:
            problems.append(exc)
            continue
        if file.parent != path:
            session.file = str(file)
        sessions.append(session)
    if sidecar is not None and primary is None:
        try:
            sessions.insert(0, _override_only_primary(path, sidecar))
        except RecordingError as exc:
            problems.append(exc)
    if problems:
        raise ScenarioError(name, problems)

    first, rest = sessions[0], sessions[1:]
    rest.sort(key=lambda s: (s.created_at, s.id))
    return Scenario(name, path, [first, *rest])


def load_suite(path: Path, *, keep_logs: bool = False) -> Suite:
    """Load `path` as one scenario, or as a suite of scenario sub-folders; broken ones are kept apart."""
    if not path.is_dir():
        raise NotAScenarioError(f"{path}: not a folder")
    suite = Suite(path)
    folders = [path] if is_scenario(path) else sorted(p for p in path.iterdir() if p.is_dir())
    for folder in folders:
        if not is_scenario(folder):
            suite.skipped.append(folder.name)
            continue
        try:
            suite.scenarios[folder.name] = load_scenario(folder, keep_logs=keep_logs)
        except ScenarioError as exc:
            suite.broken[folder.name] = exc
    if not suite.scenarios and not suite.broken:
        raise NotAScenarioError(f"{path}: neither a scenario nor a suite of scenarios (no {PRIMARY_FILE} found)")
    return suite


def _session_script(file: Path, sidecar: Sidecar | None, keep_logs: bool, *, primary: bool) -> SessionScript:
    log = read_log(file)
    calls = derive_calls(log)
    replaced = sidecar.replaces(len(calls)) if sidecar is not None else set()
    entries = calls_to_entries(calls, log, replaced)
    if sidecar is not None:
        entries = sidecar.apply(entries)
    header = log.header
    kind: SessionKind = "primary" if primary else ("fork" if header.is_seeded else "spawn")
    return SessionScript(
        id=header.id, file=file.name, parent=header.parent_session, kind=kind, cut=header.cut,
        events=len(log.events), created_at=header.created_at, entries=entries, header=header,
        model=recorded_model(log), log=log if keep_logs else None,
    )


def _override_only_primary(path: Path, sidecar: Sidecar) -> SessionScript:
    return SessionScript(
        id=path.name, file=SIDECAR_FILE, parent=None, kind="primary", cut=0, events=0,
        created_at=0, entries=sidecar.apply([]), header=None, model=None,
    )
