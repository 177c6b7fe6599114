"""Where each recorded session hangs in its tree, read from what the requests showed.

A session whose first call sent `x-mockllm-parent` states its parent: that is kept as sent (and
`x-mockllm-fork` makes it a fork, see `tree`). Every other session's place is read from the calls
themselves, once the recording ends, since a child is known as one only when its parent's next
request answers it:

1. **The answer rule.** Session C is a child of session P when
   - C's first call arrived while P was waiting on tools: after P's call k, whose answer called
     tools, and before P's call k+1, the request that brings their results;
   - every call of C arrived before that request (C was done when P went on); and
   - that request carries a result for one of call k's tool calls whose text contains C's answer:
     the text of C's last answer (or, when it has none, the arguments of its last tool call, as a
     final-answer tool sends it), compared with all whitespace removed, as written or JSON-escaped
     (a framework may return it inside a JSON document).
   When several sessions qualify (a grandchild's answer, quoted on by its parent to the
   coordinator), the one whose request brought it first wins: the nearest waiter.
2. **The primary** is the root (a session with no parent by header or by 1.) with the most
   descendants; ties go to a conversation over a one-off call (one call, no tools offered, no
   children: Claude Code's title call), then to the root whose first call arrived first. Every
   other root becomes a spawn child of the primary.
3. **Order.** Children are numbered (`session.N.jsonl`) in the order their first calls reached the
   recorder, all depths together; every session's `createdAt` is the epoch ms its first call
   arrived, raised by the least needed to be strictly greater than the one before it. Replay's
   script order, `--bind order` and `inspect` then follow arrival order, not the order calls ended.

Where it cannot tell, and the session falls back to a child of the primary:
- a child whose answer its parent never sends back (the parent was cancelled, recording stopped
  first), or sends back rewritten (summarised, truncated, translated): nothing ties the two;
- a child with no answer to match (its last call failed, was cut or cancelled);
- a child started by something other than a tool call (a graph fan-out such as LangGraph's `Send`,
  whose results come back as state, not as tool results);
- a fork sent with no `x-mockllm-fork`: it is recorded as a spawn child whose log holds the
  inherited turns as its own (a request does not say which of its turns were inherited);
- a one-off call made while a session waits on tools whose short answer happens to appear in that
  session's tool result (a command-prefix check, say) is taken for its child; it stays beside the
  conversation either way, and `--side-route MODEL` keeps such calls out of the tree altogether.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from mockllm.record.call import ObservedCall


@dataclass(frozen=True, slots=True)
class CallFacts:
    """What the lineage rules read of one recorded call."""

    arrival: int  # its place in the order requests reached the recorder
    at: int  # epoch ms it arrived
    results: tuple[tuple[str | None, str], ...] = ()  # (tool call id, text, whitespace removed) per tool result
    tool_calls: tuple[str | None, ...] = ()  # the ids of the tool calls its answer made
    calls_tools: bool = False  # its answer asked for tool results
    answer: str = ""  # its answer's text, else its last tool call's arguments
    offers_tools: bool = False


def facts_of(call: ObservedCall) -> CallFacts:
    """The facts of a call as the proxy saw it (before redaction: both sides are compared unmasked)."""
    blocks = call.blocks()
    text = "".join(b.text or "" for b in blocks if b.type == "text")
    tools = [b for b in blocks if b.type == "tool-call"]
    if not text and tools:
        arguments = tools[-1].arguments
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return CallFacts(call.arrival, call.started,
                     tuple((m.tool_call_id, _squeezed(m.text)) for m in call.inputs if m.role == "tool"),
                     tuple(b.id for b in tools), call.calls_tools, text, call.offers_tools)


@dataclass(slots=True)
class SessionFacts:
    """One recorded session: its calls (at least one) and the parent its first call named, if any."""

    id: str
    parent: str | None = None
    calls: list[CallFacts] = field(default_factory=list)

    @property
    def first(self) -> CallFacts:
        return min(self.calls, key=lambda c: c.arrival)

    @property
    def last(self) -> CallFacts:
        return max(self.calls, key=lambda c: c.arrival)

    def one_off(self) -> bool:
        return len(self.calls) == 1 and not self.calls[0].offers_tools


@dataclass(frozen=True, slots=True)
class Layout:
    """The finished tree: who is primary, each child's parent and number, every `createdAt`."""

    primary: str
    children: list[str]  # file order: children[0] is session.1.jsonl
    parents: dict[str, str]  # every child's parent
    created: dict[str, int]  # every session's createdAt
    inferred: frozenset[str] = frozenset()  # children placed by the answer rule (the rest: header or default)


def lay_out(sessions: Sequence[SessionFacts]) -> Layout:
    """Apply the rules above to every session of a recording (each with at least one call)."""
    by_arrival = sorted(sessions, key=lambda s: s.first.arrival)
    ids = {s.id for s in by_arrival}
    parents: dict[str, str | None] = {}
    inferred: set[str] = set()
    for session in by_arrival:
        if session.parent is not None:
            parents[session.id] = session.parent
            continue
        parents[session.id] = answered_parent(session, by_arrival)
        if parents[session.id] is not None:
            inferred.add(session.id)
    roots = [s for s in by_arrival if parents[s.id] is None]
    if not roots:  # every session names a parent: the candidates are those whose parent recorded nothing
        roots = [s for s in by_arrival if parents[s.id] not in ids] or by_arrival[:1]
    descendants = _descendants(parents, ids)
    primary = min(roots, key=lambda s: (-descendants[s.id], descendants[s.id] == 0 and s.one_off(),
                                        s.first.arrival))
    parents[primary.id] = None
    for root in roots:
        if root is not primary:
            parents[root.id] = primary.id
    created: dict[str, int] = {}
    previous: int | None = None
    for session in by_arrival:
        stamp = session.first.at if previous is None else max(session.first.at, previous + 1)
        created[session.id] = previous = stamp
    children = [s.id for s in by_arrival if s is not primary]
    return Layout(primary.id, children, {c: p for c in children if (p := parents[c]) is not None}, created,
                  frozenset(inferred))


def answered_parent(child: SessionFacts, sessions: Sequence[SessionFacts]) -> str | None:
    """The session that was waiting on `child` (rule 1), or None when no session's request answers it."""
    forms = _answer_forms(child.last.answer)
    if not forms:
        return None
    best: tuple[int, str] | None = None  # (arrival of the answering request, its session)
    for parent in sessions:
        if parent is child:
            continue
        answering = _answering_request(child, parent, forms)
        if answering is not None and (best is None or answering < best[0]):
            best = (answering, parent.id)
    return None if best is None else best[1]


def _answering_request(child: SessionFacts, parent: SessionFacts, forms: set[str]) -> int | None:
    """The arrival of `parent`'s request that brings `child`'s answer back, if `child` ran while
    `parent` waited for it; else None."""
    start, end = child.first.arrival, child.last.arrival
    calls = sorted(parent.calls, key=lambda c: c.arrival)
    for waiting, going_on in itertools.pairwise(calls):
        if not waiting.arrival < start < going_on.arrival:
            continue
        if not waiting.calls_tools or end > going_on.arrival:
            return None
        asked = {i for i in waiting.tool_calls if i is not None}
        for call_id, text in going_on.results:
            if asked and call_id is not None and call_id not in asked:
                continue  # a result for another call than those the waiting answer made
            if any(form in text for form in forms):
                return going_on.arrival
        return None
    return None


def _squeezed(text: str) -> str:
    """`text` with all whitespace removed: agents re-wrap and re-indent what they pass on."""
    return "".join(text.split())


def _answer_forms(answer: str) -> set[str]:
    """How a child's answer may appear in its parent's tool result: as written, or JSON-escaped."""
    if not answer.strip():
        return set()
    escaped = {json.dumps(answer, ensure_ascii=ascii)[1:-1] for ascii in (False, True)}
    return {_squeezed(form) for form in (answer, *escaped)} - {""}


def _descendants(parents: dict[str, str | None], ids: set[str]) -> dict[str, int]:
    """How many sessions hang below each one (explicit parents may name anything: cycles are cut)."""
    count = dict.fromkeys(parents, 0)
    for session in parents:
        seen = {session}
        parent = parents[session]
        while parent is not None and parent in ids and parent not in seen:
            count[parent] += 1
            seen.add(parent)
            parent = parents[parent]
    return count
