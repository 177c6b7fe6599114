"""Test helpers for the Anthropic dialect: what a client should see for an entry, and what it saw.

The expectation is computed from the recorded chunks alone, spelling out the wire mapping here
(not by calling the dialect), so a mapping bug fails the comparison.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic

from mockllm.dsh.chunks import FinishChunk, UsageChunk
from mockllm.script.entries import Entry
from tests.entry_pieces import ended_blocks, entry_pieces

STOP_REASONS = {"stop": "end_turn", "tool-calls": "tool_use", "max-tokens": "max_tokens"}

# HTTP status -> the exception class the official SDK raises for it.
SDK_ERRORS: dict[int, type[anthropic.APIStatusError]] = {
    400: anthropic.BadRequestError, 401: anthropic.AuthenticationError, 403: anthropic.PermissionDeniedError,
    404: anthropic.NotFoundError, 409: anthropic.ConflictError, 422: anthropic.UnprocessableEntityError,
    429: anthropic.RateLimitError, 500: anthropic.InternalServerError, 503: anthropic.ServiceUnavailableError,
    529: anthropic.OverloadedError,
}


def sdk_base(base_url: str) -> str:
    """A mockllm base URL (ending in /v1) as an Anthropic base URL: the SDK appends /v1/messages itself."""
    assert base_url.endswith("/v1"), base_url
    return base_url[: -len("/v1")]


def expected_from_entry(entry: Entry) -> dict[str, Any]:
    """Fragments, assembled blocks (in order), tool calls, usage and stop reason of a chunks entry."""
    fragments: list[tuple[str, str]] = []
    blocks: dict[int, dict[str, Any]] = {}  # recorded index -> {"type", "text", "id", "name"}, in first-sight order
    usage: dict[str, Any] = {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": None,
                             "cache_creation_input_tokens": None, "thinking_tokens": None}
    stop = None
    for piece in entry_pieces(entry):
        if isinstance(piece, UsageChunk):
            u = piece.usage
            usage = {"input_tokens": u.inputTokens, "output_tokens": u.outputTokens,
                     "cache_read_input_tokens": u.cacheReadTokens, "cache_creation_input_tokens": u.cacheWriteTokens,
                     "thinking_tokens": u.reasoningTokens}
        elif isinstance(piece, FinishChunk):
            stop = STOP_REASONS[piece.reason.kind]
        else:
            kind = {"text": "text", "reasoning": "thinking", "tool-call": "tool_use"}[piece.kind]
            block = blocks.setdefault(piece.block_index, {"type": kind, "text": "", "id": piece.id, "name": piece.name})
            block["id"] = block["id"] or piece.id
            block["name"] = block["name"] or piece.name
            block["text"] += piece.text
            fragments.append((kind, piece.text))
    ended = ended_blocks(entry)
    for index, block in ended.items():
        if block.type == "tool-call" and index in blocks:
            blocks[index]["name"] = blocks[index]["name"] or block.name
    tools = [{"id": b["id"], "name": b["name"], "input": json.loads(b["text"]) if b["text"] else {}}
             for b in blocks.values() if b["type"] == "tool_use"]
    return {
        "fragments": fragments,
        "blocks": [b["type"] for b in blocks.values()],
        "text": "".join(b["text"] for b in blocks.values() if b["type"] == "text"),
        "thinking": "".join(b["text"] for b in blocks.values() if b["type"] == "thinking"),
        "tool_calls": tools,
        "usage": usage,
        "stop_reason": stop,
    }


def received_from_message(message: anthropic.types.Message, fragments: list[tuple[str, str]]) -> dict[str, Any]:
    """The same shape, from a final message (and the fragments seen while streaming it)."""
    usage = message.usage
    details = usage.output_tokens_details
    return {
        "fragments": fragments,
        "blocks": [b.type for b in message.content],
        "text": "".join(b.text for b in message.content if b.type == "text"),
        "thinking": "".join(b.thinking for b in message.content if b.type == "thinking"),
        "tool_calls": [{"id": b.id, "name": b.name, "input": b.input} for b in message.content if b.type == "tool_use"],
        "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                  "cache_read_input_tokens": usage.cache_read_input_tokens,
                  "cache_creation_input_tokens": usage.cache_creation_input_tokens,
                  "thinking_tokens": details.thinking_tokens if details is not None else None},
        "stop_reason": message.stop_reason,
    }


async def stream_message(client: anthropic.AsyncAnthropic, messages: list[Any], **options: Any) -> dict[str, Any]:
    """`messages.stream` + `get_final_message()`: what the client assembled, with its fragments."""
    fragments: list[tuple[str, str]] = []
    signatures = 0
    async with client.messages.stream(model="m", max_tokens=1024, messages=messages, **options) as stream:
        async for event in stream:
            if event.type != "content_block_delta":
                continue
            delta = event.delta
            if delta.type == "text_delta":
                fragments.append(("text", delta.text))
            elif delta.type == "thinking_delta":
                fragments.append(("thinking", delta.thinking))
            elif delta.type == "input_json_delta":
                fragments.append(("tool_use", delta.partial_json))
            elif delta.type == "signature_delta":
                signatures += 1
        final = await stream.get_final_message()
    received = received_from_message(final, fragments)
    # Every thinking block is signed once, just before it stops.
    assert signatures == received["blocks"].count("thinking")
    assert all(b.signature for b in final.content if b.type == "thinking")
    return {**received, "id": final.id}


async def create_message(client: anthropic.AsyncAnthropic, messages: list[Any], **options: Any) -> dict[str, Any]:
    """`messages.create` (not streaming): the same shape; fragments are the whole blocks."""
    final = await client.messages.create(model="m", max_tokens=1024, messages=messages, **options)
    return {**received_from_message(final, []), "id": final.id}
