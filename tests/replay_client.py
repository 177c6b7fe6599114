"""Test helpers: rebuild recorded chunks from what a real client received, to compare with scripts."""

from __future__ import annotations

from typing import Any

from mockllm.dsh.chunks import BlockEnd, BlockStart, FinishChunk, ReasoningDelta, TextDelta, ToolCallDelta, UsageChunk
from mockllm.script.entries import ChunksEntry, Entry
from mockllm.wire.chat import finish_reason, usage_object


def expected_from_entry(entry: Entry) -> dict[str, Any]:
    """What a client should see for a chunks entry: fragment sequence, tool calls, finish, usage."""
    assert isinstance(entry, ChunksEntry)
    fragments: list[tuple[str, str]] = []
    tools: dict[int, dict[str, Any]] = {}
    ended = {c.index: c.block for c in entry.chunks if isinstance(c, BlockEnd)}
    with_deltas = {c.index for c in entry.chunks if isinstance(c, TextDelta | ReasoningDelta | ToolCallDelta)}
    finish = usage = None
    for chunk in entry.chunks:
        if isinstance(chunk, TextDelta):
            fragments.append(("content", chunk.text))
        elif isinstance(chunk, ReasoningDelta):
            fragments.append(("reasoning", chunk.text))
        elif isinstance(chunk, ToolCallDelta):
            call = tools.setdefault(chunk.index, {"id": chunk.id, "name": chunk.name, "arguments": ""})
            call["arguments"] += chunk.argumentsDelta
            fragments.append(("tool", chunk.argumentsDelta))
        elif isinstance(chunk, BlockStart) and chunk.index not in with_deltas and chunk.index in ended:
            block = ended[chunk.index]
            kind = {"text": "content", "reasoning": "reasoning"}.get(block.type)
            if kind:
                fragments.append((kind, block.text or ""))
        elif isinstance(chunk, FinishChunk):
            finish = finish_reason(chunk)
        elif isinstance(chunk, UsageChunk):
            usage = usage_object(chunk.usage)
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
