"""Test helper: what five providers really send around the content of one answer, streamed and
whole, with everything a replay could make up instead: dated model names, provider ids,
`created`, fingerprints, `service_tier`, usage in each place the provider puts it, a tool call and
a thinking part. `differing_fields` counts, field by field, how far a replay is from it.

Each case is (route, request body, the upstream's streamed events, its whole answer): one call
recorded streamed, one recorded whole, so each is compared with what the provider sent in that
mode.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mockllm.wire.sse import iter_events

Event = tuple[str | None, Any]  # (SSE event name or None, the data, JSON-decoded where it is JSON)


@dataclass(frozen=True)
class Case:
    dialect: str
    route: str  # under the root, e.g. /v1/chat/completions
    stream_route: str
    request: dict[str, Any]
    stream: list[Event]
    whole: dict[str, Any]
    ndjson: bool = False

    def stream_pieces(self) -> list[bytes]:
        if self.ndjson:
            return [json.dumps(data).encode() + b"\n" for _, data in self.stream]
        out = []
        for name, data in self.stream:
            payload = data if isinstance(data, str) else json.dumps(data)
            head = f"event: {name}\n" if name else ""
            out.append(f"{head}data: {payload}\n\n".encode())
        return out


def parse_stream(body: bytes, ndjson: bool = False) -> list[Event]:
    """A streamed body as its events, JSON decoded (framing whitespace is not compared)."""
    if ndjson:
        return [(None, json.loads(line)) for line in body.split(b"\n") if line.strip()]
    out: list[Event] = []
    for name, data in iter_events(body):
        try:
            out.append((name, json.loads(data)))
        except ValueError:
            out.append((name, data.decode()))
    return out


def differing_fields(expected: Any, actual: Any) -> int:
    """How many leaf fields differ between two JSON values: a value that differs, a field or list
    element on one side only (each of its leaves counts)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        return sum(differing_fields(expected.get(k, _MISSING), actual.get(k, _MISSING))
                   for k in {**expected, **actual})
    if isinstance(expected, list | tuple) and isinstance(actual, list | tuple):
        longest = max(len(expected), len(actual))
        return sum(differing_fields(expected[k] if k < len(expected) else _MISSING,
                                    actual[k] if k < len(actual) else _MISSING) for k in range(longest))
    if expected is _MISSING:
        return _leaves(actual)
    if actual is _MISSING:
        return _leaves(expected)
    if type(expected) is not type(actual) and (isinstance(expected, dict | list) or isinstance(actual, dict | list)):
        return max(_leaves(expected), _leaves(actual))
    return 0 if expected == actual and type(expected) is type(actual) else 1


_MISSING = object()


def _leaves(value: Any) -> int:
    if isinstance(value, dict):
        return sum(_leaves(v) for v in value.values()) or 1
    if isinstance(value, list | tuple):
        return sum(_leaves(v) for v in value) or 1
    return 1


# -- OpenAI chat completions (with DeepSeek's reasoning_content, which dsh records from) -----------------

CHAT_MODEL = "gpt-4.1-mini-2025-04-14"
_CHAT_HEAD = {"id": "chatcmpl-BsVq7XkQ9wXHr2LmN4", "object": "chat.completion.chunk", "created": 1752001234,
              "model": CHAT_MODEL, "service_tier": "default", "system_fingerprint": "fp_6f2eabb9a5"}


def _chat_chunk(delta: dict[str, Any], finish: str | None = None, obfuscation: str = "x") -> Event:
    return (None, {**_CHAT_HEAD, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
                   "usage": None, "obfuscation": obfuscation})


_CHAT_USAGE = {"prompt_tokens": 1204, "completion_tokens": 57, "total_tokens": 1261,
               "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
               "completion_tokens_details": {"reasoning_tokens": 12, "audio_tokens": 0,
                                             "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}
_LS_SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}
_TOOLS = [{"type": "function", "function": {"name": "ls", "description": "List a folder", "parameters": _LS_SCHEMA}}]

_ARGS = "{\"path\": \".\"}"
CHAT = Case(
    "chat", "/v1/chat/completions", "/v1/chat/completions",
    {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "list it"}], "tools": _TOOLS},
    [
        _chat_chunk({"role": "assistant", "content": "", "refusal": None}, obfuscation="Qm"),
        _chat_chunk({"reasoning_content": "The user wants"}, obfuscation="a1"),
        _chat_chunk({"reasoning_content": " a listing."}, obfuscation="b22"),
        _chat_chunk({"content": "Let me"}, obfuscation="c"),
        _chat_chunk({"content": " look."}, obfuscation="dd"),
        _chat_chunk({"tool_calls": [{"index": 0, "id": "call_9wXHr2LmN4BsVq7", "type": "function",
                                     "function": {"name": "ls", "arguments": ""}}]}, obfuscation="e"),
        _chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\":"}}]}, obfuscation="f"),
        _chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": " \".\"}"}}]}, obfuscation="gg"),
        _chat_chunk({}, "tool_calls", obfuscation="h"),
        (None, {**_CHAT_HEAD, "choices": [], "usage": _CHAT_USAGE, "obfuscation": "iii"}),
        (None, "[DONE]"),
    ],
    {"id": "chatcmpl-BsVq8YlR0xYIs3MoO5", "object": "chat.completion", "created": 1752001299, "model": CHAT_MODEL,
     "choices": [{"index": 0, "message": {"role": "assistant", "content": "Let me look.", "reasoning_content":
                                          "The user wants a listing.", "refusal": None, "annotations": [],
                                          "tool_calls": [{"id": "call_0xYIs3MoO5CtWr8", "type": "function",
                                                          "function": {"name": "ls", "arguments": _ARGS}}]},
                  "logprobs": None, "finish_reason": "tool_calls"}],
     "usage": _CHAT_USAGE, "service_tier": "default", "system_fingerprint": "fp_6f2eabb9a5"},
)
CHAT_STREAM_REQUEST = {**CHAT.request, "stream": True, "stream_options": {"include_usage": True}}


# -- Anthropic Messages -------------------------------------------------------------------------

ANTHROPIC_MODEL = "claude-sonnet-4-5-20250929"
_SIGNATURE = "EqQBCkYIBRgCKkDk0i9mXmo0zWg5WbFkZZ3uJx6uPjOe3R5aKk"


def _message(message_id: str, content: list[Any], stop: str | None, usage: dict[str, Any]) -> dict[str, Any]:
    return {"id": message_id, "type": "message", "role": "assistant", "model": ANTHROPIC_MODEL, "content": content,
            "stop_reason": stop, "stop_sequence": None, "usage": usage}


_ANTHROPIC_START_USAGE = {"input_tokens": 25, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 2048,
                          "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
                          "output_tokens": 1, "service_tier": "standard"}
ANTHROPIC = Case(
    "anthropic", "/v1/messages", "/v1/messages",
    {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": [{"role": "user", "content": "list it"}],
     "tools": [{"name": "ls", "description": "List a folder",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]},
    [
        ("message_start", {"type": "message_start",
                           "message": _message("msg_01XFDUDYJgAACzvnptvVoYEL", [], None, _ANTHROPIC_START_USAGE)}),
        ("ping", {"type": "ping"}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "thinking_delta", "thinking": "The user wants"}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "thinking_delta", "thinking": " a listing."}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "signature_delta", "signature": _SIGNATURE}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("content_block_start", {"type": "content_block_start", "index": 1,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 1,
                                 "delta": {"type": "text_delta", "text": "Let me"}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 1,
                                 "delta": {"type": "text_delta", "text": " look."}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        ("content_block_start", {"type": "content_block_start", "index": 2,
                                 "content_block": {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9",
                                                   "name": "ls", "input": {}}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 2,
                                 "delta": {"type": "input_json_delta", "partial_json": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 2,
                                 "delta": {"type": "input_json_delta", "partial_json": "{\"path\": "}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 2,
                                 "delta": {"type": "input_json_delta", "partial_json": "\".\"}"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 2}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                           "usage": {"input_tokens": 25, "cache_creation_input_tokens": 0,
                                     "cache_read_input_tokens": 2048, "output_tokens": 28}}),
        ("message_stop", {"type": "message_stop"}),
    ],
    _message("msg_01Aq9w2LmN4BsVq7XkQ9wXHr", [
        {"type": "thinking", "thinking": "The user wants a listing.", "signature": _SIGNATURE},
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_01B19r01rx01mr028946mr0", "name": "ls", "input": {"path": "."}},
    ], "tool_use", {**_ANTHROPIC_START_USAGE, "output_tokens": 28}),
)


# -- OpenAI Responses ---------------------------------------------------------------------------

RESPONSES_MODEL = "gpt-5-mini-2025-08-07"
_RESPONSE_ID = "resp_68a1f0c2d4e8819c9e2b7a3f5d6c4b2a"
_SETTINGS = {"background": False, "error": None, "incomplete_details": None, "instructions": "Be brief.",
             "max_output_tokens": None, "max_tool_calls": None, "parallel_tool_calls": True,
             "previous_response_id": None, "prompt_cache_key": None,
             "reasoning": {"effort": "low", "summary": "auto"}, "safety_identifier": None, "service_tier": "default",
             "store": True, "temperature": 1.0, "text": {"format": {"type": "text"}, "verbosity": "medium"},
             "tool_choice": "auto", "tools": [{"type": "function", "name": "ls", "description": "List a folder",
                                               "parameters": _LS_SCHEMA, "strict": False}],
             "top_logprobs": 0, "top_p": 1.0, "truncation": "disabled", "user": None, "metadata": {}}
_REASONING = {"id": "rs_68a1f0c3a1b0819c8d7e6f5a4b3c2d1e", "type": "reasoning",
              "summary": [{"type": "summary_text", "text": "The user wants a listing."}]}
_MESSAGE = {"id": "msg_68a1f0c4b2c1819ca9b8c7d6e5f4a3b2", "type": "message", "status": "completed",
            "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": "Let me look."}],
            "role": "assistant"}
_CALL = {"id": "fc_68a1f0c5c3d2819cb0a9b8c7d6e5f4a3", "type": "function_call", "status": "completed",
         "arguments": "{\"path\":\".\"}", "call_id": "call_Hr2LmN4BsVq7XkQ9wX", "name": "ls"}
_RESPONSES_USAGE = {"input_tokens": 1304, "input_tokens_details": {"cached_tokens": 1152}, "output_tokens": 83,
                    "output_tokens_details": {"reasoning_tokens": 64}, "total_tokens": 1387}


def _response(response_id: str, status: str, output: list[Any], usage: Any, created: int) -> dict[str, Any]:
    return {"id": response_id, "object": "response", "created_at": created, "status": status, **_SETTINGS,
            "model": RESPONSES_MODEL, "output": output, "usage": usage}


def _responses_stream() -> list[Event]:
    events: list[tuple[str, dict[str, Any]]] = []

    def add(kind: str, **fields: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": len(events), **fields}))

    add("response.created", response=_response(_RESPONSE_ID, "in_progress", [], None, 1755443394))
    add("response.in_progress", response=_response(_RESPONSE_ID, "in_progress", [], None, 1755443394))
    add("response.output_item.added", output_index=0, item={**_REASONING, "summary": []})
    add("response.reasoning_summary_part.added", item_id=_REASONING["id"], output_index=0, summary_index=0,
        part={"type": "summary_text", "text": ""})
    for piece in ("The user wants", " a listing."):
        add("response.reasoning_summary_text.delta", item_id=_REASONING["id"], output_index=0, summary_index=0,
            delta=piece, obfuscation="ab")
    add("response.reasoning_summary_text.done", item_id=_REASONING["id"], output_index=0, summary_index=0,
        text="The user wants a listing.")
    add("response.reasoning_summary_part.done", item_id=_REASONING["id"], output_index=0, summary_index=0,
        part={"type": "summary_text", "text": "The user wants a listing."})
    add("response.output_item.done", output_index=0, item=_REASONING)
    add("response.output_item.added", output_index=1, item={**_MESSAGE, "status": "in_progress", "content": []})
    add("response.content_part.added", item_id=_MESSAGE["id"], output_index=1, content_index=0,
        part={"type": "output_text", "annotations": [], "logprobs": [], "text": ""})
    for piece in ("Let me", " look."):
        add("response.output_text.delta", item_id=_MESSAGE["id"], output_index=1, content_index=0, delta=piece,
            logprobs=[], obfuscation="cd")
    add("response.output_text.done", item_id=_MESSAGE["id"], output_index=1, content_index=0, text="Let me look.",
        logprobs=[])
    add("response.content_part.done", item_id=_MESSAGE["id"], output_index=1, content_index=0,
        part=_MESSAGE["content"][0])
    add("response.output_item.done", output_index=1, item=_MESSAGE)
    add("response.output_item.added", output_index=2, item={**_CALL, "status": "in_progress", "arguments": ""})
    for piece in ("{\"path\":", "\".\"}"):
        add("response.function_call_arguments.delta", item_id=_CALL["id"], output_index=2, delta=piece,
            obfuscation="ef")
    add("response.function_call_arguments.done", item_id=_CALL["id"], output_index=2, arguments=_CALL["arguments"])
    add("response.output_item.done", output_index=2, item=_CALL)
    add("response.completed", response=_response(_RESPONSE_ID, "completed", [_REASONING, _MESSAGE, _CALL],
                                                 _RESPONSES_USAGE, 1755443394))
    return list(events)


RESPONSES = Case(
    "responses", "/v1/responses", "/v1/responses",
    {"model": "gpt-5-mini", "input": "list it", "instructions": "Be brief.",
     "reasoning": {"effort": "low", "summary": "auto"}, "tools": _SETTINGS["tools"]},
    _responses_stream(),
    _response("resp_68a1f1d7e9f0819d0f3c8b4a6e7d5c3b", "completed",
              [{**_REASONING, "id": "rs_68a1f1d8"}, {**_MESSAGE, "id": "msg_68a1f1d9"},
               {**_CALL, "id": "fc_68a1f1da", "call_id": "call_Ir3MoO5CtWr8YlR0xY"}], _RESPONSES_USAGE, 1755443479),
)


# -- Gemini -------------------------------------------------------------------------------------

GEMINI_MODEL = "gemini-2.5-flash"


def _gemini(parts: list[Any], usage: dict[str, Any], response_id: str, finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": GEMINI_MODEL,
            "responseId": response_id}


_PROMPT = {"promptTokenCount": 31, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 31}]}
_GEMINI_FINAL = {**_PROMPT, "candidatesTokenCount": 17, "totalTokenCount": 96, "thoughtsTokenCount": 48}
_FUNCTION_CALL = {"functionCall": {"name": "ls", "args": {"path": "."}}, "thoughtSignature": "CiQB0e2Kb3xZ"}
GEMINI = Case(
    "gemini", f"/v1beta/models/{GEMINI_MODEL}:generateContent",
    f"/v1beta/models/{GEMINI_MODEL}:streamGenerateContent?alt=sse",
    {"contents": [{"role": "user", "parts": [{"text": "list it"}]}],
     "tools": [{"functionDeclarations": [{"name": "ls", "parameters": {"type": "OBJECT"}}]}],
     "generationConfig": {"thinkingConfig": {"includeThoughts": True}}},
    [
        (None, _gemini([{"text": "The user wants a listing.", "thought": True}],
                       {**_PROMPT, "totalTokenCount": 60, "thoughtsTokenCount": 29}, "s7JxaKq2Fb6z7M8P1uGd0QE")),
        (None, _gemini([{"text": "Let me look."}], {**_PROMPT, "candidatesTokenCount": 4, "totalTokenCount": 83,
                                                    "thoughtsTokenCount": 48}, "s7JxaKq2Fb6z7M8P1uGd0QE")),
        (None, _gemini([_FUNCTION_CALL], _GEMINI_FINAL, "s7JxaKq2Fb6z7M8P1uGd0QE", "STOP")),
    ],
    _gemini([{"text": "The user wants a listing.", "thought": True}, {"text": "Let me look."}, _FUNCTION_CALL],
            _GEMINI_FINAL, "y8KxaLr3Gc7A8N9Q2vHe1RF", "STOP"),
)


# -- Ollama -------------------------------------------------------------------------------------

OLLAMA_MODEL = "qwen3:8b"


def _ollama(created: str, message: dict[str, Any], **rest: Any) -> dict[str, Any]:
    return {"model": OLLAMA_MODEL, "created_at": created, "message": {"role": "assistant", "content": "", **message},
            "done": False, **rest}


_OLLAMA_DONE = {"done_reason": "stop", "done": True, "total_duration": 4883583458, "load_duration": 1334875,
                "prompt_eval_count": 26, "prompt_eval_duration": 342546000, "eval_count": 42,
                "eval_duration": 4535599000}
_OLLAMA_CALL = {"id": "call_5u1k8x2q", "function": {"index": 0, "name": "ls", "arguments": {"path": "."}}}
OLLAMA = Case(
    "ollama", "/api/chat", "/api/chat",
    {"model": OLLAMA_MODEL, "messages": [{"role": "user", "content": "list it"}], "think": True,
     "tools": _TOOLS},
    [
        (None, _ollama("2025-07-10T12:00:00.101929Z", {"thinking": "The user wants"})),
        (None, _ollama("2025-07-10T12:00:00.152313Z", {"thinking": " a listing."})),
        (None, _ollama("2025-07-10T12:00:00.203011Z", {"content": "Let me"})),
        (None, _ollama("2025-07-10T12:00:00.251882Z", {"content": " look."})),
        (None, _ollama("2025-07-10T12:00:00.304117Z", {"tool_calls": [_OLLAMA_CALL]})),
        (None, {**_ollama("2025-07-10T12:00:00.355906Z", {}), **_OLLAMA_DONE}),
    ],
    {**_ollama("2025-07-10T12:01:07.512004Z", {"content": "Let me look.", "thinking": "The user wants a listing.",
                                               "tool_calls": [_OLLAMA_CALL]}), **_OLLAMA_DONE},
    ndjson=True,
)

CASES = {case.dialect: case for case in (CHAT, ANTHROPIC, RESPONSES, GEMINI, OLLAMA)}


def stream_request(case: Case) -> dict[str, Any]:
    """The request body of the streamed call (Gemini says it streams in its path)."""
    if case.dialect == "chat":
        return CHAT_STREAM_REQUEST
    if case.dialect == "gemini":
        return case.request
    return {**case.request, "stream": True}


def whole_request(case: Case) -> dict[str, Any]:
    if case.dialect in ("gemini", "anthropic"):
        return case.request
    return {**case.request, "stream": False}
