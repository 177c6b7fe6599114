"""Test helpers: rebuild recorded chunks from what a real client received, to compare with scripts."""

from __future__ import annotations

from typing import Any

from mockllm.dsh.chunks import FinishChunk, UsageChunk
from mockllm.script.entries import Entry
from mockllm.wire.chat.dialect import finish_reason, usage_object
from tests.entry_pieces import entry_pieces


def expected_from_entry(entry: Entry) -> dict[str, Any]:
    """What a client should see for a chunks entry: fragment sequence, tool calls, finish, usage."""
    fragments: list[tuple[str, str]] = []
    tools: dict[int, dict[str, Any]] = {}
    finish = usage = None
    for piece in entry_pieces(entry):
        if isinstance(piece, FinishChunk):
            finish = finish_reason(piece)
        elif isinstance(piece, UsageChunk):
            usage = usage_object(piece.usage)
        elif piece.kind == "tool-call":
            if not piece.whole:  # a tool call recorded whole: this helper never expected one (kept so)
                call = tools.setdefault(piece.block_index, {"id": piece.id, "name": piece.name, "arguments": ""})
                call["arguments"] += piece.text
                fragments.append(("tool", piece.text))
        elif piece.kind in ("text", "reasoning"):
            fragments.append(({"text": "content", "reasoning": "reasoning"}[piece.kind], piece.text))
    return {"fragments": fragments, "tool_calls": list(tools.values()), "finish": finish, "usage": usage}


async def received_from_stream(stream: Any) -> dict[str, Any]:
    """Collect an `openai` SDK chat completion stream into the same shape."""
    fragments: list[tuple[str, str]] = []
    tools: dict[int, dict[str, Any]] = {}
    finish = usage = None
    roles = []
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage.model_dump(exclude_none=True)
        for choice in chunk.choices:
            delta = choice.delta
            if delta.role:
                roles.append(delta.role)
            extra = delta.model_extra or {}
            if extra.get("reasoning_content") is not None:
                fragments.append(("reasoning", extra["reasoning_content"]))
            if delta.content is not None:
                fragments.append(("content", delta.content))
            for call in delta.tool_calls or ():
                slot = tools.setdefault(call.index, {"id": None, "name": None, "arguments": ""})
                if call.id:
                    assert slot["id"] is None, "tool call identity sent twice"
                    slot["id"] = call.id
                if call.function and call.function.name:
                    slot["name"] = call.function.name
                arguments = (call.function.arguments if call.function else None) or ""
                slot["arguments"] += arguments
                fragments.append(("tool", arguments))
            if choice.finish_reason:
                finish = choice.finish_reason
    assert roles[:1] == ["assistant"], "the first delta must carry role assistant"
    return {"fragments": fragments, "tool_calls": [tools[k] for k in sorted(tools)], "finish": finish, "usage": usage}
