"""Builders for small dsh v0 session logs written into `tmp_path`, and where the test data lives.

The rows have the shapes of the real corpus (`assistant/chunk` events with `turn`, `step` and a
StreamChunk; `seq`/`time` on every row unless projected); chunk builders return plain dicts as dsh
writes them. Tests that care about exact bytes or line numbers write inline JSONL strings instead;
these helpers are for trees where only the shape matters.

Import it as `from tests.logbuilder import ...` (one module, one name).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mockllm.dsh import writer
from mockllm.dsh.header import InheritedEventCount, SessionHeader

ROOT = Path(__file__).resolve().parents[1]
RECORDINGS = ROOT / "recordings"
CORPUS = ROOT.parent / "shared" / "corpus"
CORPUS_MISSING = f"the shared dsh corpus is not at {CORPUS} (it lives next to the project checkout)"

MODEL = "deepseek-v4-flash"

Row = dict[str, Any]
Chunk = dict[str, Any]


# -- the shared corpus ---------------------------------------------------------------------------


def corpus_or_skip() -> Path:
    """The corpus folder; skips the calling test when it is absent."""
    if not CORPUS.is_dir():
        pytest.skip(CORPUS_MISSING)
    return CORPUS


def corpus_params(pattern: str, *, folders: bool = False) -> list[Any]:
    """Corpus paths matching `pattern` (`folders`: the folders holding them) as pytest params (id =
    path in the corpus), or one skipped param."""
    if not CORPUS.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=CORPUS_MISSING), id="corpus-missing")]
    paths = [p.parent if folders else p for p in sorted(CORPUS.glob(pattern))]
    return [pytest.param(p, id=str(p.relative_to(CORPUS))) for p in paths]


def corpus_scenarios() -> list[Any]:
    """Every corpus scenario folder (one with a `session.jsonl`) as pytest params, as `corpus_params`."""
    return corpus_params("*/*/session.jsonl", folders=True)


# -- chunks: one model call ----------------------------------------------------------------------


def _pieces(text: str) -> list[str]:
    """Split on single spaces, each piece keeping its trailing space: the deltas join back to `text`."""
    words = text.split(" ")
    return [w + " " for w in words[:-1]] + [words[-1]]


def usage(input_tokens: int = 10, output_tokens: int = 5, **extra: int) -> Chunk:
    return {"type": "usage", "usage": {"inputTokens": input_tokens, "outputTokens": output_tokens, **extra}}


def finish(kind: str = "stop", **reason: Any) -> Chunk:
    return {"type": "finish", "reason": {"kind": kind, **reason}}


_finish = finish  # text_call's `finish` argument hides the builder


def _reasoning_block(reasoning: str) -> list[Chunk]:
    """A reasoning block at index 0, one delta per word."""
    return [
        {"type": "block-start", "index": 0, "blockType": "reasoning"},
        *({"type": "reasoning-delta", "index": 0, "text": p} for p in _pieces(reasoning)),
        {"type": "block-end", "index": 0, "block": {"type": "reasoning", "text": reasoning}},
    ]


def text_call(text: str, finish: str = "stop", *, reasoning: str | None = None,
              use: Chunk | None = None) -> list[Chunk]:
    """One model call answering `text` (optionally after reasoning), one delta per word.

    `finish` is the finish kind; `use` replaces the usage chunk (default: 10 in, 5 out, whatever the text).
    """
    chunks = _reasoning_block(reasoning) if reasoning is not None else []
    index = 0 if reasoning is None else 1
    chunks.append({"type": "block-start", "index": index, "blockType": "text"})
    chunks += [{"type": "text-delta", "index": index, "text": p} for p in _pieces(text)]
    chunks.append({"type": "block-end", "index": index, "block": {"type": "text", "text": text}})
    chunks.append(use if use is not None else usage())
    chunks.append(_finish(finish))
    return chunks


def tool_call(name: str, arguments: str = "{}", call_id: str = "call_1", *, reasoning: str | None = None,
              minimal: bool = False) -> list[Chunk]:
    """One model call making one tool call; like dsh, id and name ride on every argument fragment.

    As dsh records a streamed call, the arguments come in three fragments (an empty one first, then
    two halves) and a usage chunk precedes the finish. `minimal` makes the four-chunk call instead
    (block-start, one fragment with all the arguments, block-end, finish) for tests that count rows.
    """
    chunks = _reasoning_block(reasoning) if reasoning is not None else []
    index = 0 if reasoning is None else 1
    half = len(arguments) // 2
    fragments = [arguments] if minimal else ["", arguments[:half], arguments[half:]]
    chunks.append({"type": "block-start", "index": index, "blockType": "tool-call"})
    chunks += [{"type": "tool-call-delta", "index": index, "id": call_id, "name": name, "argumentsDelta": part}
               for part in fragments]
    chunks.append({"type": "block-end", "index": index,
                   "block": {"type": "tool-call", "id": call_id, "name": name, "arguments": arguments}})
    if not minimal:
        chunks.append(usage())
    chunks.append(finish("tool-calls"))
    return chunks


# -- rows: turns and logs ------------------------------------------------------------------------


def header(session_id: str = "p", *, created_at: int = 1, parent: str | None = None,
           seed: int | None = None) -> SessionHeader:
    """A v0 header; `seed` given makes a seeded (fork) session, None an unseeded one."""
    return SessionHeader(id=session_id, created_at=created_at, cwd="/w", parent_session=parent,
                         is_seeded=seed is not None, inherited=InheritedEventCount(seed or 0))


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


class Log:
    """The body rows of one session log, built turn by turn (after a request/context row naming `model`)."""

    def __init__(self, model: str | None = MODEL) -> None:
        self.rows: list[Row] = []
        self.turns = 0
        if model is not None:
            self.rows.append({"type": "request/context", "data": {"provider": "deepseek-official", "model": model}})

    def turn(self, prompt: str, *calls: list[Chunk]) -> Log:
        """A user turn: the prompt, then one step per model call."""
        self.turns += 1
        self.rows += turn_rows(self.turns, prompt, *calls)
        return self


def stamped(rows: list[Row]) -> list[Row]:
    """The rows as full-layout events: seq is the row's index, time 1000 + seq."""
    return [{"type": row["type"], "seq": seq, "time": 1000 + seq, "data": row["data"]} for seq, row in enumerate(rows)]


def write_log(folder: Path, name: str, head: SessionHeader, rows: list[Row], *, projected: bool = False) -> Path:
    """Write one log through mockllm's writer; unless projected, each row gets seq and time."""
    folder.mkdir(parents=True, exist_ok=True)
    return writer.write_log(folder / name, head, rows if projected else stamped(rows), projected=projected)


# -- scenarios: trees and overrides --------------------------------------------------------------


def write_override(folder: Path, entries: list[dict[str, Any]]) -> Path:
    """An override-only scenario (or a sidecar): `entries` is the primary's whole script."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "replay.override.json"
    path.write_text(json.dumps(entries, indent=1), encoding="utf-8")
    return path


def chunks_entry(chunks: list[Chunk]) -> dict[str, Any]:
    return {"kind": "chunks", "chunks": chunks}


def write_sessions(folder: Path, scripts: dict[str, list[list[Chunk]]]) -> Path:
    """A tree of one primary (the first key) and spawn children, each with its calls in one turn.

    Children are created in the order given, so their script order is the dict order.
    """
    names = list(scripts)
    for number, name in enumerate(names):
        parent = None if number == 0 else names[0]
        log = Log().turn(f"task of {name}", *scripts[name])
        file = "session.jsonl" if number == 0 else f"session.{number}.jsonl"
        write_log(folder, file, header(name, created_at=1_000 + number, parent=parent), log.rows)
    return folder


def fork_tree(folder: Path, *, seed: int | None = None, child_prompt: str = "child task") -> Path:
    """A primary with two turns and a fork child seeded with the primary's first turn.

    The seed holds the parent's model call ("parent answer"), so a script derived without the cut
    would replay the parent's answer to the child. The fork call is `minimal`: tests count the primary's
    events (28).
    """
    first = turn_rows(1, "hello", text_call("parent answer"))
    fork = tool_call("subagent_fork", minimal=True)
    primary = [*first, *turn_rows(2, "fork it", fork, text_call("parent done"))]
    child = [*first, *turn_rows(2, child_prompt, text_call("child answer"))]
    write_log(folder, "session.jsonl", header("p", created_at=1), primary)
    write_log(folder, "session.1.jsonl",
              header("c", created_at=2, parent="p", seed=len(first) if seed is None else seed), child)
    return folder


# -- the mixed tree: a primary that spawns one child and forks another ---------------------------

PRIMARY_ID = "rec-primary"
SPAWN_ID = "rec-spawn"
FORK_ID = "rec-fork"
SYSTEM = "You are dsh, a coding agent."
PRIMARY_PROMPTS = ("Remember: the codeword is SAFFRON. Reply OK.", "Delegate twice, then say PARENT_DONE.")
SPAWN_TASK = "Reply with exactly the word ALPHA."
FORK_TASK = "What is the codeword? Reply with that one word."

SPAWN_ARGS = json.dumps({"prompt": SPAWN_TASK})
FORK_ARGS = json.dumps({"prompt": FORK_TASK})

# What each session answers, call by call: distinct everywhere, so a misrouted call shows.
MIXED_ANSWERS: dict[str, list[tuple[str, str]]] = {
    PRIMARY_ID: [("text", "P0 OK"), ("tool", "subagent"), ("tool", "subagent_fork"), ("text", "P3 PARENT_DONE")],
    SPAWN_ID: [("tool", "read_file"), ("text", "S1 ALPHA")],
    FORK_ID: [("tool", "grep"), ("text", "F1 SAFFRON")],
}


def write_mixed_tree(folder: Path) -> Path:
    """Like the corpus' `subagent-mixed`: the fork child's seed holds the primary's first call."""
    first = Log().turn(PRIMARY_PROMPTS[0], text_call("P0 OK", reasoning="the user wants OK"))
    seed_rows = list(first.rows)
    primary = first.turn(
        PRIMARY_PROMPTS[1],
        tool_call("subagent", SPAWN_ARGS, "call_p1", reasoning="spawn a child first"),
        tool_call("subagent_fork", FORK_ARGS, "call_p2", reasoning="now fork"),
        text_call("P3 PARENT_DONE"),
    )
    write_log(folder, "session.jsonl", header(PRIMARY_ID, created_at=1_000), primary.rows)
    spawn = Log().turn(SPAWN_TASK, tool_call("read_file", '{"path":"a.txt"}', "call_s0", reasoning="read it"),
                       text_call("S1 ALPHA"))
    write_log(folder, "session.1.jsonl", header(SPAWN_ID, created_at=2_000, parent=PRIMARY_ID), spawn.rows)
    fork = Log(model=None)
    fork.rows = list(seed_rows)
    fork.turns = 1
    fork.turn(FORK_TASK, tool_call("grep", '{"pattern":"codeword"}', "call_f0", reasoning="search"),
              text_call("F1 SAFFRON"))
    write_log(folder, "session.2.jsonl",
              header(FORK_ID, created_at=3_000, parent=PRIMARY_ID, seed=len(seed_rows)), fork.rows)
    return folder
