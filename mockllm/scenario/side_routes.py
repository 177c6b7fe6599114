"""Side routes: model calls an agent makes beside its conversation (a title model, warm-ups).

They carry the session's header (or none), so served from the session's script they would take
its next entry: the conversation would get the title and the title call a 410. A side route
instead serves every request whose `model` is the route's from a script of its own, with its own
cursor per run, and never touches a session's binding, cursor or conversation routing.

A scenario declares them in `mockllm.json`:
`{"side_routes": [{"model": "title-model", "script": "replay.override.json", "repeat": false}]}`;
`mockllm serve --side-route MODEL=FILE` adds one to every scenario served that declares none for
MODEL (a recording made on such a server declares its own). The script is a file
of the scenario folder: a sidecar-format entry array, or a session log whose derived calls are the
entries. A sidecar named as a route's script is that route's, not the primary's. A relative
`--side-route` FILE is looked up in each scenario's folder, else in the current folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from mockllm.dsh.names import MANIFEST_FILE
from mockllm.dsh.reader import read_log
from mockllm.errors import RecordingError
from mockllm.script.derive import derive_script
from mockllm.script.entries import Entry
from mockllm.script.sidecar import read_sidecar


class SideRouteSpec(NamedTuple):
    """A side route as declared: which model, which script file, and whether its last entry repeats."""

    model: str
    script: str
    repeat: bool = False
    origin: str = MANIFEST_FILE  # where it was declared, for error messages


@dataclass(frozen=True, slots=True)
class SideRoute:
    model: str
    file: str  # the script file as declared
    path: Path
    entries: list[Entry]
    repeat: bool


def parse_side_route(text: str) -> SideRouteSpec:
    """`MODEL=FILE` from the command line; raises ValueError saying what is expected."""
    model, sep, script = text.partition("=")
    if not sep or not model or not script:
        raise ValueError(f"--side-route {text!r}: expected MODEL=FILE, e.g. title-model=title.json")
    return SideRouteSpec(model, script, origin="--side-route")


def read_manifest(folder: Path) -> list[SideRouteSpec]:
    """The side routes a scenario folder's `mockllm.json` declares (none when it has no such file)."""
    path = folder / MANIFEST_FILE
    if not path.is_file():
        return []
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RecordingError(path, exc.lineno, f"malformed JSON: {exc.msg}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordingError(path, None, f"cannot read: {exc}") from None
    routes = doc.get("side_routes", []) if isinstance(doc, dict) else None
    if not isinstance(routes, list):
        raise RecordingError(path, None, 'expected {"side_routes": [{"model": M, "script": FILE, "repeat"?: bool}]}')
    specs = []
    for number, route in enumerate(routes):
        if not (isinstance(route, dict) and isinstance(route.get("model"), str)
                and isinstance(route.get("script"), str) and isinstance(route.get("repeat", False), bool)):
            raise RecordingError(path, None, f"side_routes[{number}]: expected "
                                 '{"model": "NAME", "script": "FILE", "repeat"?: true|false}')
        specs.append(SideRouteSpec(route["model"], route["script"], route.get("repeat", False)))
    return specs


def script_path(folder: Path, spec: SideRouteSpec) -> Path:
    """Where a route's script is: in the scenario folder (a command-line FILE may also be elsewhere).

    A script `mockllm.json` declares is the scenario's own: one that is absolute, or leaves the folder
    (`../`, a symlink out of it) is a RecordingError, as a hang's `readyFile` leaving the run's folder
    is. A suite may come from anyone; serving it must not read the machine's other files."""
    path = Path(spec.script)
    if spec.origin == MANIFEST_FILE:
        inside = folder / path
        try:
            outside = path.is_absolute() or not inside.resolve().is_relative_to(folder.resolve())
        except (OSError, RuntimeError):  # a symlink loop
            outside = True
        if outside:
            raise RecordingError(folder / MANIFEST_FILE, None, f"side route {spec.model!r}: its script "
                                 f"{spec.script} is outside the scenario folder; keep it in {folder}")
        return inside
    if path.is_absolute():
        return path
    if not (folder / path).exists():
        return path.resolve()
    return folder / path


def load_side_route(folder: Path, spec: SideRouteSpec) -> SideRoute:
    """Read a route's script: an entry array (`.json`) or a session log (`.jsonl`)."""
    path = script_path(folder, spec)
    if not path.is_file():
        raise RecordingError(folder / MANIFEST_FILE if spec.origin == MANIFEST_FILE else path, None,
                             f"side route {spec.model!r} ({spec.origin}): its script {spec.script} is not a file")
    if path.suffix == ".jsonl":
        entries = derive_script(read_log(path), None, primary=False).entries
    else:
        sidecar = read_sidecar(path)
        if sidecar.replacement is None:
            raise RecordingError(path, None, f"side route {spec.model!r}: a side route's script is an array of "
                                 'entries, not {"patches": …}')
        entries = sidecar.replacement
    return SideRoute(spec.model, spec.script, path, entries, spec.repeat)
