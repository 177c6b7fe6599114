"""Divergence: the first place a live request differs from what was recorded before its call.

Each recorded call keeps its recorded inputs (`inputs.Input`: the user messages and tool results
the agent sent since its previous call). A live request's new inputs are its user and tool
messages after its last assistant message, in the neutral form conversation routing uses. The two
are compared (`compare`: user messages in order, tool results by the id of the call they answer)
after masking volatile spans on both sides (`normalize.py`: the run's `--ignore-input REGEX` and
the built-in UUIDs, dates, durations, temp folders) and putting the run's `cwd` for `{{cwd}}` in
the recorded side. Tool results that differ only by `<system-reminder>` blocks (a harness's own
notes, which Claude Code appends when it decides to) agree, unless the run is strict; the run
notes it. A served entry that calls a tool the request does not offer is a divergence
too. A report names the session, the call, which input, what was expected and what came, and a
short diff of the masked texts.

A call recorded with no inputs of its own (a provider retry inside one step, a compaction call)
is not compared: its request repeats or replaces the previous one, which the recording does not
hold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from mockllm.numbering import call_name
from mockllm.options import RunSettings
from mockllm.replay.normalize import REMINDER_TAG, Mask, masked, without_reminders
from mockllm.scenario.load import Scenario
from mockllm.script.inputs import Input
from mockllm.script.templates import CWD
from mockllm.wire.request import Message, Request

SHOWN = 160  # characters of expected/got a report shows


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
        return (f"run {run}: session {self.file} (live id {self.live_id}) {call_name(self.call)} diverged from "
                f"the recording at {self.what}: expected {self.expected!r}, got {self.got!r}"
                + (f"; diff: {self.diff}" if self.diff else ""))


def live_inputs(tail: Iterable[Message]) -> list[Input]:
    """A request's new inputs: its user and tool messages after its last assistant message."""
    out = []
    for message in tail:
        if message.role == "user":
            out.append(Input("user", message.text))
        elif message.role == "tool":
            out.append(Input("tool", message.text, message.tool_call_id))
    return out


class Comparison(NamedTuple):
    """How a run compares: its masks, its cwd (for `{{cwd}}` in recorded texts), and the ids of the
    tool calls the recorded model made in the session (results for other ids are framework-made)."""

    masks: tuple[Mask, ...] = ()
    cwd: str | None = None
    model_ids: frozenset[str] = frozenset()
    # Tool results agree when they differ only by `<system-reminder>` blocks (RunSettings.loose_reminders).
    loose_reminders: bool = False


def comparison(scenario: Scenario, settings: RunSettings, script: int, recorded: Sequence[Input],
               live: Sequence[Input]) -> Comparison:
    """How `settings` compare `recorded` with `live` in script `script`. The recorded model's tool-call
    ids are read only when a tool result is on either side: nothing else looks at them, and on a
    scenario's first replay they cost a walk over every chunk of the session's entries."""
    tools = any(i.role == "tool" for i in recorded) or any(i.role == "tool" for i in live)
    return Comparison(settings.masks, settings.cwd, scenario.model_ids(script) if tools else frozenset(),
                      settings.loose_reminders)


class Mismatch(NamedTuple):
    """The first input that differs: how a report names it, and the two sides (None: absent)."""

    what: str
    want: Input | None
    have: Input | None


def compare(recorded: Sequence[Input], live: Sequence[Input], how: Comparison) -> Mismatch | None:
    """The first input that differs, or None when they agree (the cheap check; `describe` says how).

    User messages are compared in order. Where a request's tool results carry no call ids (a wire
    without them: Ollama), all tool results are compared by position. Otherwise results for calls
    the recorded model made are matched by tool-call id, as a set: parallel tool calls finish in
    any order, and the replay served the recorded ids. Results for ids the model never made (a framework's own hand-back
    call, with a fresh id every run) are matched among themselves by position, ids ignored.
    """
    users = [i for i in recorded if i.role == "user"], [i for i in live if i.role == "user"]
    for number in range(max(len(users[0]), len(users[1]))):
        want = users[0][number] if number < len(users[0]) else None
        have = users[1][number] if number < len(users[1]) else None
        if want is None or have is None or not _same_text(want, have, how):
            return Mismatch(_user_name(number, len(users[0] or users[1])), want, have)
    if any(i.role == "tool" and i.tool_call_id is None for i in live):
        # The wire carries no tool-call ids (Ollama's official client sends none back): every result
        # is matched by position, in the order the recorded model called (and the agent answers).
        return _by_position([i for i in recorded if i.role == "tool"], [i for i in live if i.role == "tool"],
                            "tool result {} (no call ids on the wire)", how)
    ours = {i.tool_call_id: i for i in live if i.role == "tool" and i.tool_call_id in how.model_ids}
    for want in recorded:
        if want.role == "tool" and want.tool_call_id in how.model_ids:
            have = ours.pop(want.tool_call_id, None)
            if have is None or not _same_text(want, have, how):
                return Mismatch(want.describe(), want, have)
    for have in ours.values():  # a result for a model call the recording answered no result for
        return Mismatch(have.describe(), None, have)
    return _by_position([i for i in recorded if i.role == "tool" and i.tool_call_id not in how.model_ids],
                        [i for i in live if i.role == "tool" and i.tool_call_id not in how.model_ids],
                        "framework-made tool result {} (ids ignored)", how)


def _by_position(recorded: Sequence[Input], live: Sequence[Input], name: str, how: Comparison) -> Mismatch | None:
    """The first of two lists of tool results that differs, matched by position (`name` says which)."""
    for number in range(max(len(recorded), len(live))):
        want = recorded[number] if number < len(recorded) else None
        have = live[number] if number < len(live) else None
        if want is None or have is None or not _same_text(want, have, how):
            return Mismatch(name.format(number + 1), want, have)
    return None


def framework_results(recorded: Sequence[Input], how: Comparison) -> int:
    """How many recorded tool results answer calls the model never made (matched by position)."""
    return sum(1 for i in recorded if i.role == "tool" and i.tool_call_id not in how.model_ids)


def describe(mismatch: Mismatch, how: Comparison) -> tuple[str, str, str, str]:
    """(which input, expected, got, diff), on the masked texts: a masked span shows as its
    placeholder, so the diff points at the real difference."""
    want, have = mismatch.want, mismatch.have
    want_text = masked(_recorded_text(want, how.cwd), how.masks) if want is not None else None
    have_text = masked(have.text, how.masks) if have is not None else None
    expected = _shown(want, want_text) if want is not None and want_text is not None else "(nothing more)"
    got = _shown(have, have_text) if have is not None and have_text is not None else "(nothing more)"
    diff = short_diff(want_text, have_text) if want_text is not None and have_text is not None else ""
    return mismatch.what, expected, got, diff


def _same_text(want: Input, have: Input, how: Comparison) -> bool:
    if same_text(want.text, have.text, how):
        return True
    return (how.loose_reminders and want.role == "tool" and (REMINDER_TAG in want.text or REMINDER_TAG in have.text)
            and same_text(without_reminders(want.text), without_reminders(have.text), how))


def reminders_differ(recorded: Sequence[Input], live: Sequence[Input], how: Comparison) -> bool:
    """Whether inputs that agree loosely (`how.loose_reminders`) would differ compared exactly: a
    `<system-reminder>` block made the difference, which the run notes."""
    if not how.loose_reminders or not any(REMINDER_TAG in i.text for i in (*recorded, *live) if i.role == "tool"):
        return False
    return compare(recorded, live, how._replace(loose_reminders=False)) is not None


def same_text(recorded: str, live: str, how: Comparison) -> bool:
    """Whether a recorded text and a live one agree, masked (the run's `cwd` put for `{{cwd}}`).

    Equal texts agree without masking: nearly every call of a good replay sends what was recorded,
    and running every mask over both (the built-in normalisations are six regexes) is most of a
    comparison's cost."""
    recorded = _with_cwd(recorded, how.cwd)
    return recorded == live or masked(recorded, how.masks) == masked(live, how.masks)


def _recorded_text(want: Input, cwd: str | None) -> str:
    return _with_cwd(want.text, cwd)


def _with_cwd(text: str, cwd: str | None) -> str:
    return text.replace(CWD, cwd) if cwd is not None else text


def _user_name(number: int, count: int) -> str:
    return "the last user message" if number == count - 1 else f"user message {number + 1} of {count}"


def _shown(item: Input, text: str) -> str:
    text = " ".join(text.split())
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


class Checked(NamedTuple):
    """What comparing one request with its recorded call found: the divergence, if any; whether
    framework-made tool results were matched by position; whether a `<system-reminder>` block in a
    tool result was left out to make them agree."""

    divergence: Divergence | None
    framework: bool = False
    reminders: bool = False


def diverged(scenario: Scenario, settings: RunSettings, script: int, call: int, live_id: str, request: Request,
             describe_it: bool, tools_called: Callable[[int, int], tuple[str, ...]]) -> Checked:
    """How a request differs from what was recorded before call `call` of `script` (see `Checked`).
    `describe_it` False leaves expected, got and diff empty (only a report's first per session
    needs them). `tools_called` names the tools an entry calls (the run's catalog, which knows it
    from the entry's reading)."""
    session = scenario.sessions[script]
    inputs = session.inputs[call] if call < len(session.inputs) else None
    framework = reminders = False
    if inputs:  # a call recorded with no inputs of its own (a retry) is not compared
        recorded = inputs.items
        live = live_inputs(request.tail)
        if _verbatim(recorded, live, settings.cwd):
            # Nearly every call of a passing suite: nothing to mask, match or note, and the recorded
            # model's tool-call ids are needed only to count framework-made results.
            framework = any(i.role == "tool" for i in recorded) and framework_results(
                recorded, comparison(scenario, settings, script, recorded, live)) > 0
            return _tools_checked(session.file, script, call, live_id, request, tools_called, framework, False)
        how = comparison(scenario, settings, script, recorded, live)
        mismatch = compare(recorded, live, how)
        if mismatch is not None:
            found = describe(mismatch, how) if describe_it else (mismatch.what, "", "", "")
            return Checked(Divergence("input", session.file, live_id, call, *found))
        framework = framework_results(recorded, how) > 0
        reminders = reminders_differ(recorded, live, how)
    return _tools_checked(session.file, script, call, live_id, request, tools_called, framework, reminders)


def _verbatim(recorded: Sequence[Input], live: Sequence[Input], cwd: str | None) -> bool:
    """Whether the request sent exactly the recorded inputs, in order: they then agree under any
    comparison (`compare`: every mask leaves equal texts equal, every matching pairs them). Not
    where the run's cwd goes into a recorded text: the text compared is then another."""
    return tuple(live) == tuple(recorded) and (cwd is None or not any(CWD in i.text for i in recorded))


def _tools_checked(file: str, script: int, call: int, live_id: str, request: Request,
                   tools_called: Callable[[int, int], tuple[str, ...]], framework: bool, reminders: bool) -> Checked:
    """The inputs agreed: a divergence only if the entry calls a tool the request does not offer."""
    offered = request.offered_tools  # a request that sends no `tools` is not checked: nothing to look up
    called = tools_called(script, call) if offered is not None else ()
    if called:
        missing = tool_not_offered(called, offered)
        if missing is not None and offered is not None:
            return Checked(Divergence("tool", file, live_id, call, f"the tool {missing!r} the recorded call uses",
                                      missing, "offered: " + (", ".join(sorted(offered)) or "no tools"), ""),
                           framework, reminders)
    return Checked(None, framework, reminders)
