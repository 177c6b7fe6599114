"""The `replay.override.json` sidecar: hand-written entries for the primary session.

Two forms: a bare array of entries REPLACES the derived script; `{"patches":[{"at":K,"entry":E}]}`
swaps derived call K, or appends one entry when K equals the derived length. Entries are validated
at load, and each error names the line its entry starts on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import msgspec

from mockllm.errors import RecordingError
from mockllm.script.entries import ENTRY_KINDS, Entry, HangEntry, ready_file_problem

_entry_decoder = msgspec.json.Decoder(Entry)


@dataclass(frozen=True, slots=True)
class Sidecar:
    path: Path
    replacement: list[Entry] | None  # the bare-array form
    patches: dict[int, Entry]  # the patches form: derived call index -> entry
    lines: dict[int, int]  # entry position (array index, or patch `at`) -> line it starts on

    def apply(self, derived: list[Entry]) -> list[Entry]:
        """The script after this sidecar; raises if a patch points past the end."""
        if self.replacement is not None:
            return list(self.replacement)
        script = list(derived)
        for at in sorted(self.patches):
            # Bounds are the derived length, not the growing script: only `at == len(derived)`
            # appends, so patches at N and N+1 must not both append.
            if at > len(derived):
                raise RecordingError(
                    self.path, self.lines[at],
                    f"patch at {at} is past the end: the derived script has {len(derived)} calls "
                    f"(at 0..{len(derived) - 1} swaps a call, at {len(derived)} appends one)",
                )
            if at == len(derived):
                script.append(self.patches[at])
            else:
                script[at] = self.patches[at]
        return script

    def replaces(self, derived_count: int) -> set[int]:
        """Indexes of derived calls this sidecar replaces (so they need no `finish`)."""
        if self.replacement is not None:
            return set(range(derived_count))
        return set(self.patches)


def read_sidecar(path: Path) -> Sidecar:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordingError(path, None, f"cannot read: {exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordingError(path, exc.lineno, f"malformed JSON: {exc.msg}") from None

    if isinstance(doc, list):
        lines = _element_lines(text, text.index("["))
        entries = [_entry(item, path, lines[i], f"entry {i}") for i, item in enumerate(doc)]
        return Sidecar(path, entries, {}, dict(enumerate(lines)))

    if isinstance(doc, dict) and isinstance(doc.get("patches"), list):
        match = re.search(r'"patches"\s*:\s*\[', text)
        assert match is not None  # the key parsed, so its text is there
        lines = _element_lines(text, match.end() - 1)
        patches: dict[int, Entry] = {}
        patch_lines: dict[int, int] = {}
        for i, patch in enumerate(doc["patches"]):
            at = patch.get("at") if isinstance(patch, dict) else None
            if isinstance(at, bool) or not isinstance(at, int) or at < 0 or "entry" not in patch:
                raise RecordingError(path, lines[i], f'patch {i}: expected {{"at": K >= 0, "entry": {{…}}}}')
            if at in patches:
                raise RecordingError(path, lines[i], f"patch {i}: call {at} is patched twice")
            patches[at] = _entry(patch["entry"], path, lines[i], f"patch {i} (at {at})")
            patch_lines[at] = lines[i]
        return Sidecar(path, None, patches, patch_lines)

    raise RecordingError(path, 1, 'expected an array of entries or {"patches": [{"at": K, "entry": {…}}]}')


def _entry(item: object, path: Path, line: int, what: str) -> Entry:
    kind = item.get("kind") if isinstance(item, dict) else None
    if kind not in ENTRY_KINDS:
        raise RecordingError(path, line, f"{what}: unknown kind {kind!r}; expected one of {', '.join(ENTRY_KINDS)}")
    try:
        entry = _entry_decoder.decode(json.dumps(item))
    except msgspec.ValidationError as exc:
        raise RecordingError(path, line, f"{what} ({kind}): {exc}") from None
    if isinstance(entry, HangEntry) and entry.readyFile is not None:
        problem = ready_file_problem(entry.readyFile)
        if problem is not None:
            raise RecordingError(path, line, f"{what} (hang): readyFile {entry.readyFile!r} {problem}")
    return entry


def _element_lines(text: str, open_bracket: int) -> list[int]:
    """1-based line on which each element of the JSON array opening at `open_bracket` starts."""
    decoder = json.JSONDecoder()
    lines: list[int] = []
    pos = open_bracket + 1
    while True:
        while text[pos] in " \t\r\n,":
            pos += 1
        if text[pos] == "]":
            return lines
        lines.append(text.count("\n", 0, pos) + 1)
        _, pos = decoder.raw_decode(text, pos)
