"""Gemini `generateContent` requests in neutral form.

The model and whether to stream are in the path (`models/{model}:generateContent` or
`:streamGenerateContent`), not the body. The neutral conversation (what header-less routing and
divergence compare): `systemInstruction`'s text parts as a leading system message; each of
`contents` by role (`model` is the assistant); a content's text parts joined, `thought: true` parts
dropped (reasoning is left out everywhere: clients may or may not send it back), `functionCall`
parts as its tool calls (`args` encoded canonically, sorted keys), each `functionResponse` part as
one tool message naming the call's `id` when there is one (no id: divergence matches results by
position) before the rest of its content. A response object's text is its one `output`, `result`
or `content` string when it is just that (how agents wrap a tool's text: ADK uses `result`), else
its canonical JSON. Field names are the camelCase that google-genai sends. Templates
(`{{fromRequest:…}}`) search `systemInstruction`, then `contents`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from mockllm.errors import RequestError
from mockllm.wire.request import NO_TOOLS, Message, Request, ToolCall

_encode = msgspec.json.encode
_NONE = msgspec.Raw()  # a Raw field's "absent" (msgspec.Raw cannot be Optional)

VERBS = {"generateContent": False, "streamGenerateContent": True}  # verb -> streams
_WRAPPED = ("output", "result", "content")


class _GenerateRequest(msgspec.Struct, rename="camel"):
    # Left undecoded: with a session header and no templates nothing reads them.
    contents: list[msgspec.Raw]
    system_instruction: msgspec.Raw = _NONE
    tools: msgspec.Raw = NO_TOOLS


_request_decoder = msgspec.json.Decoder(_GenerateRequest)


def _canonical(value: Any) -> str:
    return _encode(value, order="sorted").decode()


def response_text(response: Any) -> str:
    """A `functionResponse.response` as the tool result's text."""
    if isinstance(response, str):
        return response
    if isinstance(response, dict) and len(response) == 1:
        key, value = next(iter(response.items()))
        if key in _WRAPPED and isinstance(value, str):
            return value
    return _canonical(response)


def _parts(content: Any) -> list[Any]:
    if isinstance(content, str):  # a bare string is one text part
        return [{"text": content}]
    parts = content.get("parts") if isinstance(content, dict) else None
    return parts if isinstance(parts, list) else []


def gemini_content(content: Any) -> list[Message]:
    """One content in neutral form: its function responses become tool messages."""
    role = content.get("role") if isinstance(content, dict) else None
    role = "assistant" if role == "model" else role or "user"
    out: list[Message] = []
    texts: list[str] = []
    calls: list[ToolCall] = []
    rest = False  # anything but function responses: the content is a message of its own too
    for part in _parts(content):
        if not isinstance(part, dict):
            continue
        if "functionResponse" in part:
            result = part["functionResponse"] or {}
            out.append(Message("tool", response_text(result.get("response")), tool_call_id=result.get("id"),
                               name=result.get("name")))
            continue
        rest = True
        if "functionCall" in part:
            call = part["functionCall"] or {}
            calls.append(ToolCall(call.get("id"), call.get("name"), _canonical(call.get("args") or {})))
        elif part.get("thought"):
            continue
        elif isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            texts.append(_canonical({k: v for k, v in part.items() if k != "thoughtSignature"}))
    if rest or not out:
        out.append(Message(role, "".join(texts), tuple(calls)))
    return out


def gemini_messages(conversation: dict[str, Any]) -> list[Message]:
    """A request's `systemInstruction` and `contents` (raw or decoded) as neutral messages."""
    out: list[Message] = []
    system = conversation.get("systemInstruction")
    if isinstance(system, msgspec.Raw):
        system = msgspec.json.decode(system)
    if system is not None:
        out.append(Message("system", "".join(p.get("text") or "" for p in _parts(system) if isinstance(p, dict))))
    for content in conversation["contents"]:
        out.extend(gemini_content(msgspec.json.decode(content) if isinstance(content, msgspec.Raw) else content))
    return out


def tool_names(raw: Any) -> frozenset[str]:
    """Names of the functions a request declares: `tools[].functionDeclarations[].name`."""
    tools = msgspec.json.decode(raw) if isinstance(raw, msgspec.Raw) else raw
    names = set()
    for tool in tools if isinstance(tools, list) else ():
        declarations = tool.get("functionDeclarations") if isinstance(tool, dict) else None
        for declaration in declarations if isinstance(declarations, list) else ():
            if isinstance(declaration, dict) and isinstance(declaration.get("name"), str):
                names.add(declaration["name"])
    return frozenset(names)


def _declares_functions(raw: msgspec.Raw) -> bool:
    """Whether `tools` declares functions: absent, `[]` and built-in tools only (search, code) do not,
    so a recorded call is never "a tool not offered" for want of a list."""
    return bool(raw) and b"functionDeclarations" in bytes(raw)


def decode_request(body: bytes, model: str | None = None, stream: bool = False) -> Request:
    """The neutral request; raises RequestError naming what is wrong."""
    try:
        request = _request_decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise RequestError(f"request body is not a Gemini generateContent request ({exc}); "
                           'expected JSON with a non-empty "contents" array') from None
    if not request.contents:
        raise RequestError('"contents" is empty')
    # A dict, so templates walk `systemInstruction` before `contents`, as a system message comes first.
    conversation: dict[str, Any] = {"contents": request.contents}
    if request.system_instruction:
        conversation = {"systemInstruction": request.system_instruction, **conversation}
    tools = request.tools if _declares_functions(request.tools) else None
    return Request(stream, True, model, conversation, gemini_messages, raw_tools=tools, _decode_tools=tool_names)


def decode_routed(body: bytes, params: Mapping[str, str]) -> Request:
    """A request to `…/models/{model}:{verb}`: the model and streaming from the path."""
    verb = params.get("verb", "generateContent")
    if verb not in VERBS:
        raise RequestError(f"mockllm serves models/{{model}}:generateContent and :streamGenerateContent, "
                           f"not :{verb}")
    return decode_request(body, params.get("model"), VERBS[verb])
