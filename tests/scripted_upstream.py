"""Test helper: a stand-in model provider that knows nothing of mockllm, for record modes.

It speaks OpenAI chat completions (streamed and whole), OpenAI Responses and Anthropic Messages
under `{url}` (which ends in `/v1`, as a provider's base does), and answers from the last input of
each request, so an agent driven by a test gets the same answers on every run:

- a user message whose lines read `CALL name {json args}` gets those tool calls (several lines:
  parallel calls);
- `FAIL 503` (any status) gets that HTTP error, in the provider's error shape;
- tool results get `got: <their texts joined by " | ">`;
- anything else gets `echo: <the text>`, streamed in three pieces.

Anthropic's `POST {url}/messages/count_tokens` answers `{"input_tokens": N}`, N the length of every
text in the request's `system` and `messages` (so equal requests get equal counts, others differ).

It runs on a thread of its own (`with ScriptedUpstream() as up:`), so that synchronous tests, and
a pytester session inside a test, can call it; every request it received is kept (`received`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.loopback import ThreadedApp

CALL = re.compile(r"^CALL (\w+) (\{.*\})\s*$", re.MULTILINE)
FAIL = re.compile(r"\bFAIL (\d{3})\b")
USAGE_IN, USAGE_OUT = 11, 7


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Answer:
    text: str = ""
    calls: tuple[ToolCall, ...] = ()
    fail: int | None = None

    @property
    def pieces(self) -> list[str]:
        """The text in three pieces (fragments are what a stream is made of)."""
        third = max(1, len(self.text) // 3)
        return [p for p in (self.text[:third], self.text[third: 2 * third], self.text[2 * third:]) if p]


def answer_to(last: str, results: list[str]) -> Answer:
    """What the script answers, given the last user text and the tool results after it."""
    if results:
        return Answer(text="got: " + " | ".join(results))
    failing = FAIL.search(last)
    if failing:
        return Answer(fail=int(failing.group(1)))
    calls = tuple(ToolCall("call_" + hashlib.sha1(f"{k}{name}{args}".encode()).hexdigest()[:12], name, args)
                  for k, (name, args) in enumerate(CALL.findall(last)))
    return Answer(calls=calls) if calls else Answer(text=f"echo: {last}")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict) and p.get("type") != "tool_result")
    return ""


def sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + (data if isinstance(data, bytes) else json.dumps(data).encode()) + b"\n\n"


# --- chat completions ------------------------------------------------------------------------------


def chat_read(body: dict[str, Any]) -> tuple[str, list[str]]:
    messages = body.get("messages") or []
    results: list[str] = []
    for m in reversed(messages):
        if m.get("role") != "tool":
            break
        results.insert(0, _text(m.get("content")))
    last = next((_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
    return last, results


def chat_stream(answer: Answer, model: str, usage: bool) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": model,
                    "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": p}) for p in answer.pieces]
    for k, call in enumerate(answer.calls):
        out.append(chunk({"tool_calls": [{"index": k, "id": call.id, "type": "function",
                                          "function": {"name": call.name, "arguments": ""}}]}))
        half = len(call.arguments) // 2
        out += [chunk({"tool_calls": [{"index": k, "function": {"arguments": a}}]})
                for a in (call.arguments[:half], call.arguments[half:])]
    out.append(chunk({}, "tool_calls" if answer.calls else "stop"))
    if usage:
        out.append(sse({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": model,
                        "choices": [], "usage": {"prompt_tokens": USAGE_IN, "completion_tokens": USAGE_OUT,
                                                 "total_tokens": USAGE_IN + USAGE_OUT}}))
    return [*out, b"data: [DONE]\n\n"]


def chat_whole(answer: Answer, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.text or None}
    if answer.calls:
        message["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}} for c in answer.calls]
    return {"id": "chatcmpl-s", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if answer.calls else "stop"}],
            "usage": {"prompt_tokens": USAGE_IN, "completion_tokens": USAGE_OUT, "total_tokens": USAGE_IN + USAGE_OUT}}


# --- Anthropic Messages ---------------------------------------------------------------------------


def anthropic_read(body: dict[str, Any]) -> tuple[str, list[str]]:
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    content = last.get("content")
    results = [_text(b.get("content")) for b in content if isinstance(b, dict) and b.get("type") == "tool_result"] \
        if isinstance(content, list) else []
    user = next((_text(m.get("content")) for m in reversed(messages)
                 if m.get("role") == "user" and _text(m.get("content"))), "")
    return user, results


def anthropic_stream(answer: Answer, model: str) -> list[bytes]:
    out = [sse({"type": "message_start", "message": {
        "id": "msg_s", "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": None,
        "stop_sequence": None, "usage": {"input_tokens": USAGE_IN, "output_tokens": 1}}}, "message_start")]
    index = 0
    if answer.pieces:
        out.append(sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                       "content_block_start"))
        out += [sse({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}},
                    "content_block_delta") for p in answer.pieces]
        out.append(sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
        index = 1
    for k, call in enumerate(answer.calls, index):
        out.append(sse({"type": "content_block_start", "index": k, "content_block": {
            "type": "tool_use", "id": call.id.replace("call_", "toolu_"), "name": call.name, "input": {}}},
            "content_block_start"))
        out.append(sse({"type": "content_block_delta", "index": k,
                        "delta": {"type": "input_json_delta", "partial_json": call.arguments}}, "content_block_delta"))
        out.append(sse({"type": "content_block_stop", "index": k}, "content_block_stop"))
    out.append(sse({"type": "message_delta", "delta": {"stop_reason": "tool_use" if answer.calls else "end_turn",
                                                       "stop_sequence": None},
                    "usage": {"output_tokens": USAGE_OUT}}, "message_delta"))
    return [*out, sse({"type": "message_stop"}, "message_stop")]


# --- OpenAI Responses -----------------------------------------------------------------------------


def responses_read(body: dict[str, Any]) -> tuple[str, list[str]]:
    items = body.get("input")
    if isinstance(items, str):
        return items, []
    items = items or []
    results: list[str] = []
    for item in reversed(items):
        if item.get("type") != "function_call_output":
            break
        results.insert(0, str(item.get("output")))
    last = next((_text(i.get("content")) for i in reversed(items) if i.get("role") == "user"), "")
    return last, results


def responses_stream(answer: Answer, model: str) -> list[bytes]:
    seq = iter(range(1000))

    def event(kind: str, **fields: Any) -> bytes:
        return sse({"type": kind, "sequence_number": next(seq), **fields}, kind)

    items: list[dict[str, Any]] = []
    base = {"id": "resp_s", "object": "response", "created_at": 1, "model": model, "output": [],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}
    out = [event("response.created", response={**base, "status": "in_progress"})]
    if answer.pieces:
        item = {"id": "msg_s", "type": "message", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": answer.text, "annotations": []}]}
        out.append(event("response.output_item.added", output_index=0,
                         item={**item, "status": "in_progress", "content": []}))
        out += [event("response.output_text.delta", item_id="msg_s", output_index=0, content_index=0, delta=p,
                      logprobs=[]) for p in answer.pieces]
        out.append(event("response.output_item.done", output_index=0, item=item))
        items.append(item)
    for call in answer.calls:
        k = len(items)
        item = {"id": f"fc_{k}", "type": "function_call", "status": "completed", "call_id": call.id,
                "name": call.name, "arguments": call.arguments}
        out.append(event("response.output_item.added", output_index=k, item={**item, "arguments": ""}))
        out.append(event("response.function_call_arguments.delta", item_id=f"fc_{k}", output_index=k,
                         delta=call.arguments))
        out.append(event("response.output_item.done", output_index=k, item=item))
        items.append(item)
    usage = {"input_tokens": USAGE_IN, "output_tokens": USAGE_OUT, "total_tokens": USAGE_IN + USAGE_OUT,
             "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}
    return [*out, event("response.completed", response={**base, "status": "completed", "output": items,
                                                          "usage": usage})]


def counted_tokens(body: dict[str, Any]) -> int:
    system = body.get("system")
    texts = [_text(system) if system is not None else ""]
    texts += [_text(m.get("content")) for m in body.get("messages") or []]
    return sum(len(t) for t in texts)


# --- the server -----------------------------------------------------------------------------------


class ScriptedUpstream(ThreadedApp):
    thread_name = "scripted-upstream"

    def __init__(self) -> None:
        super().__init__()
        self.received: list[dict[str, Any]] = []

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.received.append({"path": request.path, "headers": {k.lower(): v for k, v in request.headers.items()},
                              "body": raw})
        body = json.loads(raw)
        model = str(body.get("model") or "m")
        kind = request.path.rsplit("/", 1)[-1]
        if kind == "count_tokens":
            return web.json_response({"input_tokens": counted_tokens(body)})
        last, results = {"completions": chat_read, "messages": anthropic_read, "responses": responses_read}[kind](body)
        answer = answer_to(last, results)
        if answer.fail is not None:
            message = f"scripted failure {answer.fail}"
            error: dict[str, Any] = {"type": "error", "error": {"type": "api_error", "message": message}} \
                if kind == "messages" else {"error": {"message": message, "type": "server_error", "param": None,
                                                      "code": None}}
            return web.json_response(error, status=answer.fail)
        if kind == "completions" and not body.get("stream"):
            return web.json_response(chat_whole(answer, model))
        if kind == "completions":
            pieces = chat_stream(answer, model, bool((body.get("stream_options") or {}).get("include_usage")))
        elif kind == "messages":
            pieces = anthropic_stream(answer, model)
        else:
            pieces = responses_stream(answer, model)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await response.prepare(request)
        for piece in pieces:
            await response.write(piece)
        await response.write_eof()
        return response

    def routes(self, app: web.Application) -> None:
        for path in ("/v1/chat/completions", "/v1/messages", "/v1/responses", "/v1/messages/count_tokens"):
            app.router.add_post(path, self._handle)

    @property
    def url(self) -> str:
        """The OpenAI-compatible base, `/v1` included ("" until started)."""
        return self.root + "/v1" if self.root else ""


def scripted_upstream() -> Iterator[ScriptedUpstream]:
    """For a fixture: `yield from scripted_upstream()`."""
    with ScriptedUpstream() as upstream:
        yield upstream
