"""Comparing answered requests with the recording off the client's wait: a run queues them and
reviews them a little later, in a batch (a report drains the queue first)."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

log = logging.getLogger("mockllm")

# How long answered requests wait to be compared with the recording: long enough to batch them
# behind the answers of a burst, short enough that a journal read soon after shows them (a
# report drains the queue anyway).
REVIEW_DELAY = 0.005


class Reviewed(Protocol):
    """What is reviewed: a run (`replay.run.Run`), named here by what review needs of it."""

    id: str

    def review_pending(self) -> None: ...


def schedule_review(run: Reviewed) -> None:
    """Compare `run`'s queued requests REVIEW_DELAY from now, on the running loop; with no loop (a
    unit test), a report drains the queue when it is read."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    loop.call_later(REVIEW_DELAY, _review, run)


def _review(run: Reviewed) -> None:
    try:
        run.review_pending()
    except Exception:  # a comparison bug must not break the loop's callbacks
        log.exception("comparing run %s's requests with the recording failed", run.id)
