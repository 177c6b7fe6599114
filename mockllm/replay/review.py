"""Comparing answered requests with the recording off the client's wait: a run queues them, and
reviews them once the answer is written, in the same wake-up of the server's loop; its report and
state drain the queue first."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

log = logging.getLogger("mockllm")


class Reviewed(Protocol):
    """What is reviewed: a run (`replay.run.Run`), named here by what review needs of it."""

    id: str

    def review_pending(self) -> None: ...


def schedule_review(run: Reviewed) -> asyncio.Handle | None:
    """Compare `run`'s queued requests as soon as the loop is free: after the handler that queued
    them has written its answer (its writes do not yield), before the loop waits for more. Never
    on the client's wait, and never a wake-up of its own: a test suite's calls come one at a time,
    and an idle server's wake-up (its caches cold from the test's own work) costs it more CPU than
    answering does (openai SDK streamed calls, five per run, runs ended after them, interleaved:
    648 us of server CPU per call with a review 5 ms later, 603 us reviewed at once). Requests
    answered in one wake-up are reviewed together. Returns the handle, which the run cancels when
    something drains its queue first; with no loop (a unit test), None: a report drains the queue
    when it is read."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return loop.call_soon(_review, run)


def _review(run: Reviewed) -> None:
    try:
        run.review_pending()
    except Exception:  # a comparison bug must not break the loop's callbacks
        log.exception("comparing run %s's requests with the recording failed", run.id)
