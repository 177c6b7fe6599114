"""A run's journal and failure list, both bounded: a long-lived run must not grow without limit.

The journal keeps the last `limit` calls (and counts the ones it let go); the failure list keeps
the first `FAILURES_KEPT` failures whole (the first failure is nearly always the one that
explains the rest) and only counts later ones per code. An agent stuck retrying past the end of
its script therefore costs a bounded amount of memory, however long it retries.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from mockllm.errors import ReplayFailure

JOURNAL_LIMIT = 1000
FAILURES_KEPT = 100
BODY_KEPT = 64 * 1024  # bytes of each request body kept in its record


@dataclass(slots=True)
class CallRecord:
    """One model call of a run, as it arrived and as it was answered."""

    at: float  # arrival, epoch seconds
    dialect: str
    session: str  # the live session id
    stream: bool
    headers: dict[str, str]  # the `x-…` headers the client sent for its own reasons, lowercased
    body: bytes  # at most BODY_KEPT bytes of the request body
    body_truncated: bool
    started: float = field(default_factory=time.perf_counter, repr=False)
    script: str | None = None  # the recorded session file the live session is bound to
    call: int | None = None  # 0-based entry index served
    kind: str | None = None  # the entry's kind, as its class name
    status: int | None = None
    error: str | None = None  # the mock-made error code, if any
    diverged: str | None = None  # where the request differed from the recording, if it did
    duration_ms: float | None = None

    def done(self) -> None:
        """Stamp how long the call took, once its answer is written (or its hold released)."""
        self.duration_ms = round((time.perf_counter() - self.started) * 1000, 3)

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": self.at, "dialect": self.dialect, "session": self.session, "stream": self.stream,
            "headers": self.headers, "script": self.script, "call": self.call, "kind": self.kind,
            "status": self.status, "error": self.error, "diverged": self.diverged, "duration_ms": self.duration_ms,
            "body": self.body.decode("utf-8", "replace"), "body_truncated": self.body_truncated,
        }


def client_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Of a request's headers, those the client sent for its own reasons (`x-…`), lowercased."""
    return {k.lower(): v for k, v in headers.items() if k[:2] in ("x-", "X-")}


class Journal:
    """The last `limit` calls of a run."""

    def __init__(self, limit: int = JOURNAL_LIMIT) -> None:
        self._records: deque[CallRecord] = deque(maxlen=limit)
        self.total = 0

    def record(self, dialect: str, session: str, stream: bool, headers: Mapping[str, str], body: bytes) -> CallRecord:
        # The body is cut now: keeping the whole of a long history per call is what made the journal grow.
        record = CallRecord(time.time(), dialect, session, stream, client_headers(headers), body[:BODY_KEPT],
                            len(body) > BODY_KEPT)
        self._records.append(record)
        self.total += 1
        return record

    @property
    def dropped(self) -> int:
        """Calls recorded but no longer kept."""
        return self.total - len(self._records)

    def __iter__(self) -> Iterator[CallRecord]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)


class Failures:
    """A run's failures: the first `kept` whole, then a count per code."""

    def __init__(self, kept: int = FAILURES_KEPT) -> None:
        self.kept = kept
        self.first: list[ReplayFailure] = []
        self.more: Counter[str] = Counter()

    def add(self, failure: ReplayFailure) -> None:
        if len(self.first) < self.kept:
            self.first.append(failure)
        else:
            self.more[failure.code] += 1

    def __len__(self) -> int:
        return len(self.first) + sum(self.more.values())

    def __bool__(self) -> bool:
        return bool(self.first)
