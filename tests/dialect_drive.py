"""Test helper: send a planned call (tests.agent_drive) in another dialect, through its official SDK.

The conversation is the chat form's, rewritten as the Responses `input` items, Anthropic
`messages`, Gemini `contents` or Ollama `messages` the same agent would send; the answer is drained
as the SDK streams it. Whether it was recorded right is judged by replaying the new tree (the
recorded chunks are dialect-neutral).
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
from google.genai import types

from tests import gemini_client, ollama_client
from tests.agent_drive import PlannedCall


def responses_input(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
            continue
        if m.get("content"):
            items.append({"role": m["role"], "content": m["content"]})
        for call in m.get("tool_calls") or ():
            items.append({"type": "function_call", "call_id": call["id"], "name": call["function"]["name"],
                          "arguments": call["function"]["arguments"]})
    return items


def anthropic_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "tool":
            out.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": m["tool_call_id"],
                                                     "content": m["content"]}]})
        elif m["role"] == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            blocks += [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                        "input": json.loads(c["function"]["arguments"] or "{}")} for c in m.get("tool_calls") or ()]
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


async def send_responses(base_url: str, call: PlannedCall) -> None:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0, default_headers=call.headers)
    async with client:
        stream = await client.responses.create(model="m", input=responses_input(call.messages),  # type: ignore[arg-type]
                                               stream=True)
        async for _ in stream:
            pass


async def send_anthropic(base_url: str, call: PlannedCall) -> None:
    client = anthropic.AsyncAnthropic(base_url=base_url.removesuffix("/v1"), api_key="sk-test", max_retries=0,
                                      default_headers=call.headers)
    async with client:
        stream = await client.messages.create(model="m", max_tokens=1024, stream=True,
                                              messages=anthropic_messages(call.messages))  # type: ignore[arg-type]
        async for _ in stream:
            pass


def gemini_contents(messages: list[dict[str, Any]]) -> tuple[str | None, list[types.Content]]:
    """The system prompt apart, and the rest as contents: tool results as functionResponse parts
    naming their call's id and name."""
    names = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls") or ()}
    system = "".join(m["content"] for m in messages if m["role"] == "system") or None
    contents: list[types.Content] = []
    for m in messages:
        if m["role"] == "tool":
            response = types.FunctionResponse(id=m["tool_call_id"], name=names.get(m["tool_call_id"]),
                                               response={"result": m["content"]})
            contents.append(types.Content(role="user", parts=[types.Part(function_response=response)]))
        elif m["role"] == "assistant":
            parts = [types.Part(text=m["content"])] if m.get("content") else []
            parts += [types.Part(function_call=types.FunctionCall(
                id=c["id"], name=c["function"]["name"], args=json.loads(c["function"]["arguments"] or "{}")))
                for c in m.get("tool_calls") or ()]
            contents.append(types.Content(role="model", parts=parts))
        elif m["role"] == "user":
            contents.append(types.Content(role="user", parts=[types.Part(text=m["content"])]))
    return system, contents


def ollama_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """As the official client sends them: no tool-call ids, tool results by `tool_name`."""
    names = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls") or ()}
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "tool":
            out.append({"role": "tool", "content": m["content"], "tool_name": names.get(m["tool_call_id"], "")})
        elif m["role"] == "assistant":
            message: dict[str, Any] = {"role": "assistant", "content": m.get("content") or ""}
            if m.get("tool_calls"):
                message["tool_calls"] = [{"function": {"name": c["function"]["name"],
                                                       "arguments": json.loads(c["function"]["arguments"] or "{}")}}
                                         for c in m["tool_calls"]]
            out.append(message)
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


async def send_gemini(base_url: str, call: PlannedCall) -> dict[str, Any]:
    """The call through google-genai, streamed: what the client received (tests.gemini_client)."""
    system, contents = gemini_contents(call.messages)
    sdk = gemini_client.client(base_url.removesuffix("/v1"), call.headers)
    try:
        return await gemini_client.generate_stream(sdk, contents, system_instruction=system)
    finally:
        await gemini_client.close_all()


async def send_ollama(base_url: str, call: PlannedCall) -> dict[str, Any]:
    """The call through the ollama client, streamed: what the client received (tests.ollama_client)."""
    sdk = ollama_client.client(base_url.removesuffix("/v1"), headers=call.headers)
    try:
        return await ollama_client.chat_stream(sdk, ollama_messages(call.messages))
    finally:
        await ollama_client.close_all()


SENDERS = {"responses": send_responses, "anthropic": send_anthropic}
# Gemini and Ollama send tool calls whole and Ollama reports no cache or reasoning counts: a tree
# recorded through them replays as chat with those fragments joined, so it is checked by replaying
# it in its own dialect (tests/test_record_dialects.py), not against the original chat stream.
WHOLE_CALL_SENDERS = {"gemini": send_gemini, "ollama": send_ollama}
