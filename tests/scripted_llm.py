"""Test helper: a scripted LLM on 127.0.0.1 that real agent frameworks talk to, knowing nothing of mockllm.

It speaks OpenAI chat completions, OpenAI Responses and Anthropic Messages, each streamed or
whole, and decides every answer from the request alone (`decide`), so that a team of agents gets
the same answers whatever order its calls arrive in:
- a request whose last turn brings tool results is answered with a summary of them, in the order
  the tool calls were made: `Summary: <result 1> | <result 2> …`;
- a request offering tools whose last user message says `Topics: A, B, C` calls tools in
  parallel, all in one answer: with one tool, that tool once per topic; with as many tools as
  topics, tool k with topic k; else every tool with all the topics. Each call's arguments fill
  the tool's string parameters with its topic;
- any other request is a specialist's: one fact about its last user message, by the role its
  system prompt names (`You are the historian` -> `Historian on Oslo: …`).
Each answer waits a random delay first (from `random.Random(seed)`, drawn per answer in arrival
order) and streams in a few pieces with short pauses, so that concurrent agents finish in an
order that varies with the seed. Ids (tool calls, replies) come from the same generator.

A Responses request may continue an earlier reply by `previous_response_id`: its input is that
reply's input and output, then its own (kept for every reply this upstream made).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import string
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.loopback import start_on_loopback

FACTS = ("has a harbour older than its cathedral", "names a street after every river it trades with",
         "holds a festival each spring", "was mapped by a monk in the ninth century",
         "grows figs in its public squares", "keeps its oldest bridge lit all night")


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON


@dataclass(frozen=True)
class Reply:
    text: str = ""
    calls: tuple[ToolCall, ...] = ()


@dataclass
class Conversation:
    """A request in neutral form: what `decide` reads."""

    system: str = ""
    turns: list[dict[str, Any]] = field(default_factory=list)  # {"role": user|assistant|tool, ...}
    tools: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (name, JSON schema)


def fact(role: str, topic: str) -> str:
    """A specialist's fact about `topic`: the same in every process (crc32, not the salted `hash`)."""
    return f"{role.capitalize()} on {topic}: it {FACTS[zlib.crc32(f'{role}|{topic}'.encode()) % len(FACTS)]}."


def decide(conversation: Conversation, new_id: Any) -> Reply:
    """The answer to `conversation` (see the module's docstring); `new_id()` names each tool call."""
    turns = conversation.turns
    tail: list[dict[str, Any]] = []
    for turn in reversed(turns):
        if turn["role"] == "assistant":
            break
        tail.insert(0, turn)
    results = {t["call_id"]: t["text"] for t in tail if t["role"] == "tool"}
    if results:
        asked = next((t["calls"] for t in reversed(turns) if t["role"] == "assistant"), [])
        ordered = [results[c] for c in asked if c in results] or list(results.values())
        return Reply("Summary: " + " | ".join(" ".join(r.split()) for r in ordered))
    user = next((t["text"] for t in reversed(tail) if t["role"] == "user"), "")
    if user.startswith("Summarise:"):
        return Reply("Summary: " + " | ".join(line.strip() for line in user.splitlines()[1:] if line.strip()))
    topics = re.search(r"Topics?:\s*(.+)", user)
    if topics and conversation.tools:
        names = [t.strip(" .") for t in topics.group(1).split(",") if t.strip(" .")]
        tools = conversation.tools
        if len(tools) == 1:
            pairs = [(tools[0], name) for name in names]
        elif len(tools) == len(names):
            pairs = list(zip(tools, names, strict=True))
        else:
            pairs = [(tool, ", ".join(names)) for tool in tools]
        return Reply(calls=tuple(ToolCall(new_id(), name, _arguments(schema, topic))
                                 for (name, schema), topic in pairs))
    role = re.search(r"You are the (\w+)", conversation.system)
    return Reply(fact(role.group(1) if role else "assistant", " ".join(user.split()) or "nothing"))


def _arguments(schema: dict[str, Any], topic: str) -> str:
    properties = schema.get("properties") or {}
    strings = [name for name, spec in properties.items() if isinstance(spec, dict) and spec.get("type") == "string"]
    return json.dumps(dict.fromkeys(strings or ["input"], topic))


def _text(content: Any) -> str:
    """The text of a content value: a string, or parts with `text` (tool results nest them)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_text(p.get("text") if "text" in p else p.get("content")) for p in content
                       if isinstance(p, dict) and p.get("type") not in ("tool_use", "tool_result", "image"))
    return json.dumps(content)


# --- reading each dialect's request ---------------------------------------------------------------


def chat_conversation(body: dict[str, Any]) -> Conversation:
    conversation = Conversation(tools=[(t["function"]["name"], t["function"].get("parameters") or {})
                                       for t in body.get("tools") or ()])
    for m in body["messages"]:
        if m["role"] in ("system", "developer"):
            conversation.system += _text(m["content"])
        elif m["role"] == "tool":
            conversation.turns.append({"role": "tool", "call_id": m["tool_call_id"], "text": _text(m["content"])})
        elif m["role"] == "assistant":
            conversation.turns.append({"role": "assistant", "calls": [c["id"] for c in m.get("tool_calls") or ()]})
        else:
            conversation.turns.append({"role": "user", "text": _text(m["content"])})
    return conversation


def responses_conversation(items: list[dict[str, Any]], instructions: str, tools: list[dict[str, Any]]
                           ) -> Conversation:
    conversation = Conversation(system=instructions,
                                tools=[(t["name"], t.get("parameters") or {}) for t in tools
                                       if t.get("type") == "function"])
    for item in items:
        kind = item.get("type", "message")
        if kind == "function_call_output":
            conversation.turns.append({"role": "tool", "call_id": item["call_id"], "text": _text(item["output"])})
        elif kind == "function_call":
            if conversation.turns and conversation.turns[-1]["role"] == "assistant":
                conversation.turns[-1]["calls"].append(item["call_id"])
            else:
                conversation.turns.append({"role": "assistant", "calls": [item["call_id"]]})
        elif kind == "message" and item.get("role") in ("system", "developer"):
            conversation.system += _text(item["content"])
        elif kind == "message" and item.get("role") == "assistant":
            conversation.turns.append({"role": "assistant", "calls": []})
        elif kind == "message":
            conversation.turns.append({"role": "user", "text": _text(item["content"])})
    return conversation


def anthropic_conversation(body: dict[str, Any]) -> Conversation:
    conversation = Conversation(system=_text(body.get("system")),
                                tools=[(t["name"], t.get("input_schema") or {}) for t in body.get("tools") or ()])
    for m in body["messages"]:
        content = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        if m["role"] == "assistant":
            conversation.turns.append({"role": "assistant",
                                       "calls": [b["id"] for b in content if b.get("type") == "tool_use"]})
            continue
        for block in content:
            if block.get("type") == "tool_result":
                conversation.turns.append({"role": "tool", "call_id": block["tool_use_id"],
                                           "text": _text(block.get("content"))})
        text = _text([b for b in content if b.get("type") == "text"])
        if text:
            conversation.turns.append({"role": "user", "text": text})
    return conversation


# --- the server -------------------------------------------------------------------------------------


@dataclass
class ScriptedLLM:
    seed: int = 0
    max_delay: float = 0.03  # seconds before an answer's first byte, at most
    received: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (path, body) in arrival order
    base_url: str = ""  # http://127.0.0.1:PORT (an OpenAI client's base is this + /v1)
    in_flight: int = 0
    most_in_flight: int = 0  # the most calls answered at once: concurrency that really happened
    _rng: random.Random = field(init=False)
    _replies: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # Responses id -> whole input+output

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def new_id(self, prefix: str) -> str:
        return prefix + "".join(self._rng.choice(string.ascii_letters + string.digits) for _ in range(24))

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[ScriptedLLM]:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/messages", self._messages)
        runner, self.base_url = await start_on_loopback(app)
        try:
            yield self
        finally:
            await runner.cleanup()

    async def _answer(self, request: web.Request, pieces: list[bytes] | None,
                      whole: dict[str, Any] | None) -> web.StreamResponse:
        """Wait the answer's delay, then send it: SSE `pieces` with short pauses, or `whole` JSON."""
        delay, pauses = self._rng.uniform(0, self.max_delay), self._rng.uniform(0, 0.004)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(delay)
            if whole is not None:
                return web.json_response(whole)
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await response.prepare(request)
            for k, piece in enumerate(pieces or ()):
                if k and k % 3 == 0:
                    await asyncio.sleep(pauses)
                await response.write(piece)
            await response.write_eof()
            return response
        finally:
            self.in_flight -= 1

    async def _read(self, request: web.Request) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(await request.read())
        self.received.append((request.path, body))
        return body

    # --- OpenAI chat completions ---

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._read(request)
        reply = decide(chat_conversation(body), lambda: self.new_id("call_"))
        model, reply_id = body.get("model", "m"), self.new_id("chatcmpl-")
        finish = "tool_calls" if reply.calls else "stop"
        usage = {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
            if reply.calls:
                message["tool_calls"] = [{"id": c.id, "type": "function",
                                          "function": {"name": c.name, "arguments": c.arguments}} for c in reply.calls]
            return await self._answer(request, None, {
                "id": reply_id, "object": "chat.completion", "created": 1700000000, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                "usage": usage})

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            return _data({"id": reply_id, "object": "chat.completion.chunk", "created": 1700000000, "model": model,
                          "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]})

        pieces = [chunk({"role": "assistant", "content": ""})]
        pieces += [chunk({"content": part}) for part in _halves(reply.text)]
        for k, call in enumerate(reply.calls):
            pieces.append(chunk({"tool_calls": [{"index": k, "id": call.id, "type": "function",
                                                 "function": {"name": call.name, "arguments": ""}}]}))
            pieces += [chunk({"tool_calls": [{"index": k, "function": {"arguments": part}}]})
                       for part in _halves(call.arguments)]
        pieces.append(chunk({}, finish))
        if (body.get("stream_options") or {}).get("include_usage"):
            pieces.append(_data({"id": reply_id, "object": "chat.completion.chunk", "created": 1700000000,
                                 "model": model, "choices": [], "usage": usage}))
        pieces.append(b"data: [DONE]\n\n")
        return await self._answer(request, pieces, None)

    # --- OpenAI Responses ---

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = await self._read(request)
        given = body.get("input")
        items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given or ())
        previous = body.get("previous_response_id")
        if previous is not None:
            items = self._replies[previous] + items
        reply = decide(responses_conversation(items, body.get("instructions") or "", body.get("tools") or []),
                       lambda: self.new_id("call_"))
        output: list[dict[str, Any]] = []
        if reply.text:
            output.append({"type": "message", "id": self.new_id("msg_"), "status": "completed", "role": "assistant",
                           "content": [{"type": "output_text", "text": reply.text, "annotations": [],
                                        "logprobs": []}]})
        output += [{"type": "function_call", "id": self.new_id("fc_"), "call_id": c.id, "name": c.name,
                    "arguments": c.arguments, "status": "completed"} for c in reply.calls]
        response = {"id": self.new_id("resp_"), "object": "response", "created_at": 1700000000, "status": "completed",
                    "model": body.get("model", "m"), "output": output, "parallel_tool_calls": True,
                    "tool_choice": "auto", "tools": body.get("tools") or [], "instructions": body.get("instructions"),
                    "previous_response_id": previous, "error": None, "incomplete_details": None,
                    "usage": {"input_tokens": 50, "output_tokens": 10, "total_tokens": 60,
                              "input_tokens_details": {"cached_tokens": 0},
                              "output_tokens_details": {"reasoning_tokens": 0}}}
        self._replies[response["id"]] = items + output
        if not body.get("stream"):
            return await self._answer(request, None, response)
        return await self._answer(request, responses_stream(response), None)

    # --- Anthropic Messages ---

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await self._read(request)
        reply = decide(anthropic_conversation(body), lambda: self.new_id("toolu_"))
        blocks: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.arguments)}
                   for c in reply.calls]
        stop = "tool_use" if reply.calls else "end_turn"
        message = {"id": self.new_id("msg_"), "type": "message", "role": "assistant", "model": body.get("model", "m"),
                   "content": blocks, "stop_reason": stop, "stop_sequence": None,
                   "usage": {"input_tokens": 50, "output_tokens": 10}}
        if not body.get("stream"):
            return await self._answer(request, None, message)
        return await self._answer(request, anthropic_stream(message), None)


def responses_stream(response: dict[str, Any]) -> list[bytes]:
    """A Responses answer as its SSE events: each output item (reasoning summary, message text, function
    call) added, streamed in two deltas and done, then `response.completed` with the whole response."""
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {**response, "status": "in_progress", "output": []}},
        {"type": "response.in_progress", "response": {**response, "status": "in_progress", "output": []}}]
    for index, item in enumerate(response["output"]):
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            text = item["content"][0]["text"]
            events.append({"type": "response.output_item.added", "output_index": index,
                           "item": {**item, "status": "in_progress", "content": []}})
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            events.append({"type": "response.content_part.added", **where, "content_index": 0, "part": part})
            events += [{"type": "response.output_text.delta", **where, "content_index": 0, "delta": piece,
                        "logprobs": []} for piece in _halves(text)]
            events.append({"type": "response.output_text.done", **where, "content_index": 0, "text": text,
                           "logprobs": []})
            events.append({"type": "response.content_part.done", **where, "content_index": 0,
                           "part": {**part, "text": text}})
        elif item["type"] == "reasoning":
            text = "".join(s["text"] for s in item["summary"])
            events.append({"type": "response.output_item.added", "output_index": index,
                           "item": {**item, "summary": []}})
            part = {"type": "summary_text", "text": ""}
            events.append({"type": "response.reasoning_summary_part.added", **where, "summary_index": 0,
                           "part": part})
            events += [{"type": "response.reasoning_summary_text.delta", **where, "summary_index": 0,
                        "delta": piece} for piece in _halves(text)]
            events.append({"type": "response.reasoning_summary_text.done", **where, "summary_index": 0,
                           "text": text})
            events.append({"type": "response.reasoning_summary_part.done", **where, "summary_index": 0,
                           "part": {**part, "text": text}})
        else:
            events.append({"type": "response.output_item.added", "output_index": index,
                           "item": {**item, "arguments": "", "status": "in_progress"}})
            events += [{"type": "response.function_call_arguments.delta", **where, "delta": piece}
                       for piece in _halves(item["arguments"])]
            events.append({"type": "response.function_call_arguments.done", **where,
                           "arguments": item["arguments"], "name": item["name"]})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": response})
    return [_event(e["type"], {**e, "sequence_number": n}) for n, e in enumerate(events)]


def anthropic_stream(message: dict[str, Any]) -> list[bytes]:
    """An Anthropic answer as its SSE events: each block started, streamed in two deltas and stopped."""
    pieces = [_event("message_start", {"type": "message_start", "message": {
        **message, "content": [], "stop_reason": None, "usage": {"input_tokens": 50, "output_tokens": 1}}})]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": part} for part in _halves(block["text"])]
        else:
            start = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": part}
                      for part in _halves(json.dumps(block["input"]))]
        pieces.append(_event("content_block_start", {"type": "content_block_start", "index": index,
                                                     "content_block": start}))
        pieces += [_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
                   for d in deltas]
        pieces.append(_event("content_block_stop", {"type": "content_block_stop", "index": index}))
    pieces.append(_event("message_delta", {"type": "message_delta",
                                           "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                                           "usage": {"output_tokens": 10}}))
    pieces.append(_event("message_stop", {"type": "message_stop"}))
    return pieces


def _halves(text: str) -> list[str]:
    """A text in two fragments, as providers split what they stream (none when empty)."""
    if not text:
        return []
    half = max(1, len(text) // 2)
    return [text[:half], text[half:]] if len(text) > 1 else [text]


def _data(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _event(name: str, payload: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()
