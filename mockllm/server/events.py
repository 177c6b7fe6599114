"""The inspector's live events: a small publish/subscribe hub and its SSE stream (`GET /_mockllm/events`).

The model handler tells the hub after each call, and the run registry tells it when a run is
created, reset or ended. Each watching page is a subscriber holding the set of runs changed since
its last write, so events coalesce instead of queueing: a burst of a thousand calls becomes one
`run` event per run and write, a slow page never makes the server hold more than one entry per run,
and nothing is lost. The page then fetches the run's view. With no subscriber (the usual case: no
page open), `touched` is not even called: the handler checks `watched`, one attribute.
"""

from __future__ import annotations

import asyncio
import contextlib

import msgspec
from aiohttp import web

from mockllm.replay.run import Run
from mockllm.replay.runs import Change
from mockllm.server.streaming import SSE_HEADERS

# Between two writes to one page: calls coalesce meanwhile, so a burst costs a page a few fetches.
THROTTLE_S = 0.05
# A comment line now and then: a page that went away is noticed even when nothing happens.
KEEPALIVE_S = 15.0
RETRY_MS = 1000  # how soon a page's EventSource reconnects after the stream breaks


class Subscriber:
    __slots__ = ("changed", "wake")

    def __init__(self) -> None:
        self.changed: dict[str, str] = {}  # run id -> what changed last ("call", or a Change)
        self.wake = asyncio.Event()


class Hub:
    """Who watches, and what changed for each since it last heard."""

    def __init__(self) -> None:
        self._subscribers: set[Subscriber] = set()
        self.watched = False  # read by the model handler on every call: a plain attribute
        self._closed = False

    def touched(self, run_id: str) -> None:
        """A call of `run_id` arrived or finished."""
        for subscriber in self._subscribers:
            subscriber.changed.setdefault(run_id, "call")  # a created/ended/reset not yet sent stays
            subscriber.wake.set()

    def run_changed(self, change: Change, run: Run) -> None:
        """A run was created, reset or ended (the run registry's listener)."""
        for subscriber in self._subscribers:
            subscriber.changed[run.id] = change
            subscriber.wake.set()

    def close(self) -> None:
        """On shutdown: every stream ends, so shutdown does not wait for watching pages."""
        self._closed = True
        for subscriber in self._subscribers:
            subscriber.wake.set()

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """`GET /_mockllm/events`: `run` events (`{"run", "change"}`) until the page or the server goes."""
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        await response.write(f"retry: {RETRY_MS}\n\n".encode())
        subscriber = Subscriber()
        self._subscribers.add(subscriber)
        self.watched = True
        try:
            while not self._closed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(subscriber.wake.wait(), KEEPALIVE_S)
                subscriber.wake.clear()
                changed, subscriber.changed = subscriber.changed, {}
                if self._closed:
                    break
                if not changed:
                    await response.write(b": keep-alive\n\n")
                    continue
                await response.write(b"".join(
                    b"event: run\ndata: " + msgspec.json.encode({"run": run, "change": change}) + b"\n\n"
                    for run, change in changed.items()))
                await asyncio.sleep(THROTTLE_S)
        except ConnectionResetError:
            pass  # the page went away mid-write
        finally:
            self._subscribers.discard(subscriber)
            self.watched = bool(self._subscribers)
        return response
