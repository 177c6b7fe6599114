"""Divergence: the first place a live request differs from what was recorded before its call.

Each recorded call keeps its recorded inputs (`inputs.Input`: the user messages and tool results
the agent sent since its previous call). A live request's new inputs are its user and tool
messages after its last assistant message, in the neutral form conversation routing uses. The two
are compared in order after masking volatile spans (`--ignore-input REGEX`: a timestamp, a temp
path) on both sides and putting the run's `cwd` for `{{cwd}}` in the recorded side. A served entry
that calls a tool the request does not offer is a divergence too. A report names the session, the
call, which input, what was expected and what came, and a short diff.

A call recorded with no inputs of its own (a provider retry inside one step, a compaction call)
is not compared: its request repeats or replaces the previous one, which the recording does not
hold.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mockllm.inputs import Input
from mockllm.templates import CWD
from mockllm.wire.dialect import Message

SHOWN = 160  # characters of expected/got a report shows
MASK = "<ignored>"


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where one call's request differs from the recording."""

    kind: str  # "input" (an input differs), "tool" (a tool not offered), "binding" (no script's first inputs match)
    file: str  # the recorded session file
    live_id: str
    call: int  # 0-based
    what: str  # which input: "the last user message", "the tool result for call_abc", "the tool 'grep'"
    expected: str
    got: str
    diff: str

    def message(self, run: str) -> str:
        return (f"run {run}: session {self.file} (live id {self.live_id}) call {self.call + 1} diverged from the "
                f"recording at {self.what}: expected {self.expected!r}, got {self.got!r}"
                + (f"; diff: {self.diff}" if self.diff else ""))

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "session": self.file, "live_id": self.live_id, "call": self.call,
                "what": self.what, "expected": self.expected, "got": self.got, "diff": self.diff}


def live_inputs(tail: Iterable[Message]) -> list[Input]:
    """A request's new inputs: its user and tool messages after its last assistant message."""
    out = []
    for message in tail:
        if message.role == "user":
            out.append(Input("user", message.text))
        elif message.role == "tool":
            out.append(Input("tool", message.text, message.tool_call_id))
    return out


def masked(text: str, masks: Sequence[re.Pattern[str]]) -> str:
    for mask in masks:
        text = mask.sub(MASK, text)
    return text


def compare_inputs(recorded: Sequence[Input], live: Sequence[Input], *, masks: Sequence[re.Pattern[str]] = (),
                   cwd: str | None = None) -> tuple[str, str, str, str] | None:
    """(what, expected, got, diff) of the first input that differs, or None when they agree."""
    for number in range(max(len(recorded), len(live))):
        want = recorded[number] if number < len(recorded) else None
        have = live[number] if number < len(live) else None
        if want is not None and have is not None and _same(want, have, masks, cwd):
            continue
        what = _name(recorded, live, number)
        if want is not None:
            want = want._replace(text=_recorded_text(want, cwd))
        expected = _shown(want) if want is not None else "(nothing more)"
        got = _shown(have) if have is not None else "(nothing more)"
        diff = ""
        if want is not None and have is not None:
            diff = short_diff(want.text, have.text)
        return what, expected, got, diff
    return None


def _same(want: Input, have: Input, masks: Sequence[re.Pattern[str]], cwd: str | None) -> bool:
    if want.role != have.role or (want.role == "tool" and want.tool_call_id != have.tool_call_id):
        return False
    return masked(_recorded_text(want, cwd), masks) == masked(have.text, masks)


def _recorded_text(want: Input, cwd: str | None) -> str:
    return want.text.replace(CWD, cwd) if cwd is not None else want.text


def _name(recorded: Sequence[Input], live: Sequence[Input], number: int) -> str:
    """How a report names input `number`: by what was recorded there, else by what came."""
    inputs = recorded if number < len(recorded) else live
    item = inputs[number]
    if item.role == "tool":
        return item.describe()
    users = [n for n, i in enumerate(inputs) if i.role == "user"]
    if users and number == users[-1]:
        return "the last user message"
    return f"user message {users.index(number) + 1} of {len(users)}" if number in users else f"input {number + 1}"


def _shown(item: Input) -> str:
    text = " ".join(item.text.split())
    text = text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"
    return f"tool result for {item.tool_call_id}: {text}" if item.role == "tool" else text


_TOKEN = re.compile(r"\s+|\w+|[^\w\s]")


def short_diff(expected: str, got: str, context: int = 20, limit: int = 3) -> str:
    """The first few changed spans, word by word, with a little context before each:
    `…the codeword is [-SAFFRON][+TEAL]…`."""
    want, have = _TOKEN.findall(expected), _TOKEN.findall(got)
    matcher = difflib.SequenceMatcher(None, want, have, autojunk=False)
    parts = []
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            continue
        before = "".join(want[:a0])[-context:]
        removed = f"[-{''.join(want[a0:a1])}]" if a1 > a0 else ""
        added = f"[+{''.join(have[b0:b1])}]" if b1 > b0 else ""
        parts.append(f"…{before}{removed}{added}…")
        if len(parts) == limit:
            break
    return " ".join(parts)


def tool_not_offered(called: Sequence[str], offered: frozenset[str] | None) -> str | None:
    """The first tool the entry calls that the request does not offer (when it sends `tools`)."""
    if offered is None:
        return None
    return next((name for name in called if name not in offered), None)
