"""A run's failures in words that say what to do: a script past its end, an unrecorded session.

Kept apart from `run` (which decides what each call gets) since only a failure reads them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mockllm.scenario.load import SessionScript
from mockllm.scenario.side_routes import SideRoute
from mockllm.wire.dialect import Message, Request

if TYPE_CHECKING:
    from mockllm.replay.run import Run


def exhausted(run: Run, session: SessionScript, live_id: str, call: int) -> str:
    """Why call `call` (0-based) of a session past its script's end fails, and what to do."""
    message = (f"run {run.id}: session {session.file} (recorded id {session.id}, live id {live_id}) made call "
               f"{call + 1} but its script has {len(session.entries)} entries")
    if run.default:
        return message + (f". This is scenario {run.scenario.name}'s default run, and it is spent: start over "
                          f"with DELETE /_mockllm/runs/{run.id} (the next request gets a fresh default run), "
                          "or give each test its own run with POST /_mockllm/runs. If the agent now makes more "
                          "calls than were recorded, re-record the scenario")
    return message + ("; the agent made more model calls than were recorded: re-record the scenario (record mode "
                      "new_episodes records just the calls past the end), or append an entry in replay.override.json")


def unrecorded(run: Run, live_id: str, request: Request | None, owned: bool) -> str:
    """Why a new live session finds no script to bind to, and what to do; `owned`: its id was made
    by conversation routing (no session header), so the nearest conversation is worth naming."""
    sessions = run.scenario.sessions
    bound = ", ".join(f"{sessions[b.script].file}<-{b.live_id}" for b in run.bindings.values()) or "none"
    message = (f"run {run.id}: live session {live_id} is new, but every recorded session with model calls "
               f"is already bound ({bound})")
    if run.default and run.consumed:
        return message + (f". This is scenario {run.scenario.name}'s default run, and it is spent: every "
                          "recorded call was served already (the agent ran a second time against it). Start "
                          f"over with DELETE /_mockllm/runs/{run.id} (the next request gets a fresh default "
                          "run), or give each test its own run with POST /_mockllm/runs")
    if request is None or not owned:
        return message + ("; the agent started a session that was not recorded: re-record the scenario, or "
                          "send the recorded id in the x-mockllm-session header")
    closest = run.conversations.closest(request.messages, exclude=live_id)
    if closest is None:
        return message + "; its messages extend no live conversation, and none has started yet"
    other, agreed, expected, got = closest
    where = run.script_file(other) or "unbound"
    return message + (
        f". Its messages extend no live conversation; the closest is {other} ({where}), whose latest request "
        f"agrees with it for {agreed} message(s) and then differs at message {agreed + 1}: there it had "
        f"{gist(expected)}, this request has {gist(got)}. The usual cause is a turn sent without the "
        "history before it (send the whole conversation every call); a subagent of its own needs its own "
        "x-mockllm-session header")


def side_exhausted(run: Run, side: SideRoute, call: int) -> str:
    """Why call `call` (0-based) of a side route past its script's end fails, and what to do."""
    return (f"run {run.id}: side route {side.model!r} ({side.file}) got call {call + 1} but its script has "
            f"{len(side.entries)} entries; add entries to {side.file}, or set \"repeat\": true in mockllm.json "
            "to serve its last entry again")


def gist(message: Message | None, limit: int = 80) -> str:
    """One message in a few words: its role, its text cut short, the tools it calls."""
    if message is None:
        return "no message"
    text = " ".join(message.text.split())
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    calls = f" calling {', '.join(c.name or '?' for c in message.tool_calls)}" if message.tool_calls else ""
    return f"{message.role or 'a'} message {text!r}{calls}"
