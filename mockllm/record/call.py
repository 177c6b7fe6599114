"""What the proxy saw of one model call: the request's new inputs and the answer's timed chunks.

A request's new inputs are what replay compares a live request by (`replay.divergence.live_inputs`:
its user and tool messages after its last assistant message), so what is recorded is what the
replay of the same request will find (`mockllm.script.inputs` reads it back); system prompts are not
inputs, but a session's first system prompt is kept (`system`): it tells apart subagents asked the
same thing, when replay binds them. A request whose last message is a user message starts a new
turn; one ending in tool results (or anything else) is the next step of the turn in progress.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mockllm.dsh.chunks import Block, BlockEnd, FinishChunk, FinishReason, StreamChunk
from mockllm.replay.divergence import live_inputs
from mockllm.script.inputs import Input
from mockllm.wire.request import Message, messages_after_last_assistant


@dataclass(frozen=True, slots=True)
class TimedChunk:
    time: int  # epoch ms the chunk's bytes arrived
    chunk: StreamChunk


@dataclass(slots=True)
class ObservedCall:
    inputs: list[Input]
    starts_turn: bool
    started: int  # epoch ms the request arrived
    chunks: list[TimedChunk] = field(default_factory=list)
    # The request's place in the order requests reached the recorder (ms can tie; this cannot):
    # sessions are numbered, and lineage is read, by it.
    arrival: int = 0
    offers_tools: bool = False  # the request offered tools (a title call offers none)
    system: str | None = None  # its system prompt, read for a session's first call only
    tools: frozenset[str] | None = None  # the names of the tools it offered (None: no `tools`), ditto
    # What the provider sent, as it sent it (`wire.recorded`): the dialect, and its stream's
    # events or its whole answer's body.
    dialect: str | None = None
    events: list[tuple[str | None, bytes]] = field(default_factory=list)
    body: bytes | None = None

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


def observe(messages: list[Message], started: int, *, arrival: int = 0, offers_tools: bool = False,
            system: str | None = None, tools: frozenset[str] | None = None) -> ObservedCall:
    """A call about to be made with `messages` (the whole conversation, or only its messages after
    the last assistant message, `Request.tail`: either gives the same): its new inputs and whether
    it starts a turn."""
    call = ObservedCall([], False, started, arrival=arrival, offers_tools=offers_tools, system=system,
                        tools=tools)
    read_inputs(call, messages)
    return call


def read_inputs(call: ObservedCall, messages: list[Message]) -> None:
    """Set what `call`'s request brought (see `observe`): read when the request arrives, or, where
    nothing needs it before the call is recorded, then."""
    tail = messages_after_last_assistant(messages)
    call.inputs = live_inputs(tail)
    call.starts_turn = bool(tail) and tail[-1].role == "user"
