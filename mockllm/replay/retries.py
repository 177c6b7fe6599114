"""The retry rule's pieces: the SDKs' retry marker, a request body's digest, a fault's headers."""

from __future__ import annotations

import hashlib

from mockllm.replay.faults import Fault
from mockllm.replay.journal import RawHeaders

RETRY_HEADER = b"x-stainless-retry-count"
# Statuses the SDKs retry by default; a fault with one says so in `x-should-retry`, as providers do.
RETRIED = frozenset({408, 409, 429}) | frozenset(range(500, 600))

def retry_count(raw_headers: RawHeaders) -> int:
    """The SDKs' retry marker (`x-stainless-retry-count`), 0 when absent or not a number."""
    for name, value in raw_headers:
        if name.lower() == RETRY_HEADER:
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


def digest(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=16).digest()


def fault_headers(fault: Fault) -> dict[str, str]:
    """A fault's provider-error headers: whether to retry, as providers say it, and `retry-after`."""
    headers = {"x-should-retry": "true" if fault.status in RETRIED else "false"}
    if fault.retry_after is not None:
        headers["retry-after"] = f"{fault.retry_after:g}"
    return headers
