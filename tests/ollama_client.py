"""Test helpers for the Ollama dialect: what a client should see for an entry, and what it saw.

The expectation is computed from the recorded chunks alone, spelling out the wire mapping here
(not by calling the dialect), so a mapping bug fails the comparison. Empty fragments are left out
on both sides: on Ollama's wire an empty delta is indistinguishable from a line that carries none.
"""

from __future__ import annotations

import json
from typing import Any

import ollama

from mockllm.dsh.chunks import FinishChunk, UsageChunk
from mockllm.script.entries import Entry
from tests.entry_pieces import ended_blocks, entry_pieces

DONE_REASONS = {"stop": "stop", "tool-calls": "stop", "max-tokens": "length"}
OPEN: list[ollama.AsyncClient] = []  # closed after each test by its module's fixture (`close_all`)


def client(base: str, **options: Any) -> ollama.AsyncClient:
    """The official client on a mockllm base root (no `/v1`: it appends `/api/chat`)."""
    assert not base.endswith("/v1"), base
    sdk = ollama.AsyncClient(host=base, **options)
    OPEN.append(sdk)
    return sdk


async def close_all() -> None:
    while OPEN:
        await OPEN.pop().close()


def root(base_url: str) -> str:
    """A mockllm base URL (ending in /v1) as an Ollama host."""
    return base_url.removesuffix("/v1")


def expected_from_entry(entry: Entry) -> dict[str, Any]:
    fragments: list[tuple[str, str]] = []
    calls: dict[int, dict[str, Any]] = {}
    counts: dict[str, int | None] = {"prompt_eval_count": None, "eval_count": None}
    reason = None
    for piece in entry_pieces(entry):
        if isinstance(piece, UsageChunk):
            u = piece.usage
            counts = {"prompt_eval_count": u.inputTokens + (u.cacheReadTokens or 0), "eval_count": u.outputTokens}
        elif isinstance(piece, FinishChunk):
            reason = DONE_REASONS[piece.reason.kind]
        elif piece.kind == "tool-call":
            call = calls.setdefault(piece.block_index, {"name": piece.name, "arguments": ""})
            call["name"] = call["name"] or piece.name
            call["arguments"] += piece.text
        elif piece.text:
            fragments.append(({"text": "content", "reasoning": "thinking"}[piece.kind], piece.text))
    ended = ended_blocks(entry)
    for index, call in calls.items():
        call["name"] = call["name"] or ended[index].name if index in ended else call["name"]
        call["arguments"] = json.loads(call["arguments"]) if call["arguments"].strip() else {}
    return {"fragments": fragments,
            "content": "".join(t for k, t in fragments if k == "content"),
            "thinking": "".join(t for k, t in fragments if k == "thinking"),
            "tool_calls": list(calls.values()), "done_reason": reason, **counts}


def _calls(message: ollama.Message) -> list[dict[str, Any]]:
    return [{"name": c.function.name, "arguments": dict(c.function.arguments)} for c in message.tool_calls or ()]


async def chat_stream(sdk: ollama.AsyncClient, messages: list[Any], **options: Any) -> dict[str, Any]:
    """`chat(stream=True)`: the fragments, calls and the final line's fields, as the client parsed them."""
    fragments: list[tuple[str, str]] = []
    calls: list[dict[str, Any]] = []
    last: ollama.ChatResponse | None = None
    async for part in await sdk.chat(model="m", messages=messages, stream=True, **options):
        assert last is None or not last.done, "nothing after the done line"
        if part.message.thinking:
            fragments.append(("thinking", part.message.thinking))
        if part.message.content:
            fragments.append(("content", part.message.content))
        calls += _calls(part.message)
        last = part
    assert last is not None and last.done is True
    return {"fragments": fragments,
            "content": "".join(t for k, t in fragments if k == "content"),
            "thinking": "".join(t for k, t in fragments if k == "thinking"),
            "tool_calls": calls, "done_reason": last.done_reason,
            "prompt_eval_count": last.prompt_eval_count, "eval_count": last.eval_count}


async def chat_whole(sdk: ollama.AsyncClient, messages: list[Any], **options: Any) -> dict[str, Any]:
    """`chat(stream=False)`: the same shape; fragments are the whole parts."""
    answer = await sdk.chat(model="m", messages=messages, stream=False, **options)
    message = answer.message
    fragments = [(k, t) for k, t in (("thinking", message.thinking), ("content", message.content)) if t]
    assert answer.done is True
    return {"fragments": fragments, "content": message.content or "", "thinking": message.thinking or "",
            "tool_calls": _calls(message), "done_reason": answer.done_reason,
            "prompt_eval_count": answer.prompt_eval_count, "eval_count": answer.eval_count}
