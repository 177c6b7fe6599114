"""Script entries: what one recorded model call replays as.

A derived call is a `chunks` entry; the override sidecar may also script `throw` (the call fails,
after streaming its chunks) and `hang` (the call stalls until the client gives up).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath, PureWindowsPath

import msgspec

from mockllm.dsh.chunks import BlockEnd, BlockStart, StreamChunk, TextDelta, ToolCallDelta


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


# What a `hang` streams before it stalls, as dsh's own replay does: one text delta.
HANG_TEXT = "partial"
HANG_CHUNKS: tuple[StreamChunk, ...] = (BlockStart(0, "text"), TextDelta(0, HANG_TEXT))

_THROW_STATUS = {"AUTH": 401, "RATE_LIMIT": 429, "INVALID_REQUEST": 400, "SERVER": 500}


def throw_status(code: str, status: int | None) -> int:
    """HTTP status of a scripted failure: its own, else from its code (AUTH 401, HTTP_<n> n, ...)."""
    if status is not None:
        return status
    if code in _THROW_STATUS:
        return _THROW_STATUS[code]
    if code.startswith("HTTP_") and code[5:].isdigit() and 100 <= int(code[5:]) <= 599:
        return int(code[5:])
    return 500


def ready_file_problem(ready_file: str) -> str | None:
    """Why a hang's `readyFile` may not be written, or None: it is created relative to the run's
    cwd, so it must be a relative path that stays inside that folder."""
    if not ready_file.strip():
        return "is empty"
    if PurePosixPath(ready_file).is_absolute() or PureWindowsPath(ready_file).is_absolute() or ready_file[:1] in "/\\":
        return "is absolute: it must be relative to the run's cwd"
    if ".." in PurePosixPath(ready_file.replace("\\", "/")).parts:
        return "leaves the run's cwd (..): it must stay inside it"
    return None


def tools_called(entry: Entry) -> tuple[str, ...]:
    """Names of the tools an entry calls, one per tool-call block, in block order."""
    if isinstance(entry, HangEntry):
        return ()
    names: dict[int, str] = {}
    for chunk in entry.chunks:
        if isinstance(chunk, ToolCallDelta) and chunk.name:
            names.setdefault(chunk.index, chunk.name)
        elif isinstance(chunk, BlockEnd) and chunk.block.type == "tool-call" and chunk.block.name:
            names.setdefault(chunk.index, chunk.block.name)
    return tuple(names[i] for i in sorted(names))


def tool_call_ids(entry: Entry) -> frozenset[str]:
    """The ids of the tool calls an entry makes (a tool result answering one of them is the model's)."""
    if isinstance(entry, HangEntry):
        return frozenset()
    ids = {chunk.id for chunk in entry.chunks if isinstance(chunk, ToolCallDelta) and chunk.id}
    ids |= {chunk.block.id for chunk in entry.chunks
            if isinstance(chunk, BlockEnd) and chunk.block.type == "tool-call" and chunk.block.id}
    return frozenset(ids)
