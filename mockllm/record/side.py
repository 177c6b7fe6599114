"""Side routes being recorded (`mockllm record --side-route MODEL`): a model's calls kept out of the tree.

Calls beside the conversation (a title model, warm-ups, quick checks) would otherwise each become a
session of their own, or a step of the conversation that sent them. A side route's calls are
written instead as that route's script, the format replay reads (`scenario.side_routes`): a
sidecar-style entry array in `side.<model>.json`, declared in the scenario's `mockllm.json` as
`{"side_routes": [{"model": M, "script": FILE}]}`. Replaying the recording then serves that model's
requests from it, with a cursor of their own, whatever session header they carry.

Under new_episodes a route past its script's end goes live, and its script is continued with the
live calls' answers (`continue_route`).

Entries are in the order the calls reached the recorder, as a replay's cursor hands them out. An
answer is a `chunks` entry; an upstream HTTP error a `throw` with its status; a stream that broke
off a `throw` with the chunks streamed first. Each file is rewritten whole (it is small) and renamed
into place on every call, so a crash leaves every side route complete up to its last call.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from mockllm.dsh.names import MANIFEST_FILE
from mockllm.dsh.writer import partial_path
from mockllm.scenario.side_routes import SideRoute
from mockllm.script.entries import Entry

SIDE_PREFIX = "side."  # a side route's script is `side.<model>.json`; no `session…` name, so no log


@dataclass(slots=True)
class _Route:
    model: str
    file: str
    entries: dict[int, Entry] = field(default_factory=dict)  # by arrival


class SideRoutes:
    """The side routes of one recording; `submit` runs file work on the tree's writer thread, in order."""

    def __init__(self, out: Path, models: tuple[str, ...], submit: Callable[..., None],
                 repeating: frozenset[str] = frozenset()) -> None:
        """`repeating`: models whose routes are declared `"repeat": true` (a record-mode run that records a
        scenario whose routes said so again keeps that)."""
        self.out = out
        self.models = frozenset(models)
        self.repeating = repeating
        self._submit = submit
        self._routes: dict[str, _Route] = {}  # by model, in the order each was first called

    def __contains__(self, model: object) -> bool:
        return model in self.models

    def record(self, model: str, arrival: int, entry: Entry) -> None:
        """One call of `model`'s route, at its place in arrival order."""
        route = self._routes.get(model)
        if route is None:
            route = self._routes[model] = _Route(model, self._file_for(model))
            manifest = {"side_routes": [self._declared(r) for r in self._routes.values()]}
            self._submit(write_json, self.out / MANIFEST_FILE, manifest)
        route.entries[arrival] = entry
        entries = [msgspec.to_builtins(route.entries[k]) for k in sorted(route.entries)]
        self._submit(write_json, self.out / route.file, entries)

    def _declared(self, route: _Route) -> dict[str, Any]:
        """A route as `mockllm.json` declares it."""
        declared: dict[str, Any] = {"model": route.model, "script": route.file}
        if route.model in self.repeating:
            declared["repeat"] = True
        return declared

    @property
    def files(self) -> list[str]:
        return [r.file for r in self._routes.values()]

    def _file_for(self, model: str) -> str:
        taken = {r.file for r in self._routes.values()}
        file, number = side_file(model), 1
        while file in taken:  # two models that differ only in characters a file name cannot hold
            number += 1
            file = side_file(model, number)
        return file


def side_file(model: str, number: int = 1) -> str:
    """A side route's script file: `side.<model>.json`, the model's name as a file name can hold it."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", model).strip(".") or "model"
    return f"{SIDE_PREFIX}{stem}.json" if number == 1 else f"{SIDE_PREFIX}{stem}-{number}.json"


def continue_route(folder: Path, scenario: Path, route: SideRoute, entries: list[Entry]) -> str:
    """A side route's script continued past its end with `entries` (new_episodes), in `folder`, the
    copy of scenario folder `scenario` being rewritten: its own file when it is an entry array of the
    scenario (rewritten whole, its entries as they were, then these), else `side.<model>.json` with
    its entries and these, declared in `mockllm.json` in its place (a session log, or a
    `--side-route` file shared by every scenario, is not rewritten). Returns the file written."""
    new = [msgspec.to_builtins(e) for e in entries]
    if route.path.suffix == ".json" and route.path.parent.resolve() == scenario.resolve():
        own = folder / route.path.name
        write_json(own, [*json.loads(own.read_text(encoding="utf-8")), *new])
        return own.name
    file = side_file(route.model)
    write_json(folder / file, [*(msgspec.to_builtins(e) for e in route.entries), *new])
    manifest = folder / MANIFEST_FILE
    doc = json.loads(manifest.read_text(encoding="utf-8")) if manifest.is_file() else {}
    declared = {"model": route.model, "script": file, **({"repeat": True} if route.repeat else {})}
    others = [r for r in doc.get("side_routes", []) if r.get("model") != route.model]
    write_json(manifest, {**doc, "side_routes": [*others, declared]})
    return file


def write_json(path: Path, doc: Any) -> None:
    """Rewritten whole, renamed into place: never half a file."""
    partial = partial_path(path)
    partial.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(partial, path)
