"""Ollama `/api/chat` requests in neutral form.

`messages` carry `role`, `content`, an assistant's `thinking` (dropped, as reasoning is everywhere:
clients may or may not send it back) and `tool_calls` (`{"function": {"name", "arguments": {…}}}`,
arguments an object, encoded canonically with sorted keys so key order never matters), and a tool
result's `tool_name`. Ollama's wire has no tool-call ids (the official client drops them); a
`tool_call_id` or a call's `id`, where a client sends one, is kept, else it is None and divergence
matches tool results by position (`replay.divergence`).

`stream` is true unless the request says false (Ollama's default). The official client always
sends `"tools": []`: an empty list offers nothing and restricts nothing, so it counts as no list
at all (a recorded tool call is then never "a tool not offered").
"""

from __future__ import annotations

from typing import Any

import msgspec

from mockllm.errors import RequestError
from mockllm.wire.request import NO_TOOLS, Message, Request, ToolCall, tool_names

_encode = msgspec.json.encode


class _ChatRequest(msgspec.Struct):
    # Left undecoded: with a session header and no templates nothing reads them.
    messages: list[msgspec.Raw] = msgspec.field(default_factory=list)
    model: str | None = None
    stream: bool | None = True
    tools: msgspec.Raw = NO_TOOLS  # msgspec.Raw cannot be Optional: an empty Raw means absent


_request_decoder = msgspec.json.Decoder(_ChatRequest)


def _canonical(value: Any) -> str:
    return value if isinstance(value, str) else _encode(value, order="sorted").decode()


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    return content if isinstance(content, str) else _encode(content).decode()


def ollama_message(message: Any) -> Message:
    """One Ollama message (decoded, or still raw JSON) in neutral form."""
    if isinstance(message, msgspec.Raw):
        message = msgspec.json.decode(message)
    if not isinstance(message, dict):
        return Message(None, _encode(message).decode())
    calls = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            calls.append(ToolCall(call.get("id"), function.get("name"), _canonical(function.get("arguments") or {})))
    return Message(message.get("role"), _text_of(message.get("content")), tuple(calls),
                   message.get("tool_call_id"), message.get("tool_name"))


def ollama_messages(messages: list[Any]) -> list[Message]:
    return [ollama_message(m) for m in messages]


def offers_tools(raw: msgspec.Raw) -> bool:
    """Whether a `tools` field offers any tool: absent, null and `[]` do not."""
    return b"".join(bytes(raw).split()) not in (b"", b"[]", b"null")


def decode_request(body: bytes) -> Request:
    """The neutral request; raises RequestError naming what is wrong."""
    try:
        chat = _request_decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise RequestError(f"request body is not an Ollama chat request ({exc}); "
                           'expected JSON with a non-empty "messages" array') from None
    if not chat.messages:
        raise RequestError('"messages" is empty')
    tools = chat.tools if offers_tools(chat.tools) else None
    return Request(chat.stream is not False, True, chat.model, chat.messages, ollama_messages,
                   raw_tools=tools, _decode_tools=tool_names)
