"""Anthropic Messages requests in neutral form.

A request's neutral conversation (what header-less routing compares): `system` (a string or text
blocks) as a leading system message; each message's text blocks joined; an assistant's `tool_use`
blocks as its tool calls, their input JSON-encoded canonically (sorted keys) so a client's key order
never matters; each `tool_result` block as one tool message naming its `tool_use_id`, before the
rest of its user message; `thinking` and `redacted_thinking` blocks dropped (clients may or may not
send them back), and `cache_control` ignored (clients move their cache breakpoints every call).
Templates (`{{fromRequest:…}}`) search `system`, then `messages`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from mockllm.errors import RequestError
from mockllm.wire.request import NO_TOOLS, Message, Request, ToolCall, tool_names

_encode = msgspec.json.encode

_NO_SYSTEM = msgspec.Raw()  # `system` absent (msgspec.Raw cannot be Optional)


class _MessagesRequest(msgspec.Struct):
    # Left undecoded: with a session header and no templates nothing reads them.
    messages: list[msgspec.Raw]
    model: str | None = None
    system: msgspec.Raw = _NO_SYSTEM
    stream: bool | None = False
    tools: msgspec.Raw = NO_TOOLS  # msgspec.Raw cannot be Optional: an empty Raw means absent


_request_decoder = msgspec.json.Decoder(_MessagesRequest)


def _text_of(content: Any) -> str:
    """Content (a string or blocks) as one string: text blocks by their text, others as their JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_block_text(block) for block in content)
    return _encode(content).decode()


def _block_text(block: Any) -> str:
    if isinstance(block, dict):
        if block.get("type") == "text":
            return str(block.get("text") or "")
        block = {k: v for k, v in block.items() if k != "cache_control"}
    return _encode(block).decode()


def _canonical(value: Any) -> str:
    return _encode(value, order="sorted").decode()


def _message(message: Any) -> list[Message]:
    """One Messages API message in neutral form: a user turn's tool results become tool messages."""
    if not isinstance(message, dict):
        return [Message(None, _encode(message).decode())]
    role = message.get("role")
    content = message.get("content")
    if not isinstance(content, list):
        return [Message(role, _text_of(content))]
    out: list[Message] = []
    texts: list[str] = []
    calls: list[ToolCall] = []
    rest = False  # anything but tool results: the turn is a message of its own too
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_result":
            out.append(Message("tool", _text_of(block.get("content")), tool_call_id=block.get("tool_use_id")))
        elif kind == "tool_use":
            calls.append(ToolCall(block.get("id"), block.get("name"), _canonical(block.get("input"))))
            rest = True
        elif kind in ("thinking", "redacted_thinking"):
            rest = True
        else:
            texts.append(_block_text(block))
            rest = True
    if rest or not out:
        out.append(Message(role, "".join(texts), tuple(calls)))
    return out


def anthropic_messages(conversation: dict[str, Any]) -> list[Message]:
    """A request's `system` and `messages` (raw or decoded) as neutral messages."""
    out: list[Message] = []
    system = conversation.get("system")
    if isinstance(system, msgspec.Raw):
        system = msgspec.json.decode(system)
    if system is not None:
        out.append(Message("system", _text_of(system)))
    for message in conversation["messages"]:
        out.extend(_message(msgspec.json.decode(message) if isinstance(message, msgspec.Raw) else message))
    return out


def decode_request(body: bytes) -> Request:
    """The neutral request; raises RequestError naming what is wrong."""
    try:
        request = _request_decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise RequestError(f"request body is not an Anthropic Messages request ({exc}); "
                           'expected JSON with a non-empty "messages" array') from None
    if not request.messages:
        raise RequestError('"messages" is empty')
    # A dict, so templates walk `system` before `messages`, as a chat request's system message comes first.
    conversation: dict[str, Any] = {"messages": request.messages}
    if request.system:
        conversation = {"system": request.system, **conversation}
    return Request(bool(request.stream), True, request.model, conversation, anthropic_messages,
                   raw_tools=request.tools or None, _decode_tools=tool_names)
