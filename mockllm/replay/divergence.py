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

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from mockllm.script.inputs import Input
from mockllm.script.templates import CWD
from mockllm.wire.request import Message

SHOWN = 160  # characters of expected/got a report shows
MASK = "<ignored>"


class Divergence(NamedTuple):
    """Where one call's request differs from the recording (a named tuple: one may be made per request)."""

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


def first_mismatch(recorded: Sequence[Input], live: Sequence[Input], *, masks: Sequence[re.Pattern[str]] = (),
                   cwd: str | None = None) -> int | None:
    """The index of the first input that differs, or None when they agree (the cheap check that
    runs on every request; `describe_mismatch` says how, when a report needs it)."""
    for number in range(max(len(recorded), len(live))):
        if number >= len(recorded) or number >= len(live) or not _same(recorded[number], live[number], masks, cwd):
            return number
    return None


def describe_mismatch(recorded: Sequence[Input], live: Sequence[Input], number: int,
                      cwd: str | None = None) -> tuple[str, str, str, str]:
    """(which input, expected, got, diff) for the mismatch at `number`."""
    want = recorded[number] if number < len(recorded) else None
    have = live[number] if number < len(live) else None
    if want is not None:
        want = want._replace(text=_recorded_text(want, cwd))
    expected = _shown(want) if want is not None else "(nothing more)"
    got = _shown(have) if have is not None else "(nothing more)"
    diff = short_diff(want.text, have.text) if want is not None and have is not None else ""
    return input_name(recorded, live, number), expected, got, diff


def compare_inputs(recorded: Sequence[Input], live: Sequence[Input], *, masks: Sequence[re.Pattern[str]] = (),
                   cwd: str | None = None) -> tuple[str, str, str, str] | None:
    """(what, expected, got, diff) of the first input that differs, or None when they agree."""
    number = first_mismatch(recorded, live, masks=masks, cwd=cwd)
    return None if number is None else describe_mismatch(recorded, live, number, cwd)


def _same(want: Input, have: Input, masks: Sequence[re.Pattern[str]], cwd: str | None) -> bool:
    if want.role != have.role or (want.role == "tool" and want.tool_call_id != have.tool_call_id):
        return False
    return masked(_recorded_text(want, cwd), masks) == masked(have.text, masks)


def _recorded_text(want: Input, cwd: str | None) -> str:
    return want.text.replace(CWD, cwd) if cwd is not None else want.text


def input_name(recorded: Sequence[Input], live: Sequence[Input], number: int) -> str:
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


def short_diff(expected: str, got: str, context: int = 24, shown: int = 60) -> str:
    """The changed span, with a little context before it: `…the codeword is [-SAFFRON][+TEAL]…`.

    One span, from the first character that differs to the last, widened to whole words: linear
    in the texts' length (a request's text can be long, and each new session's first divergence
    is reported), where a full diff is quadratic.
    """
    if expected == got:
        return ""
    limit = min(len(expected), len(got))
    start = _common(lambda k: expected[:k] == got[:k], limit)
    # The common suffix, not overlapping the prefix.
    end = _common(lambda k: expected[len(expected) - k:] == got[len(got) - k:], limit - start)
    while start > 0 and expected[start - 1].isalnum():  # back to a word's start
        start -= 1
    while end > 0 and expected[len(expected) - end].isalnum():  # forward to a word's end
        end -= 1
    removed, added = expected[start:len(expected) - end], got[start:len(got) - end]
    before = expected[max(0, start - context):start]
    return (f"…{before}" + (f"[-{_cut(removed, shown)}]" if removed else "")
            + (f"[+{_cut(added, shown)}]" if added else "") + "…")


def _common(agrees: Callable[[int], bool], limit: int) -> int:
    """The largest k <= limit for which `agrees(k)` (true up to some k, false after): a binary
    search of slice comparisons, which run in C, instead of a Python loop per character."""
    low, high = 0, limit
    while low < high:
        middle = (low + high + 1) // 2
        if agrees(middle):
            low = middle
        else:
            high = middle - 1
    return low


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def tool_not_offered(called: Sequence[str], offered: frozenset[str] | None) -> str | None:
    """The first tool the entry calls that the request does not offer (when it sends `tools`)."""
    if offered is None:
        return None
    return next((name for name in called if name not in offered), None)
