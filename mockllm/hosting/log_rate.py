"""A log line repeats at a bounded rate.

A flood of bad connections makes the same line again and again: asyncio's "socket.accept() out of
system resource" at every turn of the loop once the file limit is reached, aiohttp's "Error
handling request" per broken request, mockllm's own warnings per refused call. Unbounded, that
log grew 172 MB in 40 s. `RepeatLimit` lets each message (by logger, level and format string) through
`BURST` times per `WINDOW` seconds, then drops it and says how many were dropped when the window
ends and the line next appears.
"""

from __future__ import annotations

import logging
import time

BURST = 10
WINDOW = 10.0
# The loggers a server's flood reaches, each by its own name: a logger's filter sees only the records
# logged to it, not its children's. No handler is filtered: in a test process, the user's own lines pass.
LIMITED = ("asyncio", "aiohttp.server", "aiohttp.access", "aiohttp.web", "mockllm", "mockllm.record.command")


class RepeatLimit(logging.Filter):
    def __init__(self, burst: int = BURST, window: float = WINDOW) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self._seen: dict[tuple[str, int, str], list[float]] = {}  # key -> [window start, count in it]

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, str(record.msg))
        now = time.monotonic()
        seen = self._seen.get(key)
        if seen is None or now - seen[0] >= self.window:
            if len(self._seen) > 10_000:  # many distinct lines: forget the old windows, not the process's memory
                self._seen.clear()
            dropped = 0 if seen is None else int(seen[1]) - self.burst
            self._seen[key] = [now, 1]
            if dropped > 0:
                record.msg = f"{record.msg} (and {dropped} more like it in the last {self.window:g} s, not logged)"
            return True
        seen[1] += 1
        return seen[1] <= self.burst


_INSTALLED = RepeatLimit()


def limit_repeats() -> None:
    """Put the one RepeatLimit on the loggers a server's flood reaches (idempotent)."""
    for name in LIMITED:
        logger = logging.getLogger(name)
        if _INSTALLED not in logger.filters:
            logger.addFilter(_INSTALLED)
