"""What an agent sent before each recorded model call: its recorded inputs, and their comparison form.

A call's recorded inputs are the session's own `user/message` texts and `tool/result` outputs
(each with the id of the tool call it answers) logged since the previous call, in order. A live
request's new inputs are its user and tool messages after its last assistant message. Both are
compared as `Input`s: role, text, and for a tool result its call id. System prompts are not
recorded inputs, so they are never compared.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec

from mockllm.dsh.names import TOOL_RESULT, USER_MESSAGE


class Input(NamedTuple):
    """One input of a model call: a user message, or a tool result naming its tool call."""

    role: str  # "user" | "tool"
    text: str
    tool_call_id: str | None = None

    def describe(self) -> str:
        """How a report names this input: `the user message`, `the tool result for call_abc`."""
        return "the user message" if self.role == "user" else f"the tool result for {self.tool_call_id or '?'}"


def parts_text(content: Any) -> str:
    """Text of a recorded content value: a string, or parts whose `text` fields are joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str))
    return msgspec.json.encode(content).decode()


def recorded_inputs(event_type: str, raw: msgspec.Raw) -> list[Input]:
    """The inputs one `user/message` or `tool/result` event records (none for anything else).

    Two tool/result layouts exist: older logs put `callId` and `content` on the data; newer ones
    nest a message whose `tool-result` parts each name their `toolCallId`. Only a comparison
    decodes them (`RecordedInputs.items`), once per call.
    """
    try:
        data = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return []
    if not isinstance(data, dict):
        return []
    if event_type == USER_MESSAGE:
        return [Input("user", parts_text(data.get("content")))]
    if event_type != TOOL_RESULT:
        return []
    message = data.get("message")
    if isinstance(message, dict):
        results = [p for p in message.get("content") or () if isinstance(p, dict) and p.get("type") == "tool-result"]
        if results:
            return [Input("tool", parts_text(p.get("content")), p.get("toolCallId")) for p in results]
        source = message.get("source") or {}
        return [Input("tool", parts_text(message.get("content")), source.get("callId"))]
    return [Input("tool", parts_text(data.get("content")), data.get("callId"))]


class RecordedInputs(msgspec.Struct, gc=False):
    """A call's recorded inputs, kept as the events' JSON and decoded on first use (`items`).

    A load reads every log of a suite, and most inputs are never compared: copying an event's
    bytes is far cheaper than decoding its text (tool outputs can be long). It holds only a str
    and a bytes, and is not tracked by the cyclic collector: tracked objects made while a large
    suite loads (a tuple per call was enough) trigger full collections over all it loaded so far.
    """

    kinds: str  # each event's type (user/message or tool/result), one per line
    events: bytes  # a JSON array of each event's `data`, as recorded
    decoded: tuple[Input, ...] | None = None

    @classmethod
    def of(cls, kinds: list[str], raws: list[bytes]) -> RecordedInputs | None:
        """The inputs of events `kinds` with data `raws`; None when there are none."""
        if not kinds:
            return None
        return cls("\n".join(kinds), b"[" + b",".join(raws) + b"]")

    @property
    def items(self) -> tuple[Input, ...]:
        if self.decoded is None:
            raws = _raw_list.decode(self.events)
            self.decoded = tuple(item for kind, raw in zip(self.kinds.split("\n"), raws, strict=True)
                                 for item in recorded_inputs(kind, raw))
        return self.decoded


_raw_list = msgspec.json.Decoder(list[msgspec.Raw])
