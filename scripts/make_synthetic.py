#!/usr/bin/env python3
"""Write a synthetic suite of realistic dsh session trees, for load benchmarks.

    python3 scripts/make_synthetic.py OUT_DIR --events N [--seed S]

OUT_DIR receives scenario folders `tree-00000/`, `tree-00001/`, ... until the suite holds at least
N logical events (packed rows expanded, seeds included: every event a loader must materialise),
plus `synthetic.json`, a manifest: totals, and per scenario and session file the kind, seedLength
and number of model calls the session made itself (what its derived script must hold).

Each tree is what a dsh coding agent records: a primary of several turns, each turn a user message
of a few hundred bytes then a tool loop (reasoning + tool calls streamed as deltas, tool/call and
tool/result with realistic outputs, assistant/message with the assembled blocks and
sourceEventSeqs), ending in a streamed text answer; now and then a provider retry inside a step.
Some tool calls start subagents: spawn children (fresh sessions) and fork children whose log starts
with a copy of the parent's events before the current turn (assistant/chunk events included), then
`session/end-seed`, with header `seedLength` = the number of LOGICAL seed events. Children may
start children of their own (depth <= 2). Each session is written packed (runs of >= 3 same-block
deltas in one text-chunks / reasoning-chunks / tool-call-chunks row), unpacked, or now and then
projected (no seq/time).

Output is deterministic for a given seed and N.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

# The project's package, from this checkout (the script also runs without an install).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mockllm.dsh.header import InheritedEventCount, SessionHeader
from mockllm.dsh.writer import encode_log

BASE_TIME = 1_790_000_000_000
MODEL = {"provider": "deepseek-official", "model": "deepseek-v4-flash"}
MAX_DEPTH = 2

_encode = msgspec.json.encode

WORDS: list[str] = (  # noqa: SIM905 (prose reads better than a list of words)
    "the function returns a list of paths under src and the test suite imports it from the package root "
    "so we should check whether the fixture creates a temporary directory before the parser reads config "
    "values from the environment then compare the output with the expected snapshot and update the cache "
    "key when the lock file changes because stale entries make the build slower than it needs to be while "
    "the handler retries the request after a timeout and logs the error with its status code so that "
    "callers can decide whether to back off or fail fast depending on the budget left for this step"
).split()
PATHS = ("src/app.py", "src/util.py", "src/cli/main.py", "tests/test_app.py", "pyproject.toml", "README.md",
         "src/server/routes.py", "src/models/user.py", "docs/index.md", "Makefile")
TOOLS = ("bash", "read_file", "edit_file", "grep", "list_dir")
USER_ASKS = (
    "The CI job for the integration tests has been flaky since yesterday: it times out on the database "
    "fixture roughly one run in five. Find out why the fixture is slow, fix the root cause rather than "
    "raising the timeout, and run the affected tests a few times to show that the fix holds.",
    "Please add a --dry-run flag to the deploy command. It should print every step it would take, including "
    "the resolved image tags and the target cluster, without touching anything. Keep the existing flags "
    "working, update the help text and add a test that checks nothing is executed in dry-run mode.",
    "Our API returns 500 when the request body has a trailing comma in the JSON. It should answer 400 with "
    "a clear message naming the position of the error. Find where the body is parsed, change the error "
    "handling, and add a regression test for both the malformed and the well-formed case.",
    "Refactor the config loader so that environment variables override values from the TOML file, which "
    "in turn override the built-in defaults. Document the precedence in the README and make sure the "
    "existing tests still pass; add new tests for each level of the precedence chain.",
    "The nightly report script uses too much memory on large inputs: it reads the whole CSV into a list "
    "before aggregating. Rewrite the aggregation to stream the rows, keep the output byte-identical, and "
    "measure the peak memory before and after on the sample file in tests/data.",
)
TOOL_OUTPUT = (
    "============================= test session starts ==============================\n"
    "platform linux -- Python 3.11.9, pytest-8.3.2, pluggy-1.5.0\nrootdir: /work/project\n"
    "collected 42 items\n\ntests/test_app.py ..........                                          [ 23%]\n"
    "tests/test_cli.py ........F.....                                      [ 57%]\n"
    "tests/test_server.py ..................                                [100%]\n\n"
    "=================================== FAILURES ===================================\n"
    "_______________________________ test_dry_run ___________________________________\n"
    "    def test_dry_run(tmp_path):\n>       assert run(['deploy', '--dry-run']) == 0\nE       assert 2 == 0\n"
)


@dataclass
class Stats:
    events: int = 0
    bytes: int = 0
    scenarios: int = 0
    sessions: int = 0
    forks: int = 0
    spawns: int = 0
    calls: int = 0
    files: dict[str, dict[str, Any]] = field(default_factory=dict)


class Session:
    """One session's logical events: contiguous seq from 0, a monotonic clock."""

    def __init__(self, sid: str, created_at: int, seed: list[dict[str, Any]]) -> None:
        self.id = sid
        self.now = created_at
        self.events: list[dict[str, Any]] = list(seed)  # seed rows are shared, never mutated
        self.calls = 0  # model calls this session made itself
        self.header_sent = False

    def emit(self, type_: str, data: dict[str, Any], after: int = 0) -> int:
        self.now += after
        seq = len(self.events)
        self.events.append({"type": type_, "seq": seq, "time": self.now, "data": data})
        return seq


class TreeWriter:
    def __init__(self, rng: random.Random, name: str) -> None:
        self.rng = rng
        self.name = name
        self.files: dict[str, bytes] = {}
        self.meta: dict[str, dict[str, Any]] = {}
        self.next_file = 1
        self.logical = 0

    # -- text -------------------------------------------------------------------------------

    def words(self, n: int) -> list[str]:
        rng = self.rng
        start = rng.randrange(len(WORDS))
        out = [(" " if i else "") + WORDS[(start + i) % len(WORDS)] for i in range(n)]
        if rng.random() < 0.3 and n > 3:  # sub-word fragments, as real tokenizers split
            k = rng.randrange(1, n)
            w = out[k]
            if len(w) > 4:
                out[k:k + 1] = [w[:3], w[3:]]
        return out

    def uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    # -- sessions ---------------------------------------------------------------------------

    def session(self, file: str, *, kind: str, parent: Session | None, seed: list[dict[str, Any]],
                first_turn: int, turns: int, depth: int, created_at: int) -> Session:
        me = Session(self.uid(), created_at, seed)
        if kind == "fork":
            me.emit("session/end-seed", {}, after=1)
        if kind == "primary":
            me.emit("approval/policy", {"policy": "never", "source": "config"})
        for number in range(first_turn, first_turn + turns):
            task = None if kind == "primary" or number > first_turn else self.rng.choice(USER_ASKS)[:180]
            self.turn(me, number, depth, task)
        header = SessionHeader(
            id=me.id, created_at=created_at, cwd="/work/project",
            parent_session=parent.id if parent is not None else None,
            is_seeded=kind == "fork", inherited=InheritedEventCount(len(seed)),
            extra={"origin": "subagent", "delegationDepth": depth} if parent is not None else {})
        roll = self.rng.random()
        layout = "packed" if roll < 0.5 else ("unpacked" if roll < 0.9 else "projected")
        self.files[file] = encode_log(header, me.events, pack=layout != "unpacked", projected=layout == "projected")
        self.meta[file] = {"kind": kind, "seedLength": len(seed), "calls": me.calls, "layout": layout,
                           "events": len(me.events)}
        self.logical += len(me.events)
        return me

    def turn(self, me: Session, number: int, depth: int, task: str | None) -> None:
        rng = self.rng
        turn_starts_at = len(me.events)
        me.emit("turn/start", {"turn": number, "trigger": {"kind": "message", "source": {"kind": "user"}}},
                after=1200)
        text = task or rng.choice(USER_ASKS)
        me.emit("user/message", {"content": [{"type": "text", "text": text}], "source": {"kind": "user"},
                                 "role": "user", "id": self.uid()}, after=1)
        steps = rng.randint(2, 5)
        for step in range(1, steps + 1):
            me.emit("step/start", {"turn": number, "step": step}, after=1)
            if not me.header_sent:
                me.header_sent = True
                me.emit("request/header", {"header": {"config": MODEL, "system": "{{system}}", "tools": "{{tools}}"},
                                           "reason": "initial"})
            me.emit("request/context", dict(MODEL))
            final = step == steps
            if rng.random() < 0.05:  # a provider retry inside this step: a failed attempt first
                self.failed_call(me, number, step)
            blocks = self.call(me, number, step, final)
            if not final:
                self.run_tools(me, number, step, blocks, turn_starts_at, depth)
            me.emit("step/end", {"turn": number, "step": step})
        me.emit("turn/end", {"turn": number, "reason": {"kind": "completed"}})

    def failed_call(self, me: Session, turn: int, step: int) -> None:
        me.calls += 1
        me.now += 700
        me.emit("assistant/chunk", {"turn": turn, "step": step,
                                    "chunk": {"type": "block-start", "index": 0, "blockType": "text"}})
        me.emit("assistant/chunk", {"turn": turn, "step": step, "chunk": {"type": "finish", "reason": {
            "kind": "error", "failure": {"message": "upstream overloaded (HTTP 503)", "code": "SERVER"}}}}, after=3)
        me.now += 500

    def call(self, me: Session, turn: int, step: int, final: bool) -> list[dict[str, Any]]:
        """One streamed model call; returns its assembled blocks."""
        rng = self.rng
        me.calls += 1
        me.now += 600 + rng.randrange(300)
        first_seq = len(me.events)
        blocks: list[dict[str, Any]] = []
        reasoning = self.words(rng.randint(10, 40))
        plan: list[tuple[str, list[str], dict[str, Any]]] = [("reasoning", reasoning, {"text": "".join(reasoning)})]
        if final:
            answer = self.words(rng.randint(20, 80))
            plan.append(("text", answer, {"text": "".join(answer)}))
        else:
            for _ in range(1 if rng.random() < 0.8 else 2):
                name, args = self.tool_args(depth_ok=True)
                arguments = json.dumps(args)
                cut = sorted(rng.sample(range(1, len(arguments)), min(len(arguments) - 1, rng.randint(4, 16))))
                parts = ["", *(arguments[a:b] for a, b in zip([0, *cut], [*cut, len(arguments)], strict=True))]
                plan.append(("tool-call", parts, {"id": f"call_00_{rng.getrandbits(96):024x}", "name": name,
                                                  "arguments": arguments}))
        for index, (kind, parts, info) in enumerate(plan):
            me.emit("assistant/chunk", {"turn": turn, "step": step,
                                        "chunk": {"type": "block-start", "index": index, "blockType": kind}},
                    after=1 if index else 0)
            for k, part in enumerate(parts):
                if kind == "tool-call":
                    chunk = {"type": "tool-call-delta", "index": index, "id": info["id"], "name": info["name"],
                             "argumentsDelta": part}
                else:
                    chunk = {"type": f"{kind}-delta", "index": index, "text": part}
                me.emit("assistant/chunk", {"turn": turn, "step": step, "chunk": chunk}, after=(k * 7) % 27)
            blocks.append({"type": kind, **info})
        for index, block in enumerate(blocks):
            me.emit("assistant/chunk", {"turn": turn, "step": step,
                                        "chunk": {"type": "block-end", "index": index, "block": block}})
        out_tokens = sum(len(p) for _, p, _ in plan)
        usage = {"inputTokens": 2000 + rng.randrange(30000), "outputTokens": out_tokens,
                 "cacheReadTokens": rng.randrange(20000), "reasoningTokens": len(reasoning)}
        me.emit("assistant/chunk", {"turn": turn, "step": step, "chunk": {"type": "usage", "usage": usage}})
        reason = "stop" if final else "tool-calls"
        me.emit("assistant/chunk", {"turn": turn, "step": step,
                                    "chunk": {"type": "finish", "reason": {"kind": reason}}})
        me.emit("assistant/message", {
            "turn": turn, "step": step,
            "message": {"role": "assistant", "content": blocks, "id": self.uid(),
                        "source": {"kind": "model", **MODEL}},
            "usage": usage, "sourceEventSeqs": list(range(first_seq, len(me.events))),
        }, after=2)
        return blocks

    def tool_args(self, depth_ok: bool) -> tuple[str, dict[str, Any]]:
        rng = self.rng
        name = rng.choice(TOOLS)
        if name == "bash":
            return name, {"command": rng.choice(("pytest -q tests/", "git diff --stat", "ls -la src",
                                                  "python3 -m mypy src", "rg -n 'def load' src")),
                          "description": " ".join(self.words(6)).strip()}
        if name == "edit_file":
            return name, {"path": rng.choice(PATHS), "old": "".join(self.words(8)), "new": "".join(self.words(10))}
        return name, {"path": rng.choice(PATHS)}

    def run_tools(self, me: Session, turn: int, step: int, blocks: list[dict[str, Any]], turn_starts_at: int,
                  depth: int) -> None:
        rng = self.rng
        for block in blocks:
            if block["type"] != "tool-call":
                continue
            me.emit("tool/call", {"turn": turn, "step": step, "callId": block["id"], "name": block["name"],
                                  "arguments": block["arguments"]})
            if depth < MAX_DEPTH and rng.random() < (0.12 if depth == 0 else 0.05):
                kind = "fork" if rng.random() < 0.5 else "spawn"
                file = f"session.{self.next_file}.jsonl"
                self.next_file += 1
                seed = me.events[:turn_starts_at] if kind == "fork" else []
                child = self.session(file, kind=kind, parent=me, seed=seed,
                                     first_turn=turn if kind == "fork" else 1, turns=1 if rng.random() < 0.8 else 2,
                                     depth=depth + 1, created_at=me.now + 1)
                me.now = child.now + 2
                result = "subagent finished: " + "".join(self.words(30))
            else:
                me.now += 38
                result = TOOL_OUTPUT[: rng.randrange(200, len(TOOL_OUTPUT))]
            me.emit("tool/result", {"turn": turn, "step": step, "callId": block["id"],
                                    "content": [{"type": "text", "text": result}], "isError": False})

    def write_tree(self) -> None:
        turns = self.rng.randint(3, 6)
        self.session("session.jsonl", kind="primary", parent=None, seed=[], first_turn=1, turns=turns, depth=0,
                     created_at=BASE_TIME)


# ---------------------------------------------------------------------------------------------


def write_suite(out: Path, events: int, seed: int = 0) -> dict[str, Any]:
    """Write trees into `out` until the suite has >= `events` logical events; returns the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    stats = Stats()
    index = 0
    while stats.events < events:
        name = f"tree-{index:05d}"
        tree = TreeWriter(rng, name)
        tree.write_tree()
        folder = out / name
        folder.mkdir(exist_ok=True)
        for file, content in tree.files.items():
            (folder / file).write_bytes(content)
            stats.bytes += len(content)
        stats.events += tree.logical
        stats.scenarios += 1
        stats.sessions += len(tree.files)
        stats.forks += sum(1 for m in tree.meta.values() if m["kind"] == "fork")
        stats.spawns += sum(1 for m in tree.meta.values() if m["kind"] == "spawn")
        stats.calls += sum(m["calls"] for m in tree.meta.values())
        stats.files[name] = tree.meta
        index += 1
    manifest = {"events": stats.events, "bytes": stats.bytes, "scenarios": stats.scenarios,
                "sessions": stats.sessions, "forks": stats.forks, "spawns": stats.spawns, "calls": stats.calls,
                "seed": seed, "scenario_files": stats.files}
    (out / "synthetic.json").write_bytes(_encode(manifest))
    return manifest


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--events", type=int, required=True, help="minimum total logical events")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    manifest = write_suite(args.out, args.events, args.seed)
    summary = {k: v for k, v in manifest.items() if k != "scenario_files"}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
