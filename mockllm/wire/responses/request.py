"""OpenAI Responses requests in neutral form.

`input` (a string, or a list of items) after `instructions` is the conversation for routing;
`previous_response_id` names the reply it continues (`Request.continues`), so a chain routes to
the session that was served that reply, with no header (replay/run.py decides when).
"""

from __future__ import annotations

from typing import Any

import msgspec

from mockllm.errors import RequestError
from mockllm.wire.chat.request import text_of
from mockllm.wire.request import NO_TOOLS, Message, Request, ToolCall, tool_names

_encode = msgspec.json.encode


class _ResponsesRequest(msgspec.Struct):
    # `input` stays undecoded: with a session header and no templates nothing reads it.
    input: str | list[msgspec.Raw] | None = None
    instructions: str | None = None
    model: str | None = None
    stream: bool | None = False
    previous_response_id: str | None = None
    tools: msgspec.Raw = NO_TOOLS  # msgspec.Raw cannot be Optional: an empty Raw means absent


_request_decoder = msgspec.json.Decoder(_ResponsesRequest)


def _arguments(value: Any) -> str | None:
    return value if value is None or isinstance(value, str) else _encode(value).decode()


def input_messages(raw: list[Any]) -> list[Message]:
    """`[instructions, input]` in neutral form, for routing and input comparison.

    `instructions` is a leading system message (it is the system prompt, and is sent again on every
    call); a string `input` is one user message; message items (with `type: "message"`, or a `role`
    and no `type`) keep their role, `developer` read as `system`, and their text parts
    (`input_text`, `output_text`) joined; `function_call` items are the assistant's tool calls,
    merged into the assistant message just before them (as chat completions carries them);
    `function_call_output` items are tool messages answering `call_id`; `reasoning` items are
    dropped (clients drop or rewrite them, as DeepSeek clients drop `reasoning_content`). Other
    items are kept as their JSON text, so they still take part in the prefix comparison.
    """
    instructions, items = raw
    out: list[Message] = []
    if instructions:
        out.append(Message("system", instructions))
    if isinstance(items, str):
        out.append(Message("user", items))
        return out
    for item in items or ():
        if isinstance(item, msgspec.Raw):
            item = msgspec.json.decode(item)
        if not isinstance(item, dict):
            out.append(Message(None, _encode(item).decode()))
            continue
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            out.append(Message("system" if role == "developer" else role, text_of(item.get("content"))))
        elif kind == "function_call":
            call = ToolCall(item.get("call_id"), item.get("name"), _arguments(item.get("arguments")))
            last = out[-1] if out else None
            if last is not None and last.role == "assistant":
                out[-1] = last._replace(tool_calls=(*last.tool_calls, call))
            else:
                out.append(Message("assistant", "", (call,)))
        elif kind == "function_call_output":
            out.append(Message("tool", text_of(item.get("output")), tool_call_id=item.get("call_id")))
        elif kind != "reasoning":
            out.append(Message(kind, _encode(item).decode()))
    return out


def decode_request(body: bytes) -> Request:
    """The neutral request; raises RequestError naming what is wrong."""
    try:
        request = _request_decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise RequestError(f"request body is not a Responses request ({exc}); expected JSON with "
                           '"input" (a string or a list of items)') from None
    if not request.input and request.previous_response_id is None:
        raise RequestError('"input" is empty and there is no "previous_response_id"')
    # Responses always carry usage (in `response.completed`): include_usage is True.
    return Request(bool(request.stream), True, request.model, [request.instructions, request.input],
                   input_messages, continues=request.previous_response_id,
                   raw_tools=request.tools or None, _decode_tools=tool_names)
