"""`mockllm inspect`: show a session tree, each session's kind and cut, and the gist of each entry.

The human output is for reading at a glance; `--tree` draws each scenario as a person would (children
under the session that made them, box-drawing lines: `mockllm.inspector.tree`); `--json` is a fixed
shape that external tools read:
`{"scenarios":[{"name","sessions":[{"id","file","parent","kind","cut","events","entries"}]}]}`,
plus `"side_routes": [{"model","file","repeat","entries"}]` on a scenario that declares any,
`"embeddings": {"file","calls","apis","models"}` on one that recorded embeddings, and
a top-level `"broken"` list only when some scenario failed to load.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from mockllm.dsh.chunks import (
    BlockEnd,
    BlockStart,
    FinishChunk,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
)
from mockllm.dsh.names import PRIMARY_FILE, SIDECAR_FILE
from mockllm.errors import NotAScenarioError, ScenarioError
from mockllm.inspector.tree import draw_tree
from mockllm.mcp.summary import describe_log, log_to_json
from mockllm.scenario.load import Scenario, Suite, load_suite
from mockllm.scenario.side_routes import SideRouteSpec
from mockllm.scenario.summary import SessionSummary, age, summarize
from mockllm.script.entries import Entry, HangEntry, ThrowEntry

GIST_WORDS = 8
GIST_MESSAGE_CHARS = 80


def run_inspect(path: Path, *, as_json: bool, as_tree: bool = False, side_routes: Sequence[SideRouteSpec] = ()) -> int:
    """Print the scenario or suite at `path`; 1 when PATH is not one or a scenario is broken."""
    try:
        suite = load_suite(path, side_routes=side_routes)
    except NotAScenarioError as exc:
        print(f"mockllm inspect: error: {exc}", file=sys.stderr)
        return 1
    if as_json:
        print(json.dumps(suite_to_json(suite), indent=2))
        if suite.skipped:
            # Kept off stdout so the JSON stays exactly the documented shape.
            print(f"mockllm inspect: skipped (not scenarios): {', '.join(suite.skipped)}", file=sys.stderr)
    elif as_tree:
        print("\n".join(draw_suite(suite)))
    else:
        print("\n".join(describe_suite(suite)))
    return 1 if suite.broken else 0


# --- JSON ---------------------------------------------------------------------------------------


def suite_to_json(suite: Suite) -> dict[str, Any]:
    doc: dict[str, Any] = {"scenarios": [scenario_to_json(s) for s in suite.scenarios.values()]}
    if suite.broken:
        doc["broken"] = [broken_to_json(name, error) for name, error in suite.broken.items()]
    return doc


def scenario_to_json(scenario: Scenario) -> dict[str, Any]:
    doc: dict[str, Any] = msgspec.to_builtins(summarize(scenario))
    if scenario.mcp:
        doc["mcp"] = [log_to_json(log) for log in scenario.mcp.values()]
    return doc


def broken_to_json(name: str, error: ScenarioError) -> dict[str, Any]:
    return {
        "name": name,
        "errors": [{"file": str(p.path), "line": p.line, "message": p.message} for p in error.problems],
    }


# --- human output -------------------------------------------------------------------------------


def describe_suite(suite: Suite) -> list[str]:
    lines: list[str] = []
    for scenario in suite.scenarios.values():
        lines.extend(describe_scenario(scenario))
        lines.append("")
    if suite.skipped:
        lines.append(f"skipped (not scenarios: no {PRIMARY_FILE}, no {SIDECAR_FILE}): {', '.join(suite.skipped)}")
    for name, error in suite.broken.items():
        lines.append(f"broken: {name}")
        lines.extend(f"  {problem}" for problem in error.problems)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def draw_suite(suite: Suite) -> list[str]:
    """Each scenario as a tree, a blank line between; then what was skipped and what is broken."""
    lines: list[str] = []
    for scenario in suite.scenarios.values():
        lines += [*draw_tree(summarize(scenario)), ""]
    return lines + describe_suite(Suite(suite.path, {}, suite.broken, suite.skipped))


def describe_scenario(scenario: Scenario) -> list[str]:
    summary = summarize(scenario)
    total = sum(s.entries for s in summary.sessions)
    lines = [f"{summary.name}  ({counted(len(summary.sessions), 'session')}, {counted(total, 'entry', 'entries')})"]
    if summary.recorded is not None:
        recorded = summary.recorded
        lines.append(f"  recorded {age(recorded)} ({recorded.get('at')}) by {recorded.get('by', 'mockllm')}, record "
                     f"mode {recorded.get('mode', '?')}, from {recorded.get('upstream') or 'an unknown upstream'}")
    # Pad the columns that vary in width so a tree's sessions line up.
    file_width = max(len(s.file) for s in summary.sessions)
    for session, script in zip(summary.sessions, scenario.sessions, strict=True):
        lines.append("  " + describe_session(session, file_width))
        if not session.entries:
            lines.append("    (no model calls)")
        lines += describe_entries(script.entries)
    for route, side in zip(summary.side_routes, scenario.side_routes, strict=True):
        repeat = ", its last entry repeats" if route.repeat else ""
        lines.append(f"  side route: model {route.model} <- {route.file}  "
                     f"({counted(route.entries, 'entry', 'entries')}{repeat})")
        lines += describe_entries(side.entries)
    if summary.embeddings is not None:
        e = summary.embeddings
        apis = ", ".join(f"{api} {n}" for api, n in e.apis.items())
        lines.append(f"  embeddings: {e.file}  ({counted(e.calls, 'recorded call')}: {apis}; "
                     f"model(s) {', '.join(e.models)})")
    for log in scenario.mcp.values():
        lines += describe_log(log)
    return lines


def describe_session(session: SessionSummary, file_width: int = 0) -> str:
    """One line: file, kind, cut, logical events, entries, id (and parent for a child)."""
    parts = [
        session.file.ljust(file_width),
        session.kind.ljust(7),
        f"cut {session.cut:<3}",
        f"{counted(session.events, 'event'):>10}",
        f"{counted(session.entries, 'entry', 'entries'):>10}",
        f"id {session.id}",
    ]
    if session.parent is not None:
        parts.append(f"parent {session.parent}")
    return "  ".join(parts)


def describe_entries(entries: list[Entry]) -> list[str]:
    """One numbered line per script entry."""
    return [f"    #{number:<2} {describe_entry(entry)}" for number, entry in enumerate(entries)]


def describe_entry(entry: Entry) -> str:
    """A one-line gist of a script entry: what the replayed call says and does, and how it ends."""
    if isinstance(entry, HangEntry):
        return "hang" + (f" (readyFile {entry.readyFile})" if entry.readyFile else "")
    if isinstance(entry, ThrowEntry):
        status = f" {entry.status}" if entry.status is not None else ""
        gist = f"throw {entry.code}{status}: {_shorten(entry.message)}"
        if entry.chunks:
            gist += f" (after {counted(len(entry.chunks), 'chunk')}: {describe_chunks(entry.chunks)})"
        return gist
    return describe_chunks(entry.chunks)


def describe_chunks(chunks: list[StreamChunk]) -> str:
    """`reasoning; "first words of the text…"; tools a, b; finish stop` (parts only when present)."""
    parts: list[str] = []
    if any(_is_reasoning(c) for c in chunks):
        parts.append("reasoning")
    text = _text_of(chunks)
    if text:
        parts.append(f'"{_first_words(text)}"')
    tools = _tool_names(chunks)
    if tools:
        parts.append("tools " + ", ".join(tools))
    parts.append(_finish_gist(chunks))
    return "; ".join(parts)


def _is_reasoning(chunk: StreamChunk) -> bool:
    return isinstance(chunk, ReasoningDelta) or (isinstance(chunk, BlockStart) and chunk.blockType == "reasoning")


def _text_of(chunks: list[StreamChunk]) -> str:
    """The call's visible text; a text block recorded with no deltas counts by its assembled text."""
    deltas: dict[int, list[str]] = {}
    assembled: dict[int, str] = {}
    for chunk in chunks:
        if isinstance(chunk, TextDelta):
            deltas.setdefault(chunk.index, []).append(chunk.text)
        elif isinstance(chunk, BlockEnd) and chunk.block.type == "text" and chunk.block.text:
            assembled[chunk.index] = chunk.block.text
    indexes = sorted(deltas.keys() | assembled.keys())
    return " ".join("".join(deltas[i]) if i in deltas else assembled[i] for i in indexes)


def _tool_names(chunks: list[StreamChunk]) -> list[str]:
    """Names of the tools called, one per tool-call block, in block order."""
    names: dict[int, str] = {}
    for chunk in chunks:
        if isinstance(chunk, ToolCallDelta) and chunk.name and chunk.index not in names:
            names[chunk.index] = chunk.name
        elif isinstance(chunk, BlockStart) and chunk.blockType == "tool-call":
            names.setdefault(chunk.index, "?")
        elif isinstance(chunk, BlockEnd) and chunk.block.type == "tool-call" and chunk.block.name:
            names[chunk.index] = chunk.block.name
    return [names[i] for i in sorted(names)]


def _finish_gist(chunks: list[StreamChunk]) -> str:
    last = chunks[-1] if chunks else None
    if not isinstance(last, FinishChunk):
        return "no finish"
    reason = last.reason
    if reason.kind != "error":
        return f"finish {reason.kind}"
    code = reason.error_code or "?"
    message = reason.error_message
    return f"finish error {code}" + (f": {_shorten(message)}" if message else "")


def _first_words(text: str) -> str:
    words = text.split()
    gist = " ".join(words[:GIST_WORDS])
    return gist + "…" if len(words) > GIST_WORDS else gist


def _shorten(message: str) -> str:
    flat = " ".join(message.split())
    return flat if len(flat) <= GIST_MESSAGE_CHARS else flat[: GIST_MESSAGE_CHARS - 1] + "…"


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """`1 entry`, `2 entries`: a number with its noun."""
    return f"{n} {singular if n == 1 else (plural or singular + 's')}"
