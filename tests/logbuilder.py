"""Tiny builders for dsh session logs written into `tmp_path`, and the shared corpus location.

Tests that care about exact bytes or line numbers write inline JSONL strings instead; these
helpers are for trees where only the shape matters.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mockllm.dsh import writer
from mockllm.dsh.header import InheritedEventCount, SessionHeader

CORPUS = Path(__file__).parents[2] / "shared" / "corpus"
CORPUS_MISSING = f"the shared dsh corpus is not at {CORPUS} (it lives next to the project checkout)"

Row = dict[str, Any]
Chunk = dict[str, Any]


def corpus_params(pattern: str) -> list[Any]:
    """Corpus paths matching `pattern` as pytest params (id = path in the corpus), or one skipped param."""
    if not CORPUS.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=CORPUS_MISSING), id="corpus-missing")]
    return [pytest.param(p, id=str(p.relative_to(CORPUS))) for p in sorted(CORPUS.glob(pattern))]


def header(session_id: str = "p", *, created_at: int = 1, parent: str | None = None,
           seed: int | None = None) -> SessionHeader:
    """A v0 header; `seed` given makes a seeded (fork) session, None an unseeded one."""
    return SessionHeader(id=session_id, created_at=created_at, cwd="/w", parent_session=parent,
                         is_seeded=seed is not None, inherited=InheritedEventCount(seed or 0))


def text_call(text: str, finish: str = "stop") -> list[Chunk]:
    """The chunks of one model call answering `text` (one word per delta)."""
    words = [w + " " for w in text.split()]
    words[-1] = words[-1].rstrip()
    return [
        {"type": "block-start", "index": 0, "blockType": "text"},
        *({"type": "text-delta", "index": 0, "text": w} for w in words),
        {"type": "block-end", "index": 0, "block": {"type": "text", "text": text}},
        {"type": "usage", "usage": {"inputTokens": 10, "outputTokens": len(words)}},
        {"type": "finish", "reason": {"kind": finish}},
    ]


def tool_call(name: str, call_id: str = "call_1") -> list[Chunk]:
    return [
        {"type": "block-start", "index": 0, "blockType": "tool-call"},
        {"type": "tool-call-delta", "index": 0, "id": call_id, "name": name, "argumentsDelta": "{}"},
        {"type": "block-end", "index": 0, "block": {"type": "tool-call", "id": call_id, "name": name, "arguments": {}}},
        {"type": "finish", "reason": {"kind": "tool-calls"}},
    ]


def chunk_rows(turn: int, step: int, chunks: list[Chunk]) -> list[Row]:
    return [{"type": "assistant/chunk", "data": {"turn": turn, "step": step, "chunk": c}} for c in chunks]


def turn_rows(turn: int, prompt: str, *calls: list[Chunk]) -> list[Row]:
    """A whole turn: the user's prompt, one step per call, and its turn/end."""
    rows: list[Row] = [
        {"type": "turn/start", "data": {"turn": turn}},
        {"type": "user/message", "data": {"content": [{"type": "text", "text": prompt}]}},
    ]
    for step, chunks in enumerate(calls, start=1):
        rows.append({"type": "step/start", "data": {"turn": turn, "step": step}})
        rows.extend(chunk_rows(turn, step, chunks))
        rows.append({"type": "step/end", "data": {"turn": turn, "step": step}})
    rows.append({"type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}})
    return rows


def stamped(rows: list[Row]) -> list[Row]:
    """The rows as full-layout events: seq is the row's index, time 1000 + seq."""
    return [{"type": row["type"], "seq": seq, "time": 1000 + seq, "data": row["data"]} for seq, row in enumerate(rows)]


def write_log(folder: Path, name: str, head: SessionHeader, rows: list[Row], *, projected: bool = False) -> Path:
    """Write one log through mockllm's writer; unless projected, each row gets seq and time."""
    folder.mkdir(parents=True, exist_ok=True)
    return writer.write_log(folder / name, head, rows if projected else stamped(rows), projected=projected)


def fork_tree(folder: Path, *, seed: int | None = None, child_prompt: str = "child task") -> Path:
    """A primary with two turns and a fork child seeded with the primary's first turn.

    The seed holds the parent's model call ("parent answer"), so a script derived without the cut
    would replay the parent's answer to the child.
    """
    first = turn_rows(1, "hello", text_call("parent answer"))
    primary = [*first, *turn_rows(2, "fork it", tool_call("subagent_fork"), text_call("parent done"))]
    child = [*first, *turn_rows(2, child_prompt, text_call("child answer"))]
    write_log(folder, "session.jsonl", header("p", created_at=1), primary)
    write_log(folder, "session.1.jsonl",
              header("c", created_at=2, parent="p", seed=len(first) if seed is None else seed), child)
    return folder
