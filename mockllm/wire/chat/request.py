"""Chat completions requests in neutral form: `messages` as Messages, tool calls and all.

The messages stay undecoded until routing, a template or a comparison asks for them; a plain text
message (most of any history) takes a typed decode several times cheaper than a dict.
"""

from __future__ import annotations

from typing import Any

import msgspec

from mockllm.errors import RequestError
from mockllm.wire.request import NO_TOOLS, Message, Request, ToolCall, tool_names

_encode = msgspec.json.encode


class _ChatRequest(msgspec.Struct):
    # Left undecoded: with a session header and no templates nothing reads them.
    messages: list[msgspec.Raw]
    model: str | None = None
    stream: bool | None = False
    stream_options: dict[str, Any] | None = None
    tools: msgspec.Raw = NO_TOOLS  # msgspec.Raw cannot be Optional: an empty Raw means absent


_request_decoder = msgspec.json.Decoder(_ChatRequest)


def text_of(content: Any) -> str:
    """A message's content as one string: `null` is "", parts compare by their text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "") if isinstance(part, dict) and "text" in part else _encode(part).decode()
            for part in content
        )
    return _encode(content).decode()


def _arguments(value: Any) -> str | None:
    return value if value is None or isinstance(value, str) else _encode(value).decode()


class _PlainMessage(msgspec.Struct):
    """The common message shape: a role and string (or absent) content, nothing else that matters."""

    role: str | None = None
    content: str | None = None
    tool_call_id: str | None = None
    name: str | None = None
    tool_calls: msgspec.Raw = msgspec.Raw()  # only to see that there are some: those take the general path


_plain_decoder = msgspec.json.Decoder(_PlainMessage)


def chat_message(message: Any) -> Message:
    """One chat message (decoded, or still raw JSON) in neutral form; `reasoning_content` is dropped
    and a `developer` message reads as `system`."""
    if isinstance(message, msgspec.Raw):
        # Most messages are plain text: a typed decode is several times cheaper than building a
        # dict. Anything else (tool calls, content parts, odd values) takes the general path.
        try:
            plain = _plain_decoder.decode(message)
        except msgspec.DecodeError:
            pass
        else:
            if bytes(plain.tool_calls) in (b"", b"null"):
                return Message(_role(plain.role), plain.content or "", (), plain.tool_call_id, plain.name)
        message = msgspec.json.decode(message)
    if not isinstance(message, dict):
        return Message(None, _encode(message).decode())
    tool_calls = tuple(
        ToolCall(call.get("id"), (call.get("function") or {}).get("name"),
                 _arguments((call.get("function") or {}).get("arguments")))
        for call in message.get("tool_calls") or ()
        if isinstance(call, dict)
    )
    return Message(_role(message.get("role")), text_of(message.get("content")), tool_calls,
                   message.get("tool_call_id"), message.get("name"))


def _role(role: Any) -> Any:
    """A `developer` message is the system prompt (OpenAI's newer name for it, agno's default), as
    Responses reads it: two subagents asked the same thing with different developer prompts are
    told apart by it, and a recording keeps it as the session's system prompt."""
    return "system" if role == "developer" else role


def chat_messages(messages: list[Any]) -> list[Message]:
    return [chat_message(m) for m in messages]


def chat_tail(messages: list[Any]) -> list[Message]:
    """The messages after the last assistant one, decoding from the end only as far as that."""
    tail: list[Message] = []
    for raw in reversed(messages):
        message = chat_message(raw)
        if message.role == "assistant":
            break
        tail.append(message)
    tail.reverse()
    return tail


def decode_request(body: bytes) -> Request:
    """The neutral request; raises RequestError naming what is wrong."""
    try:
        chat = _request_decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise RequestError(f"request body is not a chat completions request ({exc}); "
                           'expected JSON with a non-empty "messages" array') from None
    if not chat.messages:
        raise RequestError('"messages" is empty')
    include_usage = bool((chat.stream_options or {}).get("include_usage"))
    return Request(bool(chat.stream), include_usage, chat.model, chat.messages, chat_messages,
                   raw_tools=chat.tools or None, _decode_tools=tool_names, _decode_tail=chat_tail)
