"""Comparing a run's requests with the recording: how a request differs from what was recorded
before its call, and the queue of answered requests compared off the client's wait."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from mockllm.replay.divergence import (
    Comparison,
    Divergence,
    compare,
    framework_results,
    live_inputs,
    tool_not_offered,
)
from mockllm.replay.divergence import describe as describe_mismatch
from mockllm.replay.report import Notice
from mockllm.wire.dialect import Request

if TYPE_CHECKING:
    from mockllm.replay.run import Run

log = logging.getLogger("mockllm")

# How long answered requests wait to be compared with the recording: long enough to batch them
# behind the answers of a burst, short enough that a journal read soon after shows them (a
# report drains the queue anyway).
REVIEW_DELAY = 0.005


def diverged(run: Run, script: int, call: int, live_id: str, request: Request) -> Divergence | None:
    """How this request differs from what was recorded before call `call` of `script`, if it does.

    Described in full only when it will be reported (the session's first, or a refusal under
    strict): otherwise expected, got and diff stay empty."""
    describe = script not in run.divergences or run.settings.strict
    session = run.scenario.sessions[script]
    inputs = session.inputs[call] if call < len(session.inputs) else None
    if inputs:  # a call recorded with no inputs of its own (a retry) is not compared
        recorded = inputs.items
        how = Comparison(run.settings.masks, run.settings.cwd, run.scenario.model_ids(script))
        mismatch = compare(recorded, live_inputs(request.tail), how)
        if mismatch is not None:
            found = describe_mismatch(mismatch, how) if describe else (mismatch.what, "", "", "")
            return Divergence("input", session.file, live_id, call, *found)
        if script not in run._framework_noted and framework_results(recorded, how):
            run._framework_noted.add(script)
            run.notices.append(Notice(
                "framework_ids", session.file, live_id, call,
                "tool results for calls the recorded model never made (a framework's own) were matched by "
                "position among themselves, their ids ignored"))
    called = run.scenario.tools_called(script, call)
    if called:
        offered = request.offered_tools
        missing = tool_not_offered(called, offered)
        if missing is not None and offered is not None:
            return Divergence("tool", session.file, live_id, call, f"the tool {missing!r} the recorded call uses",
                              missing, "offered: " + (", ".join(sorted(offered)) or "no tools"), "")
    return None


def schedule_review(run: Run) -> None:
    """Compare `run`'s queued requests REVIEW_DELAY from now, on the running loop; with no loop (a
    unit test), a report drains the queue when it is read."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    loop.call_later(REVIEW_DELAY, _review, run)


def _review(run: Run) -> None:
    try:
        run.review_pending()
    except Exception:  # a comparison bug must not break the loop's callbacks
        log.exception("comparing run %s's requests with the recording failed", run.id)

