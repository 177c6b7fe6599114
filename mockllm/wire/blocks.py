"""A call walked one content block at a time: Anthropic Messages and Bedrock Converse.

Both wires stream a call as numbered content blocks, one open at a time: a block opens (its start
event, with a tool call's id and name), its deltas follow, it stops, and the next one opens. What
is the same in both lives here, once: which recorded block a chunk belongs to, opening a block on
its first delta when the recording has no block-start, stopping the open block before the next
one, a tool call's identity as the client first sees it, and a block recorded whole (no deltas)
sent as one delta. A dialect says only what its events are: a block's start, a delta, a run of
deltas, a block's stop (`new_block`, `delta_frame`, `run_frames`, `close_block`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Generic, Protocol, TypeVar

import msgspec

from mockllm.dsh.chunks import Block, BlockEnd, BlockStart, FinishReason, ReasoningDelta, TextDelta, ToolCallDelta
from mockllm.wire.render import CallRender, Run

# The kinds of recorded block these wires carry; any other (a block type they have no place for)
# is left out.
KINDS = ("text", "reasoning", "tool-call")

_encode = msgspec.json.encode

# How both wires name a recorded finish (Bedrock took Anthropic's names); each dialect names the
# error codes that were, on its wire, a normal stop.
STOP_REASONS = {"stop": "end_turn", "tool-calls": "tool_use", "max-tokens": "max_tokens"}


def finish_stop_reason(reason: FinishReason, error_stops: Mapping[str, str]) -> str:
    """A recorded finish as a block wire's stop reason: its name for the finish kind, `error_stops`'
    for an error code (the code lowercased when it names none), else the kind with `_` for `-`."""
    if reason.kind in STOP_REASONS:
        return STOP_REASONS[reason.kind]
    if reason.kind == "error":
        code = reason.error_code or "error"
        return error_stops.get(code, code.lower())
    return reason.kind.replace("-", "_")


class WireBlock(Protocol):
    """A block as a dialect keeps it: at least what its deltas assembled."""

    parts: list[str]


B = TypeVar("B", bound=WireBlock)


class BlockByBlock(CallRender, Generic[B]):
    """One call as content blocks streamed one at a time (see the module)."""

    def opening(self) -> None:
        self.blocks: list[B] = []  # in wire order
        self._by_index: dict[int, B] = {}  # recorded block index -> its wire block
        self._open: B | None = None  # the block being streamed
        self._last: B | None = None  # the last delta's block: what more() goes on with
        self._identity: dict[int, tuple[str | None, str | None]] | None = None  # made for the first tool call
        self.open_message()

    @abstractmethod
    def open_message(self) -> None:
        """The call's first events (Anthropic's `message_start`, Bedrock's `messageStart`)."""

    @abstractmethod
    def new_block(self, kind: str, wire: int, call_id: str | None, name: str | None) -> B:
        """The block of `kind` opened at wire index `wire` (a tool call's recorded id and name, None
        where none was recorded), its start event framed where the dialect sends one."""

    @abstractmethod
    def delta_frame(self, block: B, value: bytes) -> bytes:
        """The delta event carrying `value` (a JSON-encoded text) in `block`."""

    @abstractmethod
    def run_frames(self, block: B, values: list[bytes]) -> list[bytes]:
        """The delta events of a run of `values` in `block`, as pieces for `Frames.run`."""

    @abstractmethod
    def close_block(self, block: B) -> None:
        """Frame the events that stop `block`."""

    def text(self, chunk: TextDelta) -> None:
        self._delta(chunk.index, "text", chunk.text)

    def reasoning(self, chunk: ReasoningDelta) -> None:
        self._delta(chunk.index, "reasoning", chunk.text)

    def tool_delta(self, chunk: ToolCallDelta) -> None:
        self._delta(chunk.index, "tool-call", chunk.argumentsDelta)

    def more(self, run: Run) -> None:
        block = self._last
        assert block is not None
        block.parts.append(run.text)
        self.frames.run(self.run_frames(block, run.values), run.count)

    def block_start(self, chunk: BlockStart) -> None:
        if chunk.blockType in KINDS:
            self._start(chunk.index, chunk.blockType)

    def whole_block(self, start: BlockStart, block: Block) -> None:
        if block.type in ("text", "reasoning"):
            self._delta(start.index, block.type, block.text or "")
        elif block.type == "tool-call":
            arguments = block.arguments if isinstance(block.arguments, str) else _encode(block.arguments).decode()
            self._delta(start.index, "tool-call", arguments)

    def block_end(self, chunk: BlockEnd) -> None:
        block = self._by_index.get(chunk.index)
        if block is not None and block is self._open:
            self._stop(block)

    def stop_open(self) -> None:
        """Stop the open block, if one is (before the call's closing events)."""
        if self._open is not None:
            self._stop(self._open)

    def _start(self, index: int, kind: str) -> B:
        block = self._by_index.get(index)
        if block is not None:
            return block
        self.stop_open()  # one block at a time
        call_id = name = None
        if kind == "tool-call":
            if self._identity is None:
                self._identity = self.tool_identity()
            call_id, name = self._identity.get(index, (None, None))
        block = self.new_block(kind, len(self.blocks), call_id, name)
        self.blocks.append(block)
        self._by_index[index] = block
        self._open = block
        return block

    def _delta(self, index: int, kind: str, text: str) -> None:
        # A delta with no block-start opens its block; one for a block already stopped (a recording that
        # interleaves blocks) is still sent at its index, so no fragment is lost.
        block = self._last = self._by_index.get(index) or self._start(index, kind)
        block.parts.append(text)
        self.frames.append(self.delta_frame(block, _encode(text)))

    def _stop(self, block: B) -> None:
        self.close_block(block)
        self._open = None
