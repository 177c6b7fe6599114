"""Side routes being recorded (`mockllm record --side-route MODEL`): a model's calls kept out of the tree.

Calls beside the conversation (a title model, warm-ups, quick checks) would otherwise each become a
session of their own, or a step of the conversation that sent them. A side route's calls are
written instead as that route's script, the format replay reads (`scenario.side_routes`): a
sidecar-style entry array in `side.<model>.json`, declared in the scenario's `mockllm.json` as
`{"side_routes": [{"model": M, "script": FILE}]}`. Replaying the recording then serves that model's
requests from it, with a cursor of their own, whatever session header they carry.

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
from mockllm.script.entries import Entry

SIDE_PREFIX = "side."  # a side route's script is `side.<model>.json`; no `session…` name, so no log


@dataclass(slots=True)
class _Route:
    model: str
    file: str
    entries: dict[int, Entry] = field(default_factory=dict)  # by arrival


class SideRoutes:
    """The side routes of one recording; `submit` runs file work on the tree's writer thread, in order."""

    def __init__(self, out: Path, models: tuple[str, ...], submit: Callable[..., None]) -> None:
        self.out = out
        self.models = frozenset(models)
        self._submit = submit
        self._routes: dict[str, _Route] = {}  # by model, in the order each was first called

    def __contains__(self, model: object) -> bool:
        return model in self.models

    def record(self, model: str, arrival: int, entry: Entry) -> None:
        """One call of `model`'s route, at its place in arrival order."""
        route = self._routes.get(model)
        if route is None:
            route = self._routes[model] = _Route(model, self._file_for(model))
            manifest = {"side_routes": [{"model": r.model, "script": r.file} for r in self._routes.values()]}
            self._submit(write_json, self.out / MANIFEST_FILE, manifest)
        route.entries[arrival] = entry
        entries = [msgspec.to_builtins(route.entries[k]) for k in sorted(route.entries)]
        self._submit(write_json, self.out / route.file, entries)

    @property
    def files(self) -> list[str]:
        return [r.file for r in self._routes.values()]

    def _file_for(self, model: str) -> str:
        stem = re.sub(r"[^A-Za-z0-9._-]", "_", model).strip(".") or "model"
        taken = {r.file for r in self._routes.values()}
        file, number = f"{SIDE_PREFIX}{stem}.json", 1
        while file in taken:  # two models that differ only in characters a file name cannot hold
            number += 1
            file = f"{SIDE_PREFIX}{stem}-{number}.json"
        return file


def write_json(path: Path, doc: Any) -> None:
    """Rewritten whole, renamed into place: never half a file."""
    partial = partial_path(path)
    partial.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(partial, path)
