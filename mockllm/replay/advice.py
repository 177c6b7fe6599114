"""The words a run's refusals say: what went wrong, where, and what to do next.

Kept apart from the run's state machine (`run.py`) because they are long, and read only when a
call is refused.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable

from mockllm.numbering import call_name, calls_name
from mockllm.replay.binding import Binding
from mockllm.replay.conversations import ConversationIndex
from mockllm.scenario.load import Scenario, SessionScript
from mockllm.scenario.side_routes import SideRoute
from mockllm.script.entries import Entry
from mockllm.wire.request import Message, Request


def start_over(run_id: str, origin: str) -> str:
    """The command that ends run `run_id`, ready to paste (`origin` is the server's address; a run
    not yet told it, as in a test driving a `Run` directly, gets the path alone)."""
    if not origin:
        return f"DELETE /_mockllm/runs/{run_id}"
    return f"curl -X DELETE {origin}/_mockllm/runs/{run_id}"


def new_run(scenario: Scenario, origin: str) -> str:
    """The command that makes a fresh run of `scenario`, ready to paste (as `start_over`)."""
    if not origin:
        return "POST /_mockllm/runs"
    body = shlex.quote(json.dumps({"scenario": scenario.name}))
    return f"curl -X POST {origin}/_mockllm/runs -H 'content-type: application/json' -d {body}"


def exhausted(run_id: str, scenario: Scenario, session: SessionScript, live_id: str, call: int,
              default: bool, origin: str = "") -> str:
    """A call past the end of `session`'s script (410 `script_exhausted`)."""
    message = (f"run {run_id}: session {session.file} (recorded id {session.id}, live id {live_id}) made "
               f"{call_name(call)} but its script has {len(session.entries)} entries ({_indexes(session.entries)})")
    if default:
        return message + (f". This is scenario {scenario.name}'s default run, and it is spent: start over "
                          f"with {start_over(run_id, origin)} (the next request gets a fresh default run), "
                          f"or give each test its own run with {new_run(scenario, origin)}. If the agent now "
                          "makes more calls than were recorded, re-record the scenario")
    return message + ("; the agent made more model calls than were recorded: re-record the scenario, or "
                      "append an entry in replay.override.json")


def side_exhausted(run_id: str, side: SideRoute, call: int) -> str:
    """A side route asked past the end of its script (410 `script_exhausted`)."""
    return (f"run {run_id}: side route {side.model!r} ({side.file}) got {call_name(call)} but its script "
            f"has {len(side.entries)} entries ({_indexes(side.entries)}); add entries to {side.file}, or set "
            "\"repeat\": true in mockllm.json to serve its last entry again")


def unrecorded(run_id: str, scenario: Scenario, bindings: Iterable[Binding], live_id: str,
               request: Request | None, conversations: ConversationIndex, spent_default: bool,
               file_of: dict[str, str], origin: str = "") -> str:
    """A new live session when every script is bound (404 `unrecorded_session`)."""
    sessions = scenario.sessions
    bound = ", ".join(f"{sessions[b.script].file}<-{b.live_id}" for b in bindings) or "none"
    message = (f"run {run_id}: live session {live_id} is new, but every recorded session with model calls "
               f"is already bound ({bound})")
    if spent_default:
        return message + (f". This is scenario {scenario.name}'s default run, and it is spent: every "
                          "recorded call was served already (the agent ran a second time against it). Start "
                          f"over with {start_over(run_id, origin)} (the next request gets a fresh default "
                          f"run), or give each test its own run with {new_run(scenario, origin)}")
    if request is None or not conversations.owns(live_id):
        return message + ("; the agent started a session that was not recorded: re-record the scenario, or "
                          "send the recorded id in the x-mockllm-session header")
    closest = conversations.closest(request.messages, exclude=live_id)
    if closest is None:
        return message + "; its messages extend no live conversation, and none has started yet"
    other, agreed, expected, got = closest
    where = file_of.get(other, "unbound")
    return message + (
        f". Its messages extend no live conversation; the closest is {other} ({where}), whose latest request "
        f"agrees with it for {agreed} message(s) and then differs at message {agreed + 1}: there it had "
        f"{_gist(expected)}, this request has {_gist(got)}. The usual cause is a turn sent without the "
        "history before it (send the whole conversation every call); a subagent of its own needs its own "
        "x-mockllm-session header")


def _indexes(entries: list[Entry]) -> str:
    return "none" if not entries else calls_name(0, len(entries) - 1)


def _gist(message: Message | None, limit: int = 80) -> str:
    if message is None:
        return "no message"
    text = " ".join(message.text.split())
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    calls = f" calling {', '.join(c.name or '?' for c in message.tool_calls)}" if message.tool_calls else ""
    return f"{message.role or 'a'} message {text!r}{calls}"
