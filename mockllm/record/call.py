"""What the proxy saw of one model call: the request's new inputs and the answer's timed chunks.

A request's new inputs are its user and tool messages after its last assistant message (what
`mockllm.script.inputs` reads back as a call's recorded inputs); system prompts are not inputs. A request
whose last message is a user message starts a new turn; one ending in tool results (or anything
else) is the next step of the turn in progress.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mockllm.dsh.chunks import Block, BlockEnd, FinishChunk, FinishReason, StreamChunk
from mockllm.wire.request import Message, messages_after_last_assistant

INPUT_ROLES = ("user", "tool")


@dataclass(frozen=True, slots=True)
class TimedChunk:
    time: int  # epoch ms the chunk's bytes arrived
    chunk: StreamChunk


@dataclass(slots=True)
class ObservedCall:
    inputs: list[Message]
    starts_turn: bool
    started: int  # epoch ms the request arrived
    chunks: list[TimedChunk] = field(default_factory=list)

    @property
    def ended(self) -> int:
        return self.chunks[-1].time if self.chunks else self.started

    @property
    def finish(self) -> FinishReason | None:
        last = self.chunks[-1].chunk if self.chunks else None
        return last.reason if isinstance(last, FinishChunk) else None

    def blocks(self) -> list[Block]:
        """The assembled blocks, in block order."""
        ended = sorted((c.chunk for c in self.chunks if isinstance(c.chunk, BlockEnd)), key=lambda c: c.index)
        return [c.block for c in ended]

    @property
    def calls_tools(self) -> bool:
        """The answer asks for tool results: the turn goes on with another step."""
        finish = self.finish
        return any(b.type == "tool-call" for b in self.blocks()) or (finish is not None and finish.kind == "tool-calls")


def observe(messages: list[Message], started: int) -> ObservedCall:
    """A call about to be made with `messages`: its new inputs and whether it starts a turn."""
    inputs = [m for m in messages_after_last_assistant(messages) if m.role in INPUT_ROLES]
    starts_turn = bool(messages) and messages[-1].role == "user"
    return ObservedCall(inputs, starts_turn, started)
