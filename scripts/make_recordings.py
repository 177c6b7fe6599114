#!/usr/bin/env python3
"""Write mockllm's own recordings (dsh v0 session trees) from a compact description.

    python3 scripts/make_recordings.py [OUT_DIR]        (default: recordings/ of this project)

Output is deterministic: fixed session ids (uuid5 of scenario and file), fixed call ids (a hash of
their position), times from a fixed clock starting at BASE_TIME. Re-running writes identical bytes.

The description format
----------------------
`SCENARIOS` is a list of `Scenario`s; each becomes the folder OUT_DIR/<name>/.

Scenario(name, about, turns, layout="unpacked", sidecar=None)
    turns    the primary session's turns (`session.jsonl`).
    layout   "unpacked": one event per line, with seq/time;
             "packed":   runs of >= 3 consecutive same-block deltas stored as one
                         text-chunks / reasoning-chunks / tool-call-chunks row (seq0, time0, dt);
             "projected": packed, and no seq/time/seq0/time0 on any row (the newest layout).
    sidecar  JSON written as replay.override.json: an array of entries, or {"patches": [...]}.

turn(user, *steps, end=COMPLETED)
    A turn opened by the user message `user`. Each step is one `call(...)`, or a list of calls made
    in the same step (a provider retry: the first attempts end with an error finish), or [] (the
    step's model call streamed nothing). `end` is the turn/end reason.

call(*blocks, usage=None, finish=AUTO)
    One recorded model call: its blocks in block-index order. `usage` is
    (inputTokens, outputTokens, cacheReadTokens, reasoningTokens), None members omitted; default
    derived from the fragments. `finish`: "stop" | "tool-calls" | "max-tokens" | error(message, code)
    | None (cut off mid-stream: no block-end, usage or finish, as a cancelled call is recorded).
    AUTO means "tool-calls" when the call has a tool block, else "stop".

Blocks
    think(*parts), say(*parts)   a reasoning / text block streamed as deltas. One string is split
                                 into word fragments ("Hello there" -> "Hello", " there"); several
                                 strings are the fragments exactly as given ("SAFF", "RON").
    say_whole(text)              a text block recorded with no deltas (block-start/block-end only).
    tool(name, args, result=None, child=None)
                                 a tool call; `args` (a dict) is JSON-encoded and streamed in
                                 fragments, the first one empty (as DeepSeek streams). `result` is
                                 the tool/result text; with a child it defaults to the child's last answer.

Children (subagent sessions, any depth), started by the tool call that holds them:
    spawn(file, *turns, layout="unpacked")   a fresh session; its turns are numbered from 1.
    fork(file, *turns, layout="unpacked")    its log starts with a copy of the parent's events
        before the current turn (the seed, the parent's assistant/chunk events included), then
        `session/end-seed`; header `seedLength` = the number of LOGICAL seed events (packed rows
        expanded, end-seed not counted); its own turns continue the parent's turn numbering.
    A child is created 1 ms after its tool/call; the parent's tool/result comes after the child's
    last event. `file` is given explicitly, so file numbers need not follow creation order.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The project's package, from this checkout (the script also runs without an install).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mockllm.dsh import writer
from mockllm.dsh.header import InheritedEventCount, SessionHeader

BASE_TIME = 1_790_000_000_000  # epoch ms of every primary's createdAt
CWD = "/tmp/mockllm-demo"
MODEL = {"provider": "deepseek-official", "model": "deepseek-v4-flash"}
ID_NAMESPACE = uuid.UUID("6f1d3c2e-9a4b-4c1d-8e7f-2a3b4c5d6e7f")

LAYOUTS = ("unpacked", "packed", "projected")
DELTA_GAPS = (0, 1, 0, 24, 0, 0, 26, 1, 0, 25)  # ms between consecutive deltas, cycled
TOOL_MS = 38  # how long an ordinary tool takes
NEXT_TURN_MS = 1200  # the user reading and typing between turns
RETRY_BACKOFF_MS = 500

COMPLETED: dict[str, Any] = {"kind": "completed"}
CANCELLED: dict[str, Any] = {"kind": "aborted", "reason": "session/cancel"}
AUTO = "auto"
DELTA_TYPE = {"reasoning": "reasoning-delta", "text": "text-delta", "tool-call": "tool-call-delta"}


# ---------------------------------------------------------------------------------------------
# The description model


@dataclass(frozen=True)
class Block:
    type: str  # reasoning | text | tool-call
    parts: tuple[str, ...]  # the recorded deltas; () = recorded with no deltas
    whole: str  # assembled text, or the tool call's JSON arguments
    name: str | None = None
    result: str | None = None
    child: Child | None = None


@dataclass(frozen=True)
class Call:
    blocks: tuple[Block, ...]
    usage: tuple[int | None, int | None, int | None, int | None]
    finish: str | dict[str, Any] | None

    @property
    def completed(self) -> bool:
        """Ended normally: dsh records the assembled assistant/message (and runs its tools)."""
        return isinstance(self.finish, str)

    @property
    def tools(self) -> list[tuple[int, Block]]:
        return [(i, b) for i, b in enumerate(self.blocks) if b.type == "tool-call"]


@dataclass(frozen=True)
class Turn:
    user: str
    steps: tuple[tuple[Call, ...], ...]
    end: dict[str, Any] = field(default_factory=lambda: COMPLETED)


@dataclass(frozen=True)
class Child:
    file: str
    kind: str  # spawn | fork
    turns: tuple[Turn, ...]
    layout: str = "unpacked"


@dataclass(frozen=True)
class Scenario:
    name: str
    about: str
    turns: tuple[Turn, ...]
    layout: str = "unpacked"
    sidecar: list[Any] | dict[str, Any] | None = None


def fragments(parts: tuple[str, ...]) -> tuple[str, ...]:
    """One string: split into word-sized fragments; several: the fragments as given."""
    if len(parts) != 1:
        return parts
    pieces = tuple(re.findall(r"\s*[\w']+|\s*[^\w\s]+|\s+", parts[0]))
    assert "".join(pieces) == parts[0]
    return pieces


def think(*parts: str) -> Block:
    pieces = fragments(parts)
    return Block("reasoning", pieces, "".join(pieces))


def say(*parts: str) -> Block:
    pieces = fragments(parts)
    return Block("text", pieces, "".join(pieces))


def say_whole(text: str) -> Block:
    return Block("text", (), text)


def tool(name: str, args: dict[str, Any], result: str | None = None, child: Child | None = None) -> Block:
    arguments = json.dumps(args, ensure_ascii=False)
    if result is None:
        if child is None:
            raise ValueError(f"tool {name}: give its result (or a child whose answer is the result)")
        result = last_answer(child.turns)
    return Block("tool-call", ("", *fragments((arguments,))), arguments, name, result, child)


def call(*blocks: Block, usage: tuple[int | None, ...] | None = None,
         finish: str | dict[str, Any] | None = AUTO) -> Call:
    if finish == AUTO:
        finish = "tool-calls" if any(b.type == "tool-call" for b in blocks) else "stop"
    if usage is None:
        reasoning = sum(len(b.parts) for b in blocks if b.type == "reasoning")
        usage = (96, max(1, sum(len(b.parts) for b in blocks)), None, reasoning or None)
    inp, out, cache, reasoning = usage
    return Call(blocks, (inp, out, cache, reasoning), finish)


def error(message: str, code: str) -> dict[str, Any]:
    """An error finish reason, in the newer fixtures' shape."""
    return {"kind": "error", "failure": {"message": message, "code": code}}


def turn(user: str, *steps: Call | list[Call], end: dict[str, Any] = COMPLETED) -> Turn:
    return Turn(user, tuple((s,) if isinstance(s, Call) else tuple(s) for s in steps), end)


def spawn(file: str, *turns: Turn, layout: str = "unpacked") -> Child:
    return Child(file, "spawn", turns, layout)


def fork(file: str, *turns: Turn, layout: str = "unpacked") -> Child:
    return Child(file, "fork", turns, layout)


def last_answer(turns: tuple[Turn, ...]) -> str:
    """The text of the last text block of the last completed call: what a subagent returns."""
    for t in reversed(turns):
        for attempts in reversed(t.steps):
            for c in reversed(attempts):
                texts = [b.whole for b in c.blocks if b.type == "text"]
                if c.completed and texts:
                    return texts[-1]
    raise ValueError("the child never answers")


def children(turns: tuple[Turn, ...]) -> Iterator[Child]:
    """Every child started from these turns, depth-first in the order they are started."""
    for t in turns:
        for attempts in t.steps:
            for c in attempts:
                for b in c.blocks:
                    if b.child is not None:
                        yield b.child
                        yield from children(b.child.turns)


# ---------------------------------------------------------------------------------------------
# The scenarios

SPAWN_TASK = "Reply with exactly the word ALPHA and nothing else."
FORK_TASK = "What is the secret codeword mentioned earlier in this conversation? Reply with exactly that word."
MIXED_FORK_TASK = "Which project codeword did the user give earlier? Reply with that one word only."
MIXED_SPAWN_TASK = "Reply with exactly the word BRAVO and nothing else."
PACKED_FORK_TASK = "Recall the vault codeword from earlier in this conversation and reply with it alone."

SCENARIOS: list[Scenario] = [
    Scenario(
        "text-turn", "one turn, one plain text answer",
        (turn("Greet the replay server in one short sentence.",
              call(say("Hello from the recorded model!"), usage=(41, 7, 0, None))),),
    ),
    Scenario(
        "reasoning-text", "a reasoning block, then the text answer",
        (turn("What is 17 times 3? Answer with the number only.",
              call(think("Seventeen times three: 17 * 3 = 51."), say("51"), usage=(38, 14, 0, 12))),),
    ),
    Scenario(
        "tool-loop", "two turns of tool call -> result -> next step -> final text, two tools in one step",
        (
            turn("Count the Python files under src/ with bash, then read the first one.",
                 call(think("I should list the Python files first."),
                      tool("bash", {"command": "ls src/*.py"}, result="src/app.py\nsrc/util.py\n")),
                 call(think("Two files. Count them and read the first."),
                      tool("bash", {"command": "ls src/*.py | wc -l"}, result="2\n"),
                      tool("read_file", {"path": "src/app.py"}, result="print('hi')\n")),
                 call(say("There are 2 Python files; src/app.py prints hi."))),
            turn("Now run src/app.py and tell me what it prints.",
                 call(tool("bash", {"command": "python3 src/app.py"}, result="hi\n")),
                 call(think("It printed hi."), say("It prints: hi"))),
        ),
    ),
    Scenario(
        "spawn-child", "the primary spawns a fresh child (no seed) that answers ALPHA",
        (turn("Delegate to a fresh subagent that replies ALPHA, then reply with PARENT_DONE.",
              call(think("I will spawn a fresh child for that."),
                   tool("subagent", {"description": "Say ALPHA", "prompt": SPAWN_TASK},
                        child=spawn("session.1.jsonl",
                                    turn(SPAWN_TASK, call(think("Just reply ALPHA."), say("AL", "P", "HA")))))),
              call(say("PARENT", "_DONE"))),),
    ),
    Scenario(
        "fork-child", "a fork child whose seed holds the parent's chunks (OK); its own answer is TANGERINE",
        (
            turn("Remember this for later: the secret codeword is TANGERINE. Reply with the single word OK.",
                 call(think("The user wants me to remember the codeword TANGERINE and reply OK."), say("OK"))),
            turn("Use subagent_fork once to ask a forked child for the codeword, then reply PARENT_DONE.",
                 call(think("A forked child inherits this conversation, so it knows the codeword."),
                      tool("subagent_fork", {"description": "Recall codeword", "prompt": FORK_TASK},
                           child=fork("session.1.jsonl",
                                      turn(FORK_TASK, call(think("The codeword given earlier is TANGERINE."),
                                                           say("TANG", "ER", "INE")))))),
                 call(think("The child answered TANGERINE."), say("PARENT", "_DONE"))),
        ),
    ),
    Scenario(
        "mixed-tree",
        "primary + a fork child (session.2, created first) + a spawn child (session.1, created later)",
        (
            turn("Remember this fact: the project codeword is CINNAMON. Reply with the single word OK.",
                 call(think("Remember CINNAMON; reply OK."), say("OK"))),
            turn("Fork a child that recalls the codeword, then spawn a fresh child that says BRAVO, "
                 "then reply PARENT_DONE.",
                 call(think("First the fork."),
                      tool("subagent_fork", {"description": "Recall codeword", "prompt": MIXED_FORK_TASK},
                           child=fork("session.2.jsonl",
                                      turn(MIXED_FORK_TASK, call(think("It was CINNAMON."),
                                                                 say("CINN", "AM", "ON")))))),
                 call(think("Now the fresh child."),
                      tool("subagent", {"description": "Say BRAVO", "prompt": MIXED_SPAWN_TASK},
                           child=spawn("session.1.jsonl", turn(MIXED_SPAWN_TASK, call(say("BRA", "VO")))))),
                 call(think("Both children returned."), say("PARENT", "_DONE"))),
        ),
    ),
    Scenario(
        "throw-sidecar", "turn 2's call failed with a rate limit; a patch appends a throw entry (429)",
        (
            turn("Ping the model once before the rate limit hits.", call(say("PONG"))),
            turn("Ping again: this call was rate limited.", [],
                 end={"kind": "error", "step": 1, "message": "simulated rate limit (HTTP 429)",
                      "code": "RATE_LIMIT"}),
        ),
        sidecar={"patches": [{"at": 1, "entry": {"kind": "throw", "chunks": [],
                                                 "message": "simulated rate limit (HTTP 429)",
                                                 "code": "RATE_LIMIT", "status": 429}}]},
    ),
    Scenario(
        "hang-sidecar", "turn 2's call was cancelled mid-stream (no finish); a patch swaps it for a hang",
        (
            turn("Warm up with a one-word answer before the long task.", call(say("READY"))),
            turn("Start the long task; this turn is cancelled mid-stream.", call(say("partial"), finish=None),
                 end=CANCELLED),
        ),
        sidecar={"patches": [{"at": 1, "entry": {"kind": "hang"}}]},
    ),
    Scenario(
        "packed-turn", "packed rows: reasoning-chunks, tool-call-chunks, text-chunks",
        (turn("Use bash to print PACKED_OK, then reply with the word FINISHED.",
              call(think("The user wants me to run echo PACKED_OK and then answer."),
                   tool("bash", {"command": "echo PACKED_OK", "description": "Print the marker"},
                        result="PACKED_OK\n")),
              call(think("The command printed PACKED_OK."), say("FIN", "ISH", "ED"))),),
        layout="packed",
    ),
    Scenario(
        "packed-fork", "packed primary and packed fork child: seedLength counts logical events, not lines",
        (
            turn("Keep this in mind: the vault codeword is JUNIPER. Answer OK only.",
                 call(think("The user wants me to keep the vault codeword JUNIPER in mind and answer OK."),
                      say("OK"))),
            turn("Fork a child to recall the vault codeword, then reply PARENT_DONE.",
                 call(think("A forked child can recall it from the conversation."),
                      tool("subagent_fork", {"description": "Recall vault codeword", "prompt": PACKED_FORK_TASK},
                           child=fork("session.1.jsonl",
                                      turn(PACKED_FORK_TASK,
                                           call(think("The vault codeword from earlier is JUNIPER."),
                                                say("JUN", "IP", "ER"))),
                                      layout="packed"))),
                 call(think("The fork answered JUNIPER, so I reply PARENT_DONE."), say("PARENT", "_DONE"))),
        ),
        layout="packed",
    ),
    Scenario(
        "projected-turn", "projected rows (no seq/time), packed where runs are long enough",
        (turn("Run the test suite with bash and report PASS or FAIL.",
              call(think("I will run pytest quietly and read the summary line."),
                   tool("bash", {"command": "pytest -q"}, result="3 passed in 0.12s\n")),
              call(think("All three tests passed."), say("PA", "SS"))),),
        layout="projected",
    ),
    Scenario(
        "retry-step", "one step, two calls: the first ends with an error finish (SERVER), the retry stops",
        (turn("Summarise today's release in three words.",
              [call(say("Faster", " builds"), finish=error("upstream overloaded (HTTP 500)", "SERVER")),
               call(think("Three words about the release."), say("Faster, safer builds."))]),),
    ),
    Scenario(
        "empty-block", "a text block recorded with no deltas (only block-start and block-end)",
        (turn("Reply with the canned greeting; it arrives as one whole block.",
              call(think("Use the canned greeting."), say_whole("Hello from a block with no deltas."))),),
    ),
]


# ---------------------------------------------------------------------------------------------
# Rendering the description into logical events


class Log:
    """One session's logical events, stamped with contiguous seq and a monotonic clock."""

    def __init__(self, created_at: int, seed: list[dict[str, Any]]) -> None:
        self.now = created_at
        self.events: list[dict[str, Any]] = [dict(e) for e in seed]

    def emit(self, type_: str, data: dict[str, Any], after: int = 0) -> None:
        self.now += after
        self.events.append({"type": type_, "seq": len(self.events), "time": self.now, "data": data})

    def chunk(self, turn_no: int, step_no: int, chunk: dict[str, Any], after: int = 0) -> None:
        self.emit("assistant/chunk", {"turn": turn_no, "step": step_no, "chunk": chunk}, after)


@dataclass
class Session:
    """Rendering state of one session."""

    scenario: str
    file: str
    id: str
    log: Log
    primary: bool
    seeded: bool
    header_sent: bool = False


class TreeWriter:
    """Renders one scenario's session tree into {file name: bytes}."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.files: dict[str, bytes] = {}
        self.calls_made = 0  # varies the model's first-token latency a little

    def write(self) -> dict[str, bytes]:
        sc = self.scenario
        self.session("session.jsonl", sc.turns, BASE_TIME, sc.layout)
        if sc.sidecar is not None:
            self.files["replay.override.json"] = (json.dumps(sc.sidecar, indent=2) + "\n").encode()
        return self.files

    def session(self, file: str, turns: tuple[Turn, ...], created_at: int, layout: str,
                parent: Session | None = None, seed: list[dict[str, Any]] | None = None,
                first_turn: int = 1, depth: int = 0) -> Session:
        if file in self.files:
            raise ValueError(f"{self.scenario.name}: {file} is written twice")
        me = Session(self.scenario.name, file, session_id(self.scenario.name, file),
                     Log(created_at, seed or []), parent is None, seed is not None)
        if seed is not None:
            me.log.emit("session/end-seed", {}, after=1)
        for number, t in enumerate(turns, start=first_turn):
            self.turn(me, number, t, depth)
        header = SessionHeader(
            id=me.id, created_at=created_at, cwd=CWD, parent_session=parent.id if parent is not None else None,
            is_seeded=seed is not None, inherited=InheritedEventCount(len(seed or [])),
            extra={"delegationDepth": depth} if parent is not None else {})
        self.files[file] = encode_log(header, me.log.events, layout)
        return me

    def turn(self, me: Session, number: int, t: Turn, depth: int) -> None:
        log = me.log
        turn_starts_at = len(log.events)  # a fork started in this turn inherits everything before it
        log.emit("turn/start", {"turn": number, "trigger": {"kind": "message", "source": {"kind": "user"}}},
                 after=4 if turn_starts_at == 0 or log.events[-1]["type"] == "session/end-seed" else NEXT_TURN_MS)
        log.emit("user/message", {"content": [text_part(t.user)], "source": {"kind": "user"}}, after=1)
        if me.primary and number == 1:
            log.emit("session/title", {"title": t.user[:30].rstrip(), "source": {"kind": "fallback"}})
        for step_no, attempts in enumerate(t.steps, start=1):
            log.emit("step/start", {"turn": number, "step": step_no}, after=1)
            if not me.header_sent:
                me.header_sent = True
                log.emit("request/header", {"header": {"config": MODEL, "system": "{{system}}", "tools": "{{tools}}"},
                                            "reason": "resume" if me.seeded else "initial"}, after=1)
            for attempt_no, c in enumerate(attempts):
                self.model_call(me, number, step_no, attempt_no, c)
            final = attempts[-1] if attempts else None
            if final is not None and final.completed:
                log.emit("assistant/message", {"turn": number, "step": step_no,
                                               "content": [assembled(me, number, step_no, len(attempts) - 1, i, b)
                                                           for i, b in enumerate(final.blocks)],
                                               "usage": usage_of(final)}, after=2)
                if final.finish == "tool-calls":
                    self.run_tools(me, number, step_no, len(attempts) - 1, final, log.events[:turn_starts_at],
                                   depth)
            log.emit("step/end", {"turn": number, "step": step_no})
        log.emit("turn/end", {"turn": number, "reason": t.end})

    def model_call(self, me: Session, turn_no: int, step_no: int, attempt: int, c: Call) -> None:
        """block-start (+ deltas) per block, then block-ends, usage and finish, as dsh records them."""
        log = me.log
        self.calls_made += 1
        log.now += (RETRY_BACKOFF_MS if attempt else 0) + 600 + (self.calls_made * 37) % 300
        gaps = 0
        for index, b in enumerate(c.blocks):
            log.chunk(turn_no, step_no, {"type": "block-start", "index": index, "blockType": b.type},
                      after=1 if index else 0)
            for part in b.parts:
                log.chunk(turn_no, step_no, delta(me, turn_no, step_no, attempt, index, b, part),
                          after=DELTA_GAPS[gaps % len(DELTA_GAPS)])
                gaps += 1
        if c.finish is None:
            return  # cut off mid-stream: nothing closes the call
        if isinstance(c.finish, dict):
            log.chunk(turn_no, step_no, {"type": "finish", "reason": c.finish}, after=1)
            return  # the provider failed: no assembled blocks, no usage
        for index, b in enumerate(c.blocks):
            log.chunk(turn_no, step_no, {"type": "block-end", "index": index,
                                         "block": assembled(me, turn_no, step_no, attempt, index, b)},
                      after=1 if index == 0 else 0)
        log.chunk(turn_no, step_no, {"type": "usage", "usage": usage_of(c)})
        log.chunk(turn_no, step_no, {"type": "finish", "reason": {"kind": c.finish}})

    def run_tools(self, me: Session, turn_no: int, step_no: int, attempt: int, c: Call,
                  before_turn: list[dict[str, Any]], depth: int) -> None:
        log = me.log
        for index, b in c.tools:
            cid = call_id(me, turn_no, step_no, attempt, index)
            log.emit("tool/call", {"turn": turn_no, "step": step_no, "callId": cid, "name": b.name,
                                   "arguments": b.whole})
            done = log.now + TOOL_MS
            if b.child is not None:
                child = b.child
                started = self.session(child.file, child.turns, log.now + 1, child.layout, parent=me,
                                       seed=before_turn if child.kind == "fork" else None,
                                       first_turn=turn_no if child.kind == "fork" else 1, depth=depth + 1)
                done = started.log.now + 2
            log.now = done
            log.emit("tool/result", {"turn": turn_no, "step": step_no, "callId": cid,
                                     "content": [text_part(b.result or "")], "isError": False})


def session_id(scenario: str, file: str) -> str:
    return str(uuid.uuid5(ID_NAMESPACE, f"{scenario}/{file}"))


def call_id(me: Session, turn_no: int, step_no: int, attempt: int, index: int) -> str:
    digest = hashlib.sha256(f"{me.scenario}/{me.file}/{turn_no}/{step_no}/{attempt}/{index}".encode()).hexdigest()
    return f"call_00_{digest[:24]}"


def text_part(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def delta(me: Session, turn_no: int, step_no: int, attempt: int, index: int, b: Block, part: str) -> dict[str, Any]:
    if b.type == "tool-call":
        return {"type": "tool-call-delta", "index": index, "id": call_id(me, turn_no, step_no, attempt, index),
                "name": b.name, "argumentsDelta": part}
    return {"type": DELTA_TYPE[b.type], "index": index, "text": part}


def assembled(me: Session, turn_no: int, step_no: int, attempt: int, index: int, b: Block) -> dict[str, Any]:
    if b.type == "tool-call":
        return {"type": "tool-call", "id": call_id(me, turn_no, step_no, attempt, index), "name": b.name,
                "arguments": b.whole}
    return {"type": b.type, "text": b.whole}


def usage_of(c: Call) -> dict[str, int]:
    names = ("inputTokens", "outputTokens", "cacheReadTokens", "reasoningTokens")
    return {name: value for name, value in zip(names, c.usage, strict=True) if value is not None}


# ---------------------------------------------------------------------------------------------
# Writing rows: unpacked, packed, projected (the encoding is mockllm.dsh.writer's)


def encode_log(header: SessionHeader, events: list[dict[str, Any]], layout: str) -> bytes:
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; expected one of {LAYOUTS}")
    return writer.encode_log(header, events, pack=layout != "unpacked", projected=layout == "projected")


# ---------------------------------------------------------------------------------------------
# The folder


def build_all() -> dict[str, bytes]:
    """Every generated file, keyed by its path relative to OUT_DIR."""
    names = [s.name for s in SCENARIOS]
    if len(set(names)) != len(names):
        raise ValueError("scenario names must be unique")
    out = {"README.md": readme().encode()}
    for scenario in SCENARIOS:
        for file, content in TreeWriter(scenario).write().items():
            out[f"{scenario.name}/{file}"] = content
    return out


def readme() -> str:
    lines = ["# mockllm's own recordings", "",
             "Generated by `python3 scripts/make_recordings.py`: do not edit by hand, change the description",
             "in that script and regenerate (`tests/test_recordings.py` fails when this folder is stale).", ""]
    for s in SCENARIOS:
        files = ["session.jsonl", *(c.file for c in children(s.turns))]
        lines.append(f"- `{s.name}/` ({s.layout}; {', '.join(files)}"
                     f"{', replay.override.json' if s.sidecar is not None else ''}): {s.about}")
    return "\n".join(lines) + "\n"


def write(out_dir: Path) -> list[Path]:
    files = build_all()
    written = []
    for rel, content in files.items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_bytes() != content:
            path.write_bytes(content)
            written.append(path)
    # Generated files that the description no longer produces.
    for scenario in SCENARIOS:
        for stale in sorted((out_dir / scenario.name).iterdir()):
            if f"{scenario.name}/{stale.name}" not in files and (
                    re.fullmatch(r"session(\.\d+)?\.jsonl", stale.name) or stale.name == "replay.override.json"):
                stale.unlink()
                written.append(stale)
    return written


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print(f"usage: {Path(sys.argv[0]).name} [OUT_DIR]", file=sys.stderr)
        return 2
    out_dir = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "recordings"
    changed = write(out_dir)
    print(f"{out_dir}: {len(SCENARIOS)} scenarios, {len(changed)} file(s) changed")
    for path in changed:
        print(f"  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
