"""Python's cyclic garbage collector paused while recordings are loaded.

Loading builds a great many objects that live as long as the server, and no cycles to speak of:
loading a suite of 200 scenarios (1,000 calls) left 0-5 unreachable objects. With the collector
on, each of its passes scans every object loaded so far, so a load paid for them again and again:
loading those 200 scenarios and rendering their calls took 260-380 ms of CPU with it, 145-155
without. What a load leaves is taken out of the collector's scans afterwards (the server's
`settle_memory`).

The collector is process-wide and threads may load at once: it is paused while any load runs,
and turned back on by the last one to finish, unless it was off before the first began.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_loads = 0  # loads running now
_resume = False  # whether the collector was on when the first of them began


@contextmanager
def paused() -> Iterator[None]:
    """Pause the cyclic collector while the block runs (also usable as a decorator: `@paused()`)."""
    global _loads, _resume
    with _lock:
        if _loads == 0:
            _resume = gc.isenabled()
            gc.disable()
        _loads += 1
    try:
        yield
    finally:
        with _lock:
            _loads -= 1
            if _loads == 0 and _resume:
                gc.enable()
