"""Test helper: Claude Code's request shapes (`tests/fixtures/claude_code/*.json`) and the answers a
scripted Anthropic upstream gives them.

The fixtures are the bodies Claude Code sends, trimmed: a title call first (the small model, no
tools, a small `max_tokens`), then the main conversation (system prompt with cache breakpoints,
tools, `metadata`), whose first answer starts two `Task` subagents in parallel; two subagent
conversations (Oslo takes a Bash step, Rome answers at once); then the coordinator's next request,
whose `tool_result` blocks come in the order the agents finished (Rome first), each followed by
Claude Code's `agentId` line. The working folder is `CWD`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fake_upstream import Answer

FIXTURES = Path(__file__).parent / "fixtures" / "claude_code"
SONNET = "claude-sonnet-4-5-20250929"
HAIKU = "claude-haiku-4-5-20251001"
CWD = "/home/dev/weather-app"

TITLE = '{"isNewTopic": true, "title": "Oslo vs Rome weather"}'
OSLO = "Oslo: -3\u00b0C and light snow."
ROME = "Rome: 18\u00b0C and sunny."
SUMMARY = "Oslo is at -3\u00b0C with light snow; Rome is at 18\u00b0C and sunny."

# The order Claude Code sends them in; each one's answer: (blocks, stop reason).
REQUESTS = ("title", "main-1", "agent-oslo-1", "agent-rome-1", "agent-oslo-2", "main-2")
Block = dict[str, Any]


def text(value: str) -> Block:
    return {"type": "text", "text": value}


def tool_use(call_id: str, name: str, arguments: dict[str, Any]) -> Block:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


ANSWERS: dict[str, tuple[list[Block], str]] = {
    "title": ([text(TITLE)], "end_turn"),
    # What the coordinator's next request sends back as its first answer: text, then two `Task` calls.
    "main-1": (json.loads((FIXTURES / "main-2.json").read_text(encoding="utf-8"))["messages"][1]["content"],
               "tool_use"),
    "agent-oslo-1": ([tool_use("toolu_03Curl4nP", "Bash", {
        "command": f"curl -s 'wttr.in/Oslo?format=3' > {CWD}/oslo.txt && cat {CWD}/oslo.txt",
        "description": "Fetch Oslo weather"})], "tool_use"),
    "agent-oslo-2": ([text(OSLO)], "end_turn"),
    "agent-rome-1": ([text(ROME)], "end_turn"),
    "main-2": ([text(SUMMARY)], "end_turn"),
}


def request(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return doc


def body(name: str) -> bytes:
    return (FIXTURES / f"{name}.json").read_bytes()


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def answer(name: str, answered: tuple[list[Block], str] | None = None, model: str | None = None) -> Answer:
    """The scripted upstream's streamed answer to request `name` (`answered`: the blocks and stop
    reason, else its entry in ANSWERS; `model`: else the fixture's), one SSE event per piece; a text
    is sent in two deltas and a tool input in two `input_json_delta`s, as Anthropic splits them."""
    blocks, stop = answered or ANSWERS[name]
    model = model or request(name)["model"]
    pieces = [_event("message_start", {"type": "message_start", "message": {
        "id": f"msg_{name}", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 120, "output_tokens": 1}}})]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            start: Block = {"type": "text", "text": ""}
            half = len(block["text"]) // 2
            deltas = [{"type": "text_delta", "text": part} for part in (block["text"][:half], block["text"][half:])]
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            encoded = json.dumps(block["input"])
            half = len(encoded) // 2
            deltas = [{"type": "input_json_delta", "partial_json": part} for part in (encoded[:half], encoded[half:])]
        pieces.append(_event("content_block_start", {"type": "content_block_start", "index": index,
                                                     "content_block": start}))
        pieces += [_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
                   for d in deltas]
        pieces.append(_event("content_block_stop", {"type": "content_block_stop", "index": index}))
    pieces.append(_event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop,
                                                                                "stop_sequence": None},
                                           "usage": {"output_tokens": 30}}))
    pieces.append(_event("message_stop", {"type": "message_stop"}))
    return Answer(pieces)


def heard(stream: bytes) -> list[tuple[str, str]]:
    """What an Anthropic stream says, as a client assembles it: (block type, its text, or a tool call's
    id, name and input with sorted keys) per block, then ("stop", the stop reason)."""
    heads: dict[int, tuple[str, str]] = {}  # index -> (block type, a tool call's "id name")
    parts: dict[int, list[str]] = {}
    stop = ""
    for event in stream.decode().split("\n\n"):
        data = next((line[len("data: "):] for line in event.splitlines() if line.startswith("data: ")), None)
        if data is None:
            continue
        payload = json.loads(data)
        if payload["type"] == "content_block_start":
            block = payload["content_block"]
            heads[payload["index"]] = (block["type"], f"{block.get('id')} {block.get('name')}")
            parts[payload["index"]] = []
        elif payload["type"] == "content_block_delta":
            delta = payload["delta"]
            parts[payload["index"]].append(delta.get("text") or delta.get("partial_json") or "")
        elif payload["type"] == "message_delta":
            stop = payload["delta"]["stop_reason"]
    out = []
    for index in sorted(heads):
        kind, tool = heads[index]
        joined = "".join(parts[index])
        if kind == "tool_use":  # its input as JSON, whatever the spacing
            joined = f"{tool} {json.dumps(json.loads(joined), sort_keys=True)}"
        out.append((kind, joined))
    return [*out, ("stop", stop)]
