"""Binding: which recorded session's script a live session replays.

A live session (named by a request header, or found by its conversation) binds on its first call,
to an unbound script (one no live session holds yet) with recorded calls:

1. the script with the same recorded id, if there is one;
2. under `--bind order`: the next one in script order (first-call order, as dsh binds);
3. under `--bind content` (the default): the one whose recorded first request is closest to the
   live session's first request, so concurrent subagents bind right whatever order they start in.

Closest is decided on three parts of the first request, each a number from 0 to 1:

- the first inputs (its user messages and tool results, `divergence.live_inputs`): 1 when they
  match as a divergence check compares them (masked, reminders as `--strict` says), else how much
  of the two texts is alike;
- the system prompt (`request/header`, as the recorder writes it; a chat `developer` message is
  one): 1 when equal (masked), else how much of it is alike; 0 when the live request has none;
- the offered tools (their names, as the header names them): shared names over all names; 0 when
  the live request offers none.

A part the recording does not name (a log with no `request/header`, dsh's `{{system}}`
placeholder, a recording made before the recorder named tools) is unknown: it counts 0.5 and
never makes a match inexact.

How much of two texts is alike (`text_share`) is the share of their three-character pieces they
have in common, counted with repeats: twice the pieces both have, over the pieces of both (the
Dice coefficient of their character trigrams). An edit inside one word still leaves the rest
alike (`BETAS` is closer to `BETA` than to `ALPHA`); it costs one pass over each text, and the
order of the pieces does not count.

A script whose first inputs match comes before any whose do not; then the highest sum of the
three numbers wins; a tie goes to script order (the order the sessions' first calls were
recorded). The rule looks at nothing but the live request and the unbound scripts, so which
script a session gets does not depend on when its siblings arrive, as long as it is not closer to
a sibling's recording than to its own (a sibling that arrives first binds to its own recording,
exactly; one that arrives later finds it taken).

When no unbound script's first inputs or system prompt are even half alike (`ALIKE`) to the live
request's, nothing is close: the session binds to the first unbound script in script order, as
`--bind order` would, with a `bound_in_order` notice, rather than to whichever noise scores highest.

Notices say what the rule could not settle (`Notice`, in the report): `bound_by_arrival` when
twins (scripts whose first requests are alike in every part their logs name) were told apart by
script order only, `bound_to_closest` when the script bound matches the live request in some part
only (which parts, how alike). A first-inputs mismatch is also the session's first divergence.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from mockllm.options import RunSettings
from mockllm.replay.divergence import Comparison, compare, comparison, live_inputs, same_text
from mockllm.replay.normalize import masked
from mockllm.scenario.load import Scenario, SessionScript
from mockllm.script.inputs import Input
from mockllm.script.templates import CWD
from mockllm.wire.request import Request, system_text

PIECE = 3  # characters per piece that `text_share` counts


class Chosen(NamedTuple):
    """The script a new live session binds to (None: every script with entries is bound), and what
    the run's report notes about how (a notice's kind and words), if anything."""

    script: int | None
    notice: tuple[str, str] | None = None


UNKNOWN = 0.5  # what a part the recording does not name counts
# How alike a first request's inputs or system prompt must be to a recording's for that recording
# to count as close at all: below it, in every unbound script, nothing is close, and the session
# binds in script order (as `--bind order` would) rather than to whichever noise scores highest.
ALIKE = 0.5
ALMOST = 0.999  # the most a system prompt that is not equal can score


class _Closeness(NamedTuple):
    """How alike a script's recorded first request is to the live one (see the module's rule);
    a part is None when the recording does not name it."""

    inputs_match: bool
    inputs: float
    system: float | None
    tools: float | None

    @property
    def key(self) -> tuple[bool, float]:
        return self.inputs_match, self.inputs + _known(self.system) + _known(self.tools)

    @property
    def resembles(self) -> bool:
        """Its first inputs or system prompt are alike enough (`ALIKE`) to call the script close at all;
        unknown parts and tools (which most requests share or lack alike) are no evidence."""
        return self.inputs_match or self.inputs >= ALIKE or (self.system is not None and self.system >= ALIKE)

    @property
    def exact(self) -> bool:
        return self.inputs_match and self.system in (None, 1.0) and self.tools in (None, 1.0)


def _known(part: float | None) -> float:
    return UNKNOWN if part is None else part


def text_share(a: str, b: str) -> float:
    """How much of two texts is alike: twice the three-character pieces both have (with repeats),
    over the pieces of both; 1.0 for equal texts."""
    if a == b:
        return 1.0
    return _share(a, b)


# Siblings are often recorded with the same first inputs (the same task, handed to each), so binding
# one session scores the same pair of texts once per unbound sibling: each pair is counted once.
@functools.lru_cache(maxsize=64)
def _share(a: str, b: str) -> float:
    pieces_a, pieces_b = _pieces(a), _pieces(b)
    total = sum(pieces_a.values()) + sum(pieces_b.values())
    if len(pieces_a) > len(pieces_b):
        pieces_a, pieces_b = pieces_b, pieces_a
    other = pieces_b.get
    both = sum(min(count, other(piece, 0)) for piece, count in pieces_a.items())
    return 2 * both / total if total else 1.0


# A recording's texts are counted once, whoever is being bound; few are kept (a long system prompt's
# pieces take a few hundred KB), since only a session that matches no recording exactly needs them.
@functools.lru_cache(maxsize=16)
def _pieces(text: str) -> Counter[str]:
    if len(text) < PIECE:
        return Counter([text] if text else [])
    return Counter(text[i:i + PIECE] for i in range(len(text) - PIECE + 1))


def tools_share(recorded: frozenset[str] | None, live: frozenset[str] | None) -> float | None:
    """Shared tool names over all names (1.0 when both offer none); None when the recording names
    none (unknown), 0.0 when only the recording does."""
    if recorded is None:
        return None
    if live is None:
        return 1.0 if not recorded else 0.0
    names = recorded | live
    return len(recorded & live) / len(names) if names else 1.0


@dataclass(slots=True)
class Binding:
    script: int  # index into scenario.sessions
    live_id: str
    cursor: int = 0  # entries served so far
    continued: int | None = None  # the call whose reply the latest chained request continued
    retries: int = 0  # requests that repeated a call whose answer did not reach the client whole
    # The call whose stream the client left before its end, and a digest of that request's body:
    # a retry of it gets the same entry again (replay/run.py, the retry rule).
    incomplete: tuple[int, bytes] | None = None
    live: bool = False  # under new_episodes, it left the recording: the rest of its script is not wanted


class Bindings:
    """A run's bindings, by live id and by script."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.by_live_id: dict[str, Binding] = {}
        self._by_script: dict[int, Binding] = {}

    def get(self, live_id: str) -> Binding | None:
        return self.by_live_id.get(live_id)

    def of_script(self, script: int) -> Binding | None:
        """The binding of script `script`, once a live session is bound to it."""
        return self._by_script.get(script)

    def __iter__(self) -> Iterator[Binding]:
        return iter(self._by_script.values())

    def bind(self, script: int, live_id: str) -> Binding:
        binding = self.by_live_id[live_id] = self._by_script[script] = Binding(script, live_id)
        return binding

    def file_of(self, live_id: str) -> str | None:
        """The recorded session file `live_id` is bound to, if it is bound."""
        binding = self.by_live_id.get(live_id)
        return self.scenario.sessions[binding.script].file if binding is not None else None

    def choose(self, live_id: str, request: Request | None, settings: RunSettings) -> Chosen:
        """The script a new live session binds to (see the module's rule), and what to note about it."""
        sessions = self.scenario.sessions
        chosen = next((i for i, s in enumerate(sessions) if s.id == live_id and i not in self._by_script), None)
        if chosen is not None:
            return Chosen(chosen)
        # Sessions recorded with no model calls never call, so they take no place in first-call order.
        free = [i for i, s in enumerate(sessions) if i not in self._by_script and s.entries]
        if settings.bind != "content" or request is None or not free:
            return Chosen(free[0] if free else None)
        return self._closest(request, free, settings)

    def _closest(self, request: Request, free: list[int], settings: RunSettings) -> Chosen:
        sessions = self.scenario.sessions
        live = live_inputs(request.tail)
        system = system_text(request.messages)
        tools = request.offered_tools
        # Inputs first: the cheap check, which nearly always settles it (one script's match). Siblings
        # recorded with the same first inputs (the same task, handed to each) are compared once.
        found: dict[object, bool] = {}
        matched = [i for i in free if self._inputs_match(i, live, settings, found)]
        scored: dict[int, _Closeness] = {}
        live_text = _joined(live, settings) if not matched else ""
        for i in matched or free:
            session = sessions[i]
            scored[i] = _Closeness(
                i in matched,
                1.0 if i in matched else text_share(_joined(_recorded_inputs(session), settings), live_text),
                _system_share(session.system, system, settings),
                tools_share(session.tools, tools))
            if len(matched) == 1:
                break  # the only one whose inputs match: nothing else can come before it
        keys = {i: c.key for i, c in scored.items()}  # each once: twins are many, and each is compared twice
        best = max(scored, key=lambda i: (keys[i], -i))
        closeness = scored[best]
        if not closeness.inputs_match and not any(c.resembles for c in scored.values()):
            first = free[0]
            return Chosen(first, ("bound_in_order", (
                f"no unbound recording is alike (first inputs or system prompt at least {ALIKE:.0%} alike): bound "
                f"to the first unbound one in recorded order, {sessions[first].file}")))
        alike = [i for i, c in scored.items() if i != best and keys[i] == keys[best] and c.exact == closeness.exact]
        if alike and closeness.exact:
            files = ", ".join(sessions[i].file for i in alike)
            return Chosen(best, ("bound_by_arrival", (
                f"twins: {files} also start with this first request (first inputs, system prompt and offered tools "
                "alike, as far as their logs name them): bound in recorded order, the order their first calls "
                "were recorded")))
        if closeness.exact:
            return Chosen(best)
        return Chosen(best, ("bound_to_closest", _how_alike(closeness, sessions[best], system, tools)
                             + (f"; {len(alike)} other unbound session(s) were as close: bound in recorded order"
                                if alike else "")))

    def _inputs_match(self, script: int, live: list[Input], settings: RunSettings, found: dict[object, bool]) -> bool:
        """Whether script `script`'s recorded first inputs match `live`; `found` remembers the answer
        for the recorded bytes (per script where a tool result makes the script's own call ids count)."""
        session = self.scenario.sessions[script]
        recorded = session.inputs[0] if session.inputs else None
        if not recorded:
            return False
        key = (recorded.kinds, recorded.events, script if "tool" in recorded.kinds else None)
        match = found.get(key)
        if match is None:
            items = recorded.items
            match = found[key] = compare(items, live, comparison(self.scenario, settings, script, items, live)) is None
        return match

    def continued(self, reply: tuple[int, int] | None) -> Binding | None:
        """The session a request continuing reply (script, call) belongs to, if it is a step of its chain.

        It is when that reply is the latest one the session was served (the next step), or the one
        its latest chained request continued (a retry of that step). A request continuing an older
        reply branches off the chain, as a fork child continues its parent's earlier turn: it is
        routed by its conversation, like a fork that sends its history. So is a reply id this run
        never served (another run's, or not one of ours).
        """
        binding = self._by_script.get(reply[0]) if reply is not None else None
        if binding is None or reply is None:
            return None
        call = reply[1]
        if call == binding.cursor - 1 or call == binding.continued:
            binding.continued = call
            return binding
        return None

    @property
    def drained(self) -> bool:
        """Every script with entries was bound and served in full (or left for the upstream)."""
        return all(
            (b := self._by_script.get(i)) is not None and (b.cursor >= len(s.entries) or b.live)
            for i, s in enumerate(self.scenario.sessions)
            if s.entries
        )


def _recorded_inputs(session: SessionScript) -> list[Input]:
    recorded = session.inputs[0] if session.inputs else None
    return list(recorded.items) if recorded else []


def _joined(inputs: Sequence[Input], settings: RunSettings) -> str:
    """Inputs' texts as one, masked (the run's cwd put for `{{cwd}}`, as the recorded side has it)."""
    text = "\n".join(i.text for i in inputs)
    if settings.cwd is not None:
        text = text.replace(CWD, settings.cwd)
    return masked(text, settings.masks)


def _system_share(recorded: str | None, live: str | None, settings: RunSettings) -> float | None:
    """1.0 for equal system prompts (masked), else how much of them is alike (`text_share`); None when the
    recording names none (unknown), 0.0 when the live request has none."""
    if recorded is None:
        return None
    if live is None:
        return 0.0
    how = Comparison(settings.masks, settings.cwd)
    if same_text(recorded, live, how):
        return 1.0
    if settings.cwd is not None:
        recorded = recorded.replace(CWD, settings.cwd)
    # Below 1.0 even when the pieces agree (the same pieces in another order): 1.0 means equal.
    return min(text_share(masked(recorded, settings.masks), masked(live, settings.masks)), ALMOST)


def _how_alike(closeness: _Closeness, session: SessionScript, system: str | None,
               tools: frozenset[str] | None) -> str:
    """Which parts of the live first request differ from the closest recording's, and how alike they are."""
    parts = []
    if not closeness.inputs_match:
        parts.append(f"first inputs {closeness.inputs:.0%} alike")
    if closeness.system is not None and closeness.system < 1.0:
        parts.append(f"system prompt {closeness.system:.0%} alike" if system is not None
                     else "no system prompt, where the recording has one")
    if closeness.tools is not None and closeness.tools < 1.0 and session.tools is not None:
        missing, extra = sorted(session.tools - (tools or frozenset())), sorted((tools or frozenset()) - session.tools)
        parts.append("offered tools differ" + (f" (not offered now: {', '.join(missing)})" if missing else "")
                     + (f" (not recorded: {', '.join(extra)})" if extra else ""))
    lead = ("its first inputs match, but not all of its first request: " if closeness.inputs_match
            else "no unbound recorded session's first request matches its own: bound to the closest, ")
    return lead + "; ".join(parts)
