"""Tool calls sent whole: for dialects whose wire has no argument fragments (Gemini, Ollama).

dsh records a tool call as argument fragments (`tool-call-delta`s), as OpenAI and Anthropic stream
them; Gemini's `functionCall` part and Ollama's `tool_calls` carry the arguments as one object. A
`WholeCallRender` joins a call's fragments and sends the call once, when its block ends (where a
provider that sends calls whole sends it: after the model finished writing it), or at the end of
the call for a block recorded with no `block-end`.

A call recorded cut mid-arguments (max tokens stopped the model while it wrote them) has arguments
that are not a JSON object. These wires carry an object only (google-genai raises `functionCall.args
Input should be a valid dictionary`, ollama's client a validation error too), so such a call goes
out with `{}`; the run notes it (`cut_calls` finds them, `Dialect.whole_calls` says which dialects).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, cast

import msgspec

from mockllm.dsh.chunks import Block, BlockEnd, BlockStart, ReasoningDelta, TextDelta, ToolCallDelta
from mockllm.script.entries import Entry, HangEntry
from mockllm.wire.envelope import Envelope
from mockllm.wire.render import CallRender, Reading, Run


class WholeCall:
    """One tool call being joined: its recorded block index, its order among the call's tool calls,
    its identity and its fragments."""

    __slots__ = ("call_id", "index", "name", "ordinal", "parts", "sent")

    def __init__(self, index: int, ordinal: int, call_id: str | None, name: str | None) -> None:
        self.index = index
        self.ordinal = ordinal
        self.call_id = call_id
        self.name = name
        self.parts: list[str] = []
        self.sent = False

    @property
    def text(self) -> str:
        return "".join(self.parts)

    @property
    def arguments(self) -> dict[str, Any]:
        return arguments_object(self.text)


def arguments_object(text: str) -> dict[str, Any]:
    """Recorded arguments as the object these wires carry: empty is `{}`, and so is anything that is
    not a JSON object (a call cut short when recorded), which their clients would refuse."""
    if not text.strip():
        return {}
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def cut_calls(entry: Entry) -> tuple[str, ...]:
    """The names of an entry's tool calls whose recorded arguments are not a JSON object (cut short,
    most often by max tokens): sent with `{}` by these wires."""
    if isinstance(entry, HangEntry):
        return ()
    parts: dict[int, list[str]] = {}
    names: dict[int, str] = {}
    for chunk in entry.chunks:
        if isinstance(chunk, ToolCallDelta):
            parts.setdefault(chunk.index, []).append(chunk.argumentsDelta)
            if chunk.name:
                names.setdefault(chunk.index, chunk.name)
        elif isinstance(chunk, BlockEnd) and chunk.block.type == "tool-call":
            if chunk.block.name:
                names.setdefault(chunk.index, chunk.block.name)
            if chunk.index not in parts:  # a block recorded with no deltas: its assembled arguments
                arguments = chunk.block.arguments
                parts[chunk.index] = [arguments if isinstance(arguments, str) else msgspec.json.encode(
                    arguments).decode()]
    return tuple(names.get(i, "?") for i in sorted(parts) if not _is_object("".join(parts[i])))


def _is_object(text: str) -> bool:
    if not text.strip():
        return True  # no arguments at all: `{}` is what was meant
    try:
        return isinstance(msgspec.json.decode(text), dict)
    except msgspec.DecodeError:
        return False


class WholeCallRender(CallRender):
    """A CallRender whose tool calls go out whole: subclasses say how (`send_call`) and call
    `flush_calls()` before their closing frames. A run of text or reasoning deltas after its first
    goes to `text_run` / `reasoning_run`, one frame a delta; a run of a tool call's fragments only
    adds to the call."""

    def __init__(self, envelope: Envelope, reading: Reading) -> None:
        self._calls: dict[int, WholeCall] = {}  # recorded block index -> call, in call order
        self._chunks = reading.chunks  # a tool run's fragments may name the call its first did not
        self._last: TextDelta | ReasoningDelta | ToolCallDelta | None = None  # what more() goes on with
        super().__init__(envelope, reading)

    def text(self, chunk: TextDelta) -> None:
        self._last = chunk
        self.text_text(chunk.index, chunk.text)

    def reasoning(self, chunk: ReasoningDelta) -> None:
        self._last = chunk
        self.reasoning_text(chunk.index, chunk.text)

    def tool_delta(self, chunk: ToolCallDelta) -> None:
        self._last = chunk
        self._call(chunk.index, chunk.id, chunk.name).parts.append(chunk.argumentsDelta)

    def more(self, run: Run) -> None:
        last = self._last
        if isinstance(last, TextDelta):
            self.text_run(last.index, run)
        elif isinstance(last, ReasoningDelta):
            self.reasoning_run(last.index, run)
        else:
            assert last is not None
            call = self._calls[last.index]
            call.parts.append(run.text)
            if not (call.call_id and call.name):  # else no later fragment changes who it is
                start = self.frames.chunk + 1
                for chunk in cast("list[ToolCallDelta]", self._chunks[start : start + run.count]):
                    call.call_id = call.call_id or chunk.id
                    call.name = call.name or chunk.name

    def whole_block(self, start: BlockStart, block: Block) -> None:
        """A block recorded with no deltas: its content at once (a tool call waits for its end)."""
        if block.type == "tool-call":
            arguments = block.arguments if isinstance(block.arguments, str) else msgspec.json.encode(
                block.arguments).decode()
            self._call(start.index, block.id, block.name).parts.append(arguments)
        elif block.type == "reasoning":
            self.reasoning_text(start.index, block.text or "")
        elif block.type == "text":
            self.text_text(start.index, block.text or "")

    def block_end(self, chunk: BlockEnd) -> None:
        call = self._calls.get(chunk.index)
        if call is not None and not call.sent:
            self._send(call)

    def flush_calls(self) -> None:
        """Send every call whose block never ended, in call order."""
        for call in self._calls.values():
            if not call.sent:
                self._send(call)

    @property
    def whole_calls(self) -> list[WholeCall]:
        """Every tool call of the reply, in call order."""
        return list(self._calls.values())

    def _call(self, index: int, call_id: str | None, name: str | None) -> WholeCall:
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = WholeCall(index, len(self._calls), call_id, name)
        call.call_id = call.call_id or call_id
        call.name = call.name or name
        return call

    def _send(self, call: WholeCall) -> None:
        block = self.ended.get(call.index)  # the block-end fills what the fragments did not say
        if block is not None:
            call.call_id = call.call_id or block.id
            call.name = call.name or block.name
        call.sent = True
        self.send_call(call)

    @abstractmethod
    def text_text(self, index: int, text: str) -> None:
        """One text delta's frame (`index`: its recorded block)."""

    @abstractmethod
    def reasoning_text(self, index: int, text: str) -> None:
        """One reasoning delta's frame (`index`: its recorded block)."""

    @abstractmethod
    def text_run(self, index: int, run: Run) -> None:
        """The frames of a run of text deltas after the one `text_text` sent (`frames.run`)."""

    @abstractmethod
    def reasoning_run(self, index: int, run: Run) -> None:
        """The frames of a run of reasoning deltas after the one `reasoning_text` sent."""

    @abstractmethod
    def send_call(self, call: WholeCall) -> None:
        """One whole tool call's frame."""
