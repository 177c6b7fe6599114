"""Bedrock Converse requests in neutral form.

The model and whether to stream are in the path (`model/{modelId}/converse` or
`/converse-stream`), not the body. The neutral conversation (what header-less routing and
divergence compare): `system`'s text blocks as a leading system message; each of `messages` by
role, its content blocks read as Anthropic's are: `text` blocks joined, `toolUse` blocks as its
tool calls (`input` encoded canonically, sorted keys), each `toolResult` block as one tool message
naming its `toolUseId`, before the rest of its message; `reasoningContent` and `cachePoint` blocks
dropped (clients may or may not send reasoning back, and move their cache points every call);
any other block (image, document, guardContent) as its canonical JSON. A tool result's text is
its `text` items joined, a `json` item as its canonical JSON. Field names are the camelCase that
botocore sends. Templates (`{{fromRequest:…}}`) search `system`, then `messages`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from mockllm.errors import RequestError
from mockllm.wire.request import NO_TOOLS, Message, Request, ToolCall

_encode = msgspec.json.encode
_NONE = msgspec.Raw()  # a Raw field's "absent" (msgspec.Raw cannot be Optional)

VERBS = {"converse": False, "converse-stream": True}  # the route's last segment -> streams
_DROPPED = ("reasoningContent", "cachePoint")


class _ConverseRequest(msgspec.Struct, rename="camel"):
    # Left undecoded: with a session header and no templates nothing reads them.
    messages: list[msgspec.Raw]
    system: msgspec.Raw = _NONE
    tool_config: msgspec.Raw = NO_TOOLS


_request_decoder = msgspec.json.Decoder(_ConverseRequest)


def _canonical(value: Any) -> str:
    return _encode(value, order="sorted").decode()


def result_text(content: Any) -> str:
    """A `toolResult`'s content as the tool message's text."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else _canonical(content)
    texts = []
    for item in content:
        if isinstance(item, dict) and isinstance(item.get("text"), str):
            texts.append(item["text"])
        elif isinstance(item, dict) and "json" in item:
            value = item["json"]
            texts.append(value if isinstance(value, str) else _canonical(value))
        else:
            texts.append(_canonical(item))
    return "".join(texts)


def converse_message(message: Any) -> list[Message]:
    """One Converse message in neutral form: its tool results become tool messages."""
    if not isinstance(message, dict):
        return [Message(None, _canonical(message))]
    role = message.get("role")
    content = message.get("content")
    if not isinstance(content, list):
        return [Message(role, "" if content is None else _canonical(content))]
    out: list[Message] = []
    texts: list[str] = []
    calls: list[ToolCall] = []
    rest = False  # anything but tool results: the message is one of its own too
    for block in content:
        if not isinstance(block, dict):
            texts.append(_canonical(block))
            rest = True
        elif "toolResult" in block:
            result = block["toolResult"] if isinstance(block["toolResult"], dict) else {}
            out.append(Message("tool", result_text(result.get("content")), tool_call_id=result.get("toolUseId")))
        elif "toolUse" in block:
            use = block["toolUse"] if isinstance(block["toolUse"], dict) else {}
            calls.append(ToolCall(use.get("toolUseId"), use.get("name"), _canonical(use.get("input", {}))))
            rest = True
        elif isinstance(block.get("text"), str):
            texts.append(block["text"])
            rest = True
        elif not any(key in block for key in _DROPPED):
            texts.append(_canonical(block))
            rest = True
        # Reasoning and cache points are no content of their own: tool results followed by a cache
        # point are still only tool results, as the same turn sent without one.
    if rest or not out:
        out.append(Message(role, "".join(texts), tuple(calls)))
    return out


def converse_messages(conversation: dict[str, Any]) -> list[Message]:
    """A request's `system` and `messages` (raw or decoded) as neutral messages."""
    out: list[Message] = []
    system = conversation.get("system")
    if isinstance(system, msgspec.Raw):
        system = msgspec.json.decode(system)
    if isinstance(system, list):
        out.append(Message("system", "".join(b["text"] for b in system
                                             if isinstance(b, dict) and isinstance(b.get("text"), str))))
    elif isinstance(system, str):  # not Bedrock's shape, but its meaning is plain
        out.append(Message("system", system))
    for message in conversation["messages"]:
        out.extend(converse_message(msgspec.json.decode(message) if isinstance(message, msgspec.Raw) else message))
    return out


def tool_names(raw: Any) -> frozenset[str]:
    """Names of the tools a request offers: `toolConfig.tools[].toolSpec.name`."""
    config = msgspec.json.decode(raw) if isinstance(raw, msgspec.Raw) else raw
    tools = config.get("tools") if isinstance(config, dict) else None
    names = set()
    for tool in tools if isinstance(tools, list) else ():
        spec = tool.get("toolSpec") if isinstance(tool, dict) else None
        if isinstance(spec, dict) and isinstance(spec.get("name"), str):
            names.add(spec["name"])
    return frozenset(names)


def decode_request(body: bytes, model: str | None = None, stream: bool = False) -> Request:
    """The neutral request; raises RequestError naming what is wrong."""
    try:
        request = _request_decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise RequestError(f"request body is not a Bedrock Converse request ({exc}); "
                           'expected JSON with a non-empty "messages" array') from None
    if not request.messages:
        raise RequestError('"messages" is empty')
    # A dict, so templates walk `system` before `messages`, as a system message comes first.
    conversation: dict[str, Any] = {"messages": request.messages}
    if request.system:
        conversation = {"system": request.system, **conversation}
    tools = request.tool_config if request.tool_config and b'"tools"' in bytes(request.tool_config) else None
    return Request(stream, True, model, conversation, converse_messages, raw_tools=tools, _decode_tools=tool_names)


def decode_routed(body: bytes, params: Mapping[str, str]) -> Request:
    """A request to `…/model/{modelId}/{verb}`: the model and streaming from the path. botocore
    percent-encodes the model id (`…-v1%3A0`, an ARN's `%2F`); the route's parameter is decoded."""
    verb = params.get("verb", "converse")
    if verb not in VERBS:
        raise RequestError(f"mockllm serves model/{{modelId}}/converse and /converse-stream, not /{verb}")
    return decode_request(body, params.get("modelId"), VERBS[verb])
