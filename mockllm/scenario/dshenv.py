"""dsh's own environment contract: the tree named by `DSH_SNAPSHOT_*`, served when no PATH is given.

dsh's snapshot runner names a recorded tree with environment variables instead of a folder:
- `DSH_SNAPSHOT_FILE`: the primary session's log (any file name);
- `DSH_SNAPSHOT_CHILD_FILES`: the children's logs, an `os.pathsep`-separated list; they may live
  in other folders and be listed in any order: they are ordered as a scenario's children are
  (header `createdAt`, ties by id), never by their place in the list;
- `DSH_SNAPSHOT_OVERRIDE`: the primary's sidecar (`replay.override.json` format).
An empty variable counts as unset. Relative paths are relative to the current folder. The tree
is one scenario, named after the primary's folder, so it is served at `/v1` too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from mockllm.errors import MockllmError, ScenarioError
from mockllm.scenario.load import Suite, build_scenario
from mockllm.scenario.side_routes import SideRouteSpec

FILE = "DSH_SNAPSHOT_FILE"
CHILD_FILES = "DSH_SNAPSHOT_CHILD_FILES"
OVERRIDE = "DSH_SNAPSHOT_OVERRIDE"


class DshEnvError(MockllmError):
    """A `DSH_SNAPSHOT_*` variable names a file that is missing or broken; says which variable."""


def requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment names a dsh tree (`DSH_SNAPSHOT_FILE` set and not empty)."""
    return bool((os.environ if environ is None else environ).get(FILE))


def load_dsh_env(environ: Mapping[str, str] | None = None, *, side_routes: Sequence[SideRouteSpec] = ()) -> Suite:
    """The suite of the one scenario the `DSH_SNAPSHOT_*` variables name (plus `side_routes`: dsh
    serves its title model from a second replay; here `--side-route title-model=FILE` does)."""
    env = os.environ if environ is None else environ
    if not env.get(FILE):
        raise DshEnvError(f"{FILE} is not set: it names the primary session's log")
    primary = Path(env[FILE])
    children = [Path(p) for p in env.get(CHILD_FILES, "").split(os.pathsep) if p]
    sidecar = Path(env[OVERRIDE]) if env.get(OVERRIDE) else None

    named = [(FILE, primary), *((CHILD_FILES, c) for c in children), *([(OVERRIDE, sidecar)] if sidecar else [])]
    missing = [f"{var}: {path}: no such file" for var, path in named if not path.is_file()]
    seen: set[Path] = set()
    for var, path in named:
        if path.resolve() in seen:
            missing.append(f"{var}: {path}: listed twice (each session's log once)")
        seen.add(path.resolve())
    if missing:
        raise DshEnvError("\n".join(missing))

    folder = primary.resolve().parent
    try:
        scenario = build_scenario(folder.name, folder, primary.resolve(), [c.resolve() for c in children],
                                  sidecar.resolve() if sidecar else None, side_routes=side_routes)
    except ScenarioError as exc:
        variable = {path.resolve(): var for var, path in named}
        raise DshEnvError("\n".join(f"{variable.get(p.path.resolve(), FILE)}: {p}" for p in exc.problems)) from exc
    return Suite(folder, {scenario.name: scenario})
