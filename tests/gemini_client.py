"""Test helpers for the Gemini dialect: what a client should see for an entry, and what it saw.

The expectation is computed from the recorded chunks alone, spelling out the wire mapping here
(not by calling the dialect), so a mapping bug fails the comparison. Empty text parts are left out
on both sides (Gemini ends a stream with one).

The client runs on httpx: with aiohttp installed google-genai would subclass aiohttp's
ClientSession, which aiohttp deprecates (a warning, an error under this suite's settings).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from google import genai
from google.genai import types

from mockllm.dsh.chunks import FinishChunk, UsageChunk
from mockllm.script.entries import Entry
from tests.entry_pieces import ended_blocks, entry_pieces

FINISH = {"stop": "STOP", "tool-calls": "STOP", "max-tokens": "MAX_TOKENS"}
OPEN: list[httpx.AsyncClient] = []  # closed after each test by its module's fixture (`close_all`)


def client(base: str, headers: dict[str, str] | None = None, timeout: float | None = None,
           api_version: str | None = None) -> genai.Client:
    """The official client on a mockllm base root (no `/v1`: it appends its version and `models/…`)."""
    assert not base.endswith("/v1"), base
    http = httpx.AsyncClient()
    OPEN.append(http)
    # The SDK sets each request's timeout itself (milliseconds), over the httpx client's.
    options = types.HttpOptions(base_url=base, headers=headers, httpx_async_client=http, api_version=api_version,
                                timeout=None if timeout is None else int(timeout * 1000))
    return genai.Client(api_key="x", http_options=options)


async def close_all() -> None:
    while OPEN:
        await OPEN.pop().aclose()


def root(base_url: str) -> str:
    """A mockllm base URL (ending in /v1) as a Gemini base URL."""
    return base_url.removesuffix("/v1")


def expected_from_entry(entry: Entry) -> dict[str, Any]:
    fragments: list[tuple[str, str]] = []
    calls: dict[int, dict[str, Any]] = {}
    usage = None
    finish = None
    for piece in entry_pieces(entry):
        if isinstance(piece, UsageChunk):
            u = piece.usage
            prompt = u.inputTokens + (u.cacheReadTokens or 0)
            usage = {"prompt_token_count": prompt, "candidates_token_count": u.outputTokens - (u.reasoningTokens or 0),
                     "thoughts_token_count": u.reasoningTokens, "cached_content_token_count": u.cacheReadTokens,
                     "total_token_count": prompt + u.outputTokens}
        elif isinstance(piece, FinishChunk):
            finish = FINISH[piece.reason.kind]
        elif piece.kind == "tool-call":
            call = calls.setdefault(piece.block_index, {"id": piece.id, "name": piece.name, "args": ""})
            call["id"], call["name"] = call["id"] or piece.id, call["name"] or piece.name
            call["args"] += piece.text
        elif piece.text:
            fragments.append(({"text": "text", "reasoning": "thought"}[piece.kind], piece.text))
    ended = ended_blocks(entry)
    for index, call in calls.items():
        if index in ended:
            call["id"], call["name"] = call["id"] or ended[index].id, call["name"] or ended[index].name
        call["args"] = json.loads(call["args"]) if call["args"].strip() else {}
    return {"fragments": fragments, "tool_calls": list(calls.values()), "usage": usage, "finish": finish}


def _usage(metadata: types.GenerateContentResponseUsageMetadata | None) -> dict[str, Any] | None:
    if metadata is None:
        return None
    return {k: getattr(metadata, k) for k in ("prompt_token_count", "candidates_token_count", "thoughts_token_count",
                                              "cached_content_token_count", "total_token_count")}


def _read(response: types.GenerateContentResponse, into: dict[str, Any]) -> None:
    candidate = (response.candidates or [None])[0]
    if candidate is None:
        return
    for part in (candidate.content.parts if candidate.content else None) or ():
        if part.function_call is not None:
            call = part.function_call
            into["tool_calls"].append({"id": call.id, "name": call.name, "args": call.args})
        elif part.text:
            into["fragments"].append(("thought" if part.thought else "text", part.text))
    if candidate.finish_reason is not None:
        into["finish"] = candidate.finish_reason.value
    if response.usage_metadata is not None:
        into["usage"] = _usage(response.usage_metadata)


async def generate_stream(sdk: genai.Client, contents: Any, **config: Any) -> dict[str, Any]:
    """`generate_content_stream`: fragments, calls, the last finish reason and usage."""
    received: dict[str, Any] = {"fragments": [], "tool_calls": [], "usage": None, "finish": None}
    stream = await sdk.aio.models.generate_content_stream(model="gemini-m", contents=contents,
                                                          config=types.GenerateContentConfig(**config))
    async for response in stream:
        _read(response, received)
    return received


async def generate(sdk: genai.Client, contents: Any, **config: Any) -> dict[str, Any]:
    """`generate_content`: the same shape; fragments are the whole parts."""
    received: dict[str, Any] = {"fragments": [], "tool_calls": [], "usage": None, "finish": None}
    _read(await sdk.aio.models.generate_content(model="gemini-m", contents=contents,
                                                config=types.GenerateContentConfig(**config)), received)
    return received


def whole(fragments: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Streamed fragments as a whole answer's parts: consecutive fragments of one kind joined."""
    out: list[tuple[str, str]] = []
    for kind, text in fragments:
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + text)
        else:
            out.append((kind, text))
    return out
