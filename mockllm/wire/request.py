"""A live model request in neutral form: what routing, templates and input comparison read.

Every dialect decodes its requests into these (`Dialect.decode_request`); nothing above the wire
package sees a dialect's own request shape.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec


class ToolCall(NamedTuple):
    """A tool call the assistant made, as the conversation carries it back."""

    id: str | None
    name: str | None
    arguments: str | None  # as sent: a JSON text (dialects with structured input encode it canonically)


class Message(NamedTuple):
    """One conversation message in neutral form.

    `role` is system, user, assistant or tool; `text` joins the message's text parts (reasoning is
    left out: clients strip it from older turns); a tool result is a `tool` message naming the call
    it answers in `tool_call_id`.
    """

    role: str | None
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None


@dataclass(slots=True)
class Request:
    """A live model request in neutral form.

    The conversation stays undecoded until routing, a template or a comparison asks for it: with a
    session header and no templates nothing reads it, and decoding a long agent history would be
    most of a request's work before its first byte.
    """

    stream: bool
    include_usage: bool  # dialects that always send usage say True
    model: str | None
    raw_conversation: Any  # the dialect's conversation field(s), undecoded: templates search its strings
    _decode: Callable[[Any], list[Message]] = field(repr=False)
    # The id of an earlier reply this request continues (OpenAI Responses' previous_response_id).
    continues: str | None = None
    # The names of the tools the request offers (its `tools` field), decoded on first use; None
    # when it sends no `tools` at all (then any tool call is the agent's business).
    raw_tools: Any = None
    _decode_tools: Callable[[Any], frozenset[str]] | None = field(default=None, repr=False)
    # Decodes only the messages after the last assistant message, where a dialect can do that
    # without decoding the whole history (every request's new inputs are compared).
    _decode_tail: Callable[[Any], list[Message]] | None = field(default=None, repr=False)
    _messages: list[Message] | None = field(default=None, repr=False)
    _tail: list[Message] | None = field(default=None, repr=False)

    @property
    def messages(self) -> list[Message]:
        """The conversation, decoded on first use."""
        if self._messages is None:
            self._messages = self._decode(self.raw_conversation)
        return self._messages

    @property
    def tail(self) -> list[Message]:
        """The messages after the last assistant message (all of them when there is none)."""
        if self._tail is None:
            if self._messages is None and self._decode_tail is not None:
                self._tail = self._decode_tail(self.raw_conversation)
            else:
                self._tail = messages_after_last_assistant(self.messages)
        return self._tail

    @property
    def offered_tools(self) -> frozenset[str] | None:
        if self.raw_tools is None or self._decode_tools is None:
            return None
        return self._decode_tools(self.raw_tools)


def system_text(messages: list[Message]) -> str | None:
    """The system prompt a conversation opens with: its leading system messages (a chat request's,
    Anthropic's `system`, Responses' `instructions`), their texts joined by newlines; None when it
    opens with none."""
    texts = []
    for message in messages:
        if message.role != "system":
            break
        texts.append(message.text)
    return "\n".join(texts) if texts else None


def messages_after_last_assistant(messages: list[Message]) -> list[Message]:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "assistant":
            return messages[index + 1 :]
    return messages


NO_TOOLS = msgspec.Raw()  # a request struct's `tools` when the field is absent (falsy)


def tool_names(raw: Any) -> frozenset[str]:
    """Names of the tools a request offers: `[{"function": {"name": …}}]` (chat completions) or
    `[{"name": …}]` (Anthropic Messages, OpenAI Responses)."""
    tools = msgspec.json.decode(raw) if isinstance(raw, msgspec.Raw) else raw
    names = set()
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict):
            function = tool.get("function")
            name = function.get("name") if isinstance(function, dict) else tool.get("name")
            if isinstance(name, str):
                names.add(name)
    return frozenset(names)
