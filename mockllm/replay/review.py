"""Comparing answered requests with the recording off the client's wait: a run queues them and
reviews them later, in a batch; its report and state drain the queue first."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

log = logging.getLogger("mockllm")

# How long answered requests may wait to be compared with the recording. A run's report and state
# drain the queue before they are built (reporting.py), so nothing anyone reads depends on when the
# review runs: this only bounds how long queued requests are kept. A test's run usually ends first
# (its report drains the queue and cancels the timer), so the server never wakes up for it: a
# test suite's calls come one at a time, and an idle server's wake-up (its caches cold from the
# test's own work) costs it more CPU than answering does (openai SDK streamed calls, five per run,
# each run ended after them: 1.34 ms of server CPU per call with a 5 ms delay, 1.26 ms with this).
REVIEW_DELAY = 0.5


class Reviewed(Protocol):
    """What is reviewed: a run (`replay.run.Run`), named here by what review needs of it."""

    id: str

    def review_pending(self) -> None: ...


def schedule_review(run: Reviewed) -> asyncio.TimerHandle | None:
    """Compare `run`'s queued requests REVIEW_DELAY from now, on the running loop: the timer, which
    the run cancels when something drains its queue first. With no loop (a unit test), None: a
    report drains the queue when it is read."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return loop.call_later(REVIEW_DELAY, _review, run)


def _review(run: Reviewed) -> None:
    try:
        run.review_pending()
    except Exception:  # a comparison bug must not break the loop's callbacks
        log.exception("comparing run %s's requests with the recording failed", run.id)
