"""Script entries: what one recorded model call replays as.

A derived call is a `chunks` entry; the override sidecar may also script `throw` (the call fails,
after streaming its chunks) and `hang` (the call stalls until the client gives up).
"""

from __future__ import annotations

import re

import msgspec

from mockllm.chunks import StreamChunk


class ChunksEntry(msgspec.Struct, tag_field="kind", tag="chunks", forbid_unknown_fields=False):
    chunks: list[StreamChunk]


class ThrowEntry(msgspec.Struct, tag_field="kind", tag="throw", omit_defaults=True):
    message: str
    code: str = "SERVER"
    status: int | None = None
    chunks: list[StreamChunk] = []


class HangEntry(msgspec.Struct, tag_field="kind", tag="hang", omit_defaults=True):
    readyFile: str | None = None


Entry = ChunksEntry | ThrowEntry | HangEntry

ENTRY_KINDS = ("chunks", "throw", "hang")

FROM_REQUEST = re.compile(r"\{\{fromRequest:(.*?)\}\}")

