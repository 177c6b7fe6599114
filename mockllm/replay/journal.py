"""A run's journal and failure list, both bounded: a long-lived run must not grow without limit.

The journal keeps the last `limit` calls (and counts the ones it let go); the failure list keeps
the first `FAILURES_KEPT` failures whole (the first failure is nearly always the one that
explains the rest) and only counts later ones per code. An agent stuck retrying past the end of
its script therefore costs a bounded amount of memory, however long it retries.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Iterator
from typing import Any

from mockllm.errors import ReplayFailure
from mockllm.shown_headers import shown_value

JOURNAL_LIMIT = 1000
FAILURES_KEPT = 100
BODY_KEPT = 64 * 1024  # bytes of each request body kept in its record


class CallRecord:
    """One model call of a run, as it arrived and as it was answered.

    A plain class with slots, not a dataclass: one is made per model call, before its first byte.
    """

    __slots__ = ("at", "body", "body_truncated", "call", "dialect", "diverged", "duration_ms", "error", "fault",
                 "kind", "raw_headers", "retry", "script", "session", "started", "status", "stream")

    def __init__(self, dialect: str, session: str, stream: bool, raw_headers: RawHeaders, body: bytes) -> None:
        self.at = time.time()  # arrival, epoch seconds
        self.started = time.perf_counter()
        self.dialect = dialect
        self.session = session  # the live session id
        self.stream = stream
        # The request's header lines as parsed (bytes, no reference to the request): filtered to the
        # client's own `x-…` headers only when read, off the request path.
        self.raw_headers = raw_headers
        self.body = body[:BODY_KEPT]
        self.body_truncated = len(body) > BODY_KEPT
        self.script: str | None = None  # the recorded session file the live session is bound to
        self.call: int | None = None  # 0-based entry index served (or asked for, past the end)
        self.kind: str | None = None  # the entry's kind, as its class name
        self.status: int | None = None
        self.error: str | None = None  # the mock-made error code, if any
        self.diverged: str | None = None  # where the request differed from the recording, if it did
        self.fault: str | None = None  # the fault served instead of (or before) the entry, if any
        self.retry = False  # a repeat of a call whose answer did not reach the client whole
        self.duration_ms: float | None = None

    def done(self) -> None:
        """Stamp how long the call took, once its answer is written (or its hold released)."""
        self.duration_ms = round((time.perf_counter() - self.started) * 1000, 3)

    def as_dict(self, *, body: bool = True) -> dict[str, Any]:
        """The record as the run's state shows it; without `body`, the body is left out (an empty
        string), which spares decoding up to BODY_KEPT bytes per call for a view that lists calls."""
        return {
            "at": self.at, "dialect": self.dialect, "session": self.session, "stream": self.stream,
            "headers": client_headers(self.raw_headers), "script": self.script, "call": self.call, "kind": self.kind,
            "status": self.status, "error": self.error, "diverged": self.diverged, "fault": self.fault,
            "retry": self.retry, "duration_ms": self.duration_ms,
            "body": self.body.decode("utf-8", "replace") if body else "", "body_truncated": self.body_truncated,
        }


RawHeaders = tuple[tuple[bytes, bytes], ...]


def client_headers(raw_headers: RawHeaders) -> dict[str, str]:
    """Of a request's headers, those the client sent for its own reasons (`x-…`), lowercased; the value
    of any but the known harmless ones (`mockllm.shown_headers`) is redacted: the journal is shown to
    people (the inspector page, a report file kept as a CI artifact)."""
    out = {}
    for k, v in raw_headers:
        if k[:2] in (b"x-", b"X-"):
            name = k.decode("latin-1").lower()
            out[name] = shown_value(name, v.decode("utf-8", "replace"))
    return out


class Journal:
    """The last `limit` calls of a run."""

    def __init__(self, limit: int = JOURNAL_LIMIT) -> None:
        self._records: deque[CallRecord] = deque(maxlen=limit)
        self.total = 0

    def record(self, dialect: str, session: str, stream: bool, raw_headers: RawHeaders, body: bytes) -> CallRecord:
        # The body is cut now: keeping the whole of a long history per call is what made the journal grow.
        record = CallRecord(dialect, session, stream, raw_headers, body)
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

    def latest(self) -> CallRecord | None:
        """The last call recorded, if any."""
        return self._records[-1] if self._records else None

    def numbered(self, number: int) -> CallRecord | None:
        """The run's call `number` (0-based, counting dropped ones), while the journal keeps it."""
        index = number - self.dropped
        return self._records[index] if 0 <= index < len(self._records) else None


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
