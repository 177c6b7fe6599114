"""Build small dsh v0 session trees in `tmp_path` for the serving tests.

The rows have the exact shapes of the real corpus (`assistant/chunk` events with `turn`, `step` and
a StreamChunk; `seq`/`time` on every row). Chunk builders return plain dicts as dsh writes them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.logbuilder import Chunk, Row, header, turn_rows, write_log

MODEL = "deepseek-v4-flash"


def _pieces(text: str) -> list[str]:
    """Split into word-ish fragments (each keeps its trailing space) so a call has several deltas."""
    words = text.split(" ")
    return [w + " " for w in words[:-1]] + [words[-1]]


def usage(input_tokens: int = 10, output_tokens: int = 5, **extra: int) -> Chunk:
    return {"type": "usage", "usage": {"inputTokens": input_tokens, "outputTokens": output_tokens, **extra}}


def finish(kind: str = "stop", **reason: Any) -> Chunk:
    return {"type": "finish", "reason": {"kind": kind, **reason}}


def text_call(text: str, *, reasoning: str | None = None, finish_kind: str = "stop",
              use: Chunk | None = None) -> list[Chunk]:
    """One model call answering `text` (optionally after reasoning), one delta per word."""
    chunks: list[Chunk] = []
    index = 0
    if reasoning is not None:
        chunks.append({"type": "block-start", "index": index, "blockType": "reasoning"})
        chunks += [{"type": "reasoning-delta", "index": index, "text": p} for p in _pieces(reasoning)]
        chunks.append({"type": "block-end", "index": index, "block": {"type": "reasoning", "text": reasoning}})
        index += 1
    chunks.append({"type": "block-start", "index": index, "blockType": "text"})
    chunks += [{"type": "text-delta", "index": index, "text": p} for p in _pieces(text)]
    chunks.append({"type": "block-end", "index": index, "block": {"type": "text", "text": text}})
    chunks.append(use if use is not None else usage())
    chunks.append(finish(finish_kind))
    return chunks


def tool_call(name: str, arguments: str, call_id: str, *, reasoning: str | None = None) -> list[Chunk]:
    """One model call making one tool call; dsh records id and name on every fragment."""
    chunks: list[Chunk] = []
    index = 0
    if reasoning is not None:
        chunks.append({"type": "block-start", "index": 0, "blockType": "reasoning"})
        chunks.append({"type": "reasoning-delta", "index": 0, "text": reasoning})
        chunks.append({"type": "block-end", "index": 0, "block": {"type": "reasoning", "text": reasoning}})
        index = 1
    half = len(arguments) // 2
    chunks.append({"type": "block-start", "index": index, "blockType": "tool-call"})
    for part in ("", arguments[:half], arguments[half:]):
        chunks.append({"type": "tool-call-delta", "index": index, "id": call_id, "name": name, "argumentsDelta": part})
    chunks.append({"type": "block-end", "index": index,
                   "block": {"type": "tool-call", "id": call_id, "name": name, "arguments": arguments}})
    chunks.append(usage())
    chunks.append(finish("tool-calls"))
    return chunks


class Log:
    """The body rows of one session log, built turn by turn."""

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
