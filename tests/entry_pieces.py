"""What a recorded answer holds, in order, for the client helpers' expectations (`*_client.py`):
each delta, and each block recorded with no deltas (given whole by its `BlockEnd`), as one piece.

Computed from the recorded chunks alone, not by calling a dialect, so a mapping bug fails the
comparison; each client helper spells out its own dialect's names and rules on top.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import NamedTuple

from mockllm.dsh.chunks import (
    Block,
    BlockEnd,
    BlockStart,
    FinishChunk,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
)
from mockllm.script.entries import ChunksEntry, Entry


class Piece(NamedTuple):
    block_index: int  # the recorded block's
    kind: str  # "text", "reasoning" or "tool-call"
    text: str  # a text, or a tool call's arguments (JSON text)
    id: str | None = None  # a tool call's
    name: str | None = None  # a tool call's
    whole: bool = False  # a block recorded with no deltas


def entry_pieces(entry: Entry) -> Iterator[Piece | UsageChunk | FinishChunk]:
    """The pieces of a chunks entry's answer, with its usage and finish chunks, in recorded order."""
    assert isinstance(entry, ChunksEntry)
    ended = ended_blocks(entry)
    with_deltas = {c.index for c in entry.chunks if isinstance(c, TextDelta | ReasoningDelta | ToolCallDelta)}
    for chunk in entry.chunks:
        if isinstance(chunk, TextDelta):
            yield Piece(chunk.index, "text", chunk.text)
        elif isinstance(chunk, ReasoningDelta):
            yield Piece(chunk.index, "reasoning", chunk.text)
        elif isinstance(chunk, ToolCallDelta):
            yield Piece(chunk.index, "tool-call", chunk.argumentsDelta, chunk.id, chunk.name)
        elif isinstance(chunk, BlockStart) and chunk.index not in with_deltas and chunk.index in ended:
            block = ended[chunk.index]
            if block.type == "tool-call":
                arguments = block.arguments if isinstance(block.arguments, str) else json.dumps(block.arguments)
                yield Piece(chunk.index, "tool-call", arguments, block.id, block.name, whole=True)
            else:
                yield Piece(chunk.index, block.type, block.text or "", whole=True)
        elif isinstance(chunk, UsageChunk | FinishChunk):
            yield chunk


def ended_blocks(entry: ChunksEntry) -> dict[int, Block]:
    """Each recorded block as its `BlockEnd` gives it, by index."""
    return {c.index: c.block for c in entry.chunks if isinstance(c, BlockEnd)}
