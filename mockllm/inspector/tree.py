"""A scenario's sessions as the tree a person would draw: each child under the session that made it.

Scripts are kept in script order (primary first, children by creation); the tree only nests them
by their headers' `parentSession`. A child whose parent is not in the scenario (a tree recorded in
part) is drawn at the top level, with its parent named, rather than dropped.
`mockllm inspect --tree` draws it with box-drawing characters; the inspector page nests it as lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from mockllm.scenario.summary import ScenarioSummary, SessionSummary


@dataclass(slots=True)
class Node:
    session: SessionSummary
    children: list[Node] = field(default_factory=list)
    note: str = ""  # why a child is drawn at the top level


def session_tree(sessions: Sequence[SessionSummary]) -> list[Node]:
    """The roots (the primary, and any orphan), each with its children in script order."""
    first: dict[str, int] = {}
    for number, session in enumerate(sessions):
        first.setdefault(session.id, number)
    parents = [first.get(s.parent) if s.parent is not None else None for s in sessions]
    nodes = [Node(s) for s in sessions]
    roots: list[Node] = []
    for number, node in enumerate(nodes):
        parent = parents[number]
        # Parents that name each other in a loop reach no root: drawn at the top level all the same.
        if parent is None or _in_loop(number, parents):
            if node.session.parent is not None:
                node.note = (f"its parent {node.session.parent} is not in this scenario" if parent is None
                             else f"its parent {node.session.parent} descends from it")
            roots.append(node)
        else:
            nodes[parent].children.append(node)
    return roots


def _in_loop(number: int, parents: list[int | None]) -> bool:
    seen = set()
    current = parents[number]
    while current is not None and current not in seen:
        if current == number:
            return True
        seen.add(current)
        current = parents[current]
    return False


def session_label(session: SessionSummary) -> str:
    """`session.1.jsonl  fork, cut 14  2 entries  id c`: what a node of the tree says."""
    kind = f"{session.kind}, cut {session.cut}" if session.kind == "fork" else session.kind
    entries = f"{session.entries} {'entry' if session.entries == 1 else 'entries'}"
    return f"{session.file}  {kind}  {entries}  id {session.id}"


def draw_tree(summary: ScenarioSummary) -> list[str]:
    """The scenario drawn with box-drawing characters: its name, its sessions, its side routes."""
    lines = [summary.name]
    roots = session_tree(summary.sessions)
    routes = [f"side route: model {r.model} <- {r.file}  {r.entries} {'entry' if r.entries == 1 else 'entries'}"
              + ("  (its last entry repeats)" if r.repeat else "") for r in summary.side_routes]
    items: list[Node | str] = [*roots, *routes]
    for number, item in enumerate(items):
        _draw(item, "", number == len(items) - 1, lines)
    return lines


def _draw(item: Node | str, prefix: str, last: bool, lines: list[str]) -> None:
    branch, carry = ("└─ ", "   ") if last else ("├─ ", "│  ")
    if isinstance(item, str):
        lines.append(prefix + branch + item)
        return
    label = session_label(item.session)
    if item.note:
        label += f"  ({item.note})"
    lines.append(prefix + branch + label)
    for number, child in enumerate(item.children):
        _draw(child, prefix + carry, number == len(item.children) - 1, lines)
