"""Load a scenario (one recorded session tree) or a suite (a folder of scenarios).

A scenario folder holds `session.jsonl` (the primary), `session.N.jsonl` (one per subagent, any
depth) and optionally `replay.override.json` for the primary. Each session gets its replay script;
scripts are ordered primary first, then children by header `createdAt`, ties by recorded id (the
order in which dsh binds new live sessions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mockllm.dsh.header import SessionHeader, SessionKind
from mockllm.dsh.names import CHILD_FILE, EMBEDDINGS_FILE, MANIFEST_FILE, PARTIAL_SUFFIX, PRIMARY_FILE, SIDECAR_FILE
from mockllm.dsh.reader import SessionLog, read_log
from mockllm.errors import NotAScenarioError, RecordingError, ScenarioError
from mockllm.mcp.log import FILE as MCP_FILE
from mockllm.mcp.log import McpLog
from mockllm.mcp.log import read_log as read_mcp_log
from mockllm.scenario.collector import paused
from mockllm.scenario.count_tokens import load_counts, request_key
from mockllm.scenario.embeddings import EmbeddingStore, read_embeddings
from mockllm.scenario.envelopes import WireCall, load_envelopes
from mockllm.scenario.side_routes import SideRoute, SideRouteSpec, load_side_route, read_manifest
from mockllm.script.derive import Timing, call_timings, derive_script, recorded_model
from mockllm.script.entries import Entry, tool_call_ids, tools_called
from mockllm.script.inputs import RecordedInputs
from mockllm.script.sidecar import Sidecar, read_sidecar


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
    # Per entry: what the agent sent before it, and which recorded call's times it keeps
    # (script.DerivedScript); the times themselves are read from `path` on first use (`timings`).
    inputs: list[RecordedInputs | None] = field(default_factory=list)
    timed: list[int | None] = field(default_factory=list)
    system: str | None = None  # its first call's system prompt, when the log names it (binds twins)
    tools: frozenset[str] | None = None  # the names of the tools its first call offered, when the log names them
    path: Path | None = None
    # Per entry, what the provider sent for it, where the recorder kept it (`envelopes.jsonl`);
    # empty when nothing was kept (a dsh corpus, an older recording).
    wires: list[WireCall | None] = field(default_factory=list)
    _timings: list[Timing | None] | None = None
    # The whole log, kept only when asked (`keep_logs`): serving needs the scripts, not the events,
    # and a large suite's events would otherwise stay in memory for the server's lifetime.
    log: SessionLog | None = None

    @property
    def timings(self) -> list[Timing | None]:
        """Per entry, when its recorded chunks came (None: no times: a projected log, a scripted
        entry); read from the log on first use, since only pacing needs them."""
        if self._timings is None:
            per_call: list[Timing | None] = []
            if self.path is not None and any(n is not None for n in self.timed):
                try:
                    per_call = call_timings(self.path)
                except RecordingError:  # the log changed since it was loaded: serve untimed
                    per_call = []
            self._timings = [per_call[n] if n is not None and n < len(per_call) else None for n in self.timed]
        return self._timings


@dataclass(slots=True)
class Scenario:
    name: str
    path: Path
    sessions: list[SessionScript]  # in script order
    side_routes: list[SideRoute] = field(default_factory=list)
    # model -> index into side_routes: looked up for every request, so a dict.
    side_models: dict[str, int] = field(default_factory=dict)
    mcp: dict[str, McpLog] = field(default_factory=dict)  # recorded MCP servers by name (`mcp.NAME.jsonl`)

    # (script, call) -> names of the tools that entry calls, filled on first use.
    _tools: dict[tuple[int, int], tuple[str, ...]] = field(default_factory=dict)
    _ids: dict[int, frozenset[str]] = field(default_factory=dict)
    _counts: dict[str | None, dict[bytes, bytes]] = field(default_factory=dict)  # by the run's cwd
    embeddings: EmbeddingStore | None = None  # its embeddings.json, read with the scenario

    def token_count(self, request: Any, cwd: str | None = None) -> bytes | None:
        """The recorded answer to a `count_tokens` request equal to `request` (`{{cwd}}` in recorded
        ones read as the run's `cwd`), if one was recorded (the scenario's count_tokens.json, read on
        first use per cwd; RecordingError when it is broken)."""
        counts = self._counts.get(cwd)
        if counts is None:
            counts = self._counts[cwd] = load_counts(self.path, cwd)
        return counts.get(request_key(request))

    def __post_init__(self) -> None:
        self.side_models = {route.model: number for number, route in enumerate(self.side_routes)}

    def tools_called(self, script: int, call: int) -> tuple[str, ...]:
        """The tools entry `call` of script `script` calls, in block order."""
        names = self._tools.get((script, call))
        if names is None:
            names = self._tools[(script, call)] = tools_called(self.sessions[script].entries[call])
        return names

    def model_ids(self, script: int) -> frozenset[str]:
        """The ids of every tool call script `script`'s recorded model made (cached)."""
        ids = self._ids.get(script)
        if ids is None:
            ids = self._ids[script] = frozenset().union(*(tool_call_ids(e) for e in self.sessions[script].entries))
        return ids

    @property
    def primary(self) -> SessionScript:
        return self.sessions[0]


@dataclass(slots=True)
class Suite:
    path: Path
    scenarios: dict[str, Scenario] = field(default_factory=dict)
    broken: dict[str, ScenarioError] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # sub-folders that are not scenarios
    single: bool = False  # `path` is one scenario, not a suite of them
    recordable: bool = True  # record modes may write into `path` (not the bundled recordings, not dsh's files)

    def folder_of(self, name: str) -> Path:
        """Where scenario `name` is (or would be recorded): its path in the suite."""
        return self.path if self.single and name == self.path.name else self.path / name


# A suite holds scenarios one level down too (`recordings/test_agent/test_tool_loop/`, as the
# pytest plugin names them after the test): a scenario's name is its path in the suite.
MAX_NAME_DEPTH = 2
# Bytes of one part of a scenario name: a folder name holds 255, and a recording is staged beside it
# under a longer one (`.NAME.recording-XXXXXXXX`).
MAX_NAME_PART = 200


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a scenario folder in a suite, or None when it can."""
    parts = name.split("/")
    if not name or len(parts) > MAX_NAME_DEPTH or any(not p or p in (".", "..") for p in parts):
        return (f"scenario name {name!r}: expected a folder name, or GROUP/NAME for a scenario one level down "
                "(no empty part, no . or ..)")
    if len(parts) == MAX_NAME_DEPTH and parts[1] == "v1":
        return f"scenario name {name!r}: v1 cannot name a scenario one level down (its address would end in /v1/v1)"
    if "\\" in name or any(p.startswith(".") or any(ord(c) < 32 for c in p) for p in parts):
        return (f"scenario name {name!r}: no backslash, control character or leading dot (hidden folders are "
                "mockllm's own)")
    longest = max(len(p.encode("utf-8", "surrogatepass")) for p in parts)
    if longest > MAX_NAME_PART:
        return (f"scenario name {name[:60]!r}…: a part of it is {longest} characters (UTF-8 bytes) long; a folder "
                f"name is at most {MAX_NAME_PART} here: name it shorter")
    return None


def is_scenario(path: Path) -> bool:
    """A session log, a sidecar, or recordings beside the model alone: embeddings (a retrieval test
    that made no model call) or MCP servers (an agent's tools, replayed beside whatever model the
    test brings). One with `.partial` logs too fails to load (`load_scenario`)."""
    return (any((path / name).is_file() for name in (PRIMARY_FILE, SIDECAR_FILE, EMBEDDINGS_FILE))
            or bool(mcp_files(path)))


def unfinished_logs(path: Path) -> list[str]:
    """The session logs of `path` still named `.partial`: a recording that did not finish, or was
    killed while it finished (some logs renamed, others not)."""
    try:
        return sorted(p.name for p in path.glob(f"session*.jsonl{PARTIAL_SUFFIX}"))
    except OSError:
        return []


def session_files(path: Path) -> list[Path]:
    """The primary's log (if any), then child logs by their number."""
    children = sorted(
        (int(m.group(1)), p) for p in path.iterdir() if (m := CHILD_FILE.fullmatch(p.name)) and p.is_file()
    )
    primary = [path / PRIMARY_FILE] if (path / PRIMARY_FILE).is_file() else []
    return primary + [p for _, p in children]


@paused()
def load_scenario(path: Path, *, keep_logs: bool = False, side_routes: Sequence[SideRouteSpec] = (),
                  name: str | None = None) -> Scenario:
    """Load and derive every session of one scenario; raises ScenarioError listing every broken file.

    `keep_logs` keeps each session's event list (for `check`, which compares seeds with parents).
    `side_routes` adds routes to those the folder's `mockllm.json` declares. `name` is its name in
    its suite (default: the folder's name).
    """
    if not path.is_dir() or not is_scenario(path):
        raise NotAScenarioError(f"{path}: not a scenario (no {PRIMARY_FILE} and no {SIDECAR_FILE})")
    unfinished = unfinished_logs(path)
    if unfinished:  # loading the logs that finished would replay a tree with sessions missing
        raise ScenarioError(name or path.name, [RecordingError(path / unfinished[0], None, (
            f"the recording did not finish: {len(unfinished)} log(s) still named .partial "
            f"({', '.join(unfinished[:4])}); it was interrupted (killed while recording or finishing). Salvage "
            "each with mockllm.dsh.writer.recover(PATH), which keeps its complete calls, or record it again"))])
    files = session_files(path)
    primary = path / PRIMARY_FILE if (path / PRIMARY_FILE).is_file() else None
    sidecar = path / SIDECAR_FILE if (path / SIDECAR_FILE).is_file() else None
    return build_scenario(name or path.name, path, primary, files[1:] if primary else files, sidecar,
                          keep_logs=keep_logs, side_routes=side_routes)


def build_scenario(name: str, path: Path, primary: Path | None, children: Sequence[Path], sidecar_file: Path | None,
                   *, keep_logs: bool = False, side_routes: Sequence[SideRouteSpec] = ()) -> Scenario:
    """A scenario from explicit files (a folder's, or dsh's DSH_SNAPSHOT_* list); children in any
    order, ordered here as script order wants. A file outside `path` is named by its whole path.
    Side routes are those `path`'s `mockllm.json` declares, then `side_routes` for other models (a
    scenario's own route for a model wins: a recording made on a server given `--side-route M=FILE`
    declares its own script for M, and replays on that server).
    Raises ScenarioError listing every broken file."""
    problems: list[RecordingError] = []
    routes: list[SideRoute] = []
    try:
        declared = read_manifest(path)
        own = {spec.model for spec in declared}
        specs = [*declared, *(spec for spec in side_routes if spec.model not in own)]
    except RecordingError as exc:
        problems.append(exc)
        specs = []
    for spec in specs:
        try:
            routes.append(load_side_route(path, spec))
        except RecordingError as exc:
            problems.append(exc)
    sidecar: Sidecar | None = None
    # A sidecar named as a side route's script is that route's, not the primary's.
    if sidecar_file is not None and all(r.path.resolve() != sidecar_file.resolve() for r in routes):
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
    embeddings = None
    try:
        embeddings = read_embeddings(path)
    except RecordingError as exc:
        problems.append(exc)
    servers: dict[str, McpLog] = {}
    for file in mcp_files(path):
        try:
            servers[file.name[len("mcp."):-len(".jsonl")]] = read_mcp_log(file)
        except RecordingError as exc:
            problems.append(exc)
    if not sessions and not problems and primary is None and sidecar_file is None:
        if embeddings is not None:
            sessions.append(_no_model_primary(path, EMBEDDINGS_FILE))
        elif servers:
            sessions.append(_no_model_primary(path, PRIMARY_FILE))
    try:
        envelopes = load_envelopes(path)
    except RecordingError as exc:
        problems.append(exc)
        envelopes = {}
    if envelopes:
        for session in sessions:
            session.wires = [envelopes.get((session.id, n)) if n is not None else None for n in session.timed]
    if problems:
        raise ScenarioError(name, problems)

    if not sessions:
        raise ScenarioError(name, [RecordingError(path / SIDECAR_FILE, None, "the only sidecar is a side "
                                                  f"route's script: the scenario needs a {PRIMARY_FILE}")])
    models = [r.model for r in routes]
    if len(set(models)) != len(models):
        twice = sorted({m for m in models if models.count(m) > 1})
        raise ScenarioError(name, [RecordingError(path / MANIFEST_FILE, None,
                                                  f"side route model(s) declared twice: {', '.join(twice)}")])
    first, rest = sessions[0], sessions[1:]
    rest.sort(key=lambda s: (s.created_at, s.id))
    return Scenario(name, path, [first, *rest], routes, embeddings=embeddings, mcp=servers)


def mcp_files(path: Path) -> list[Path]:
    """A scenario folder's MCP recordings (`mcp.NAME.jsonl`), by name."""
    if not path.is_dir():
        return []
    return sorted(p for p in path.iterdir() if MCP_FILE.fullmatch(p.name) and p.is_file())


@paused()
def load_suite(path: Path, *, keep_logs: bool = False, side_routes: Sequence[SideRouteSpec] = (),
               allow_empty: bool = False) -> Suite:
    """Load `path` as one scenario, or as a suite of scenario sub-folders (and of scenarios one
    level down, named `GROUP/NAME`); broken ones are kept apart. Hidden folders are skipped unsaid:
    a recording being written lives in one until it is renamed into place.

    `allow_empty`: a missing or empty folder is an empty suite (a server that records into it)."""
    if not path.is_dir():
        if allow_empty and not path.exists():
            return Suite(path)
        raise NotAScenarioError(f"{path}: not a folder")
    if is_scenario(path):
        suite = Suite(path, single=True)
        _load_into(suite, path.name, path, keep_logs, side_routes)
        return suite
    suite = Suite(path)
    for folder in _subfolders(path):
        if is_scenario(folder):
            _load_into(suite, folder.name, folder, keep_logs, side_routes)
            continue
        inner = [sub for sub in _subfolders(folder) if is_scenario(sub)]
        if not inner:
            suite.skipped.append(folder.name)
        for sub in inner:
            _load_into(suite, f"{folder.name}/{sub.name}", sub, keep_logs, side_routes)
    if not suite.scenarios and not suite.broken and not allow_empty:
        raise NotAScenarioError(f"{path}: neither a scenario nor a suite of scenarios (no {PRIMARY_FILE} found)")
    return suite


def _subfolders(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))


def _load_into(suite: Suite, name: str, folder: Path, keep_logs: bool, side_routes: Sequence[SideRouteSpec]) -> None:
    try:
        suite.scenarios[name] = load_scenario(folder, keep_logs=keep_logs, side_routes=side_routes, name=name)
    except ScenarioError as exc:
        suite.broken[name] = exc


def _session_script(file: Path, sidecar: Sidecar | None, keep_logs: bool, *, primary: bool) -> SessionScript:
    log = read_log(file)
    script = derive_script(log, sidecar, primary=primary)
    header = log.header
    return SessionScript(
        id=header.id, file=file.name, parent=header.parent_session, kind=script.kind, cut=header.cut,
        events=len(log.events), created_at=header.created_at, entries=script.entries, header=header,
        inputs=script.inputs, timed=script.timed, system=script.system, tools=script.tools,
        path=file,
        model=recorded_model(log), log=log if keep_logs else None,
    )


def _no_model_primary(path: Path, file: str) -> SessionScript:
    """The primary of a scenario that recorded only what an agent calls beside the model (embeddings,
    MCP servers): no model calls, so it needs no binding and a run that makes none is consumed."""
    return SessionScript(id=path.name, file=file, parent=None, kind="primary", cut=0, events=0,
                         created_at=0, entries=[], header=None, model=None)


def _override_only_primary(path: Path, sidecar: Sidecar) -> SessionScript:
    script = derive_script(None, sidecar, primary=True)
    return SessionScript(
        id=path.name, file=SIDECAR_FILE, parent=None, kind="primary", cut=0, events=0,
        created_at=0, entries=script.entries, header=None, model=None, inputs=script.inputs, timed=script.timed,
    )
