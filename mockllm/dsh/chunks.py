"""StreamChunk: dsh's provider-neutral unit of a streamed model call.

A recorded call is a list of chunks; the wire dialects turn them back into SSE. The structs mirror
dsh's JSON exactly (camelCase field names) so one decoder reads them with no renaming layer.
"""

from __future__ import annotations

from typing import Any

import msgspec


class TokenUsage(msgspec.Struct, omit_defaults=True, gc=False):
    inputTokens: int = 0
    outputTokens: int = 0
    cacheReadTokens: int | None = None
    cacheWriteTokens: int | None = None
    reasoningTokens: int | None = None


class Failure(msgspec.Struct, omit_defaults=True, gc=False):
    message: str | None = None
    code: str | None = None


class FinishReason(msgspec.Struct, omit_defaults=True, gc=False):
    """`kind` is stop | tool-calls | max-tokens | aborted | error (others kept as written)."""

    kind: str
    message: str | None = None
    code: str | None = None
    failure: Failure | None = None

    @property
    def error_message(self) -> str | None:
        # Newer fixtures nest the error under `failure`; older ones put it on the reason itself.
        if self.failure is not None and self.failure.message is not None:
            return self.failure.message
        return self.message

    @property
    def error_code(self) -> str | None:
        if self.failure is not None and self.failure.code is not None:
            return self.failure.code
        return self.code


class Block(msgspec.Struct, omit_defaults=True, gc=False):
    """An assembled content block, as carried by `block-end` (text, reasoning or tool-call)."""

    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    arguments: Any = None


class Chunk(msgspec.Struct, tag_field="type", omit_defaults=True, gc=False):
    """Base of the StreamChunk union; `index` is the block index within the call."""


class BlockStart(Chunk, tag="block-start"):
    index: int
    blockType: str


class TextDelta(Chunk, tag="text-delta"):
    index: int
    text: str


class ReasoningDelta(Chunk, tag="reasoning-delta"):
    index: int
    text: str


class ToolCallDelta(Chunk, tag="tool-call-delta"):
    index: int
    argumentsDelta: str = ""
    id: str | None = None
    name: str | None = None


class BlockEnd(Chunk, tag="block-end"):
    index: int
    block: Block


class UsageChunk(Chunk, tag="usage"):
    usage: TokenUsage


class FinishChunk(Chunk, tag="finish"):
    reason: FinishReason


StreamChunk = BlockStart | TextDelta | ReasoningDelta | ToolCallDelta | BlockEnd | UsageChunk | FinishChunk
