"""Test helper: send a planned call (tests.agent_drive) in another dialect, through its official SDK.

The conversation is the chat form's, rewritten as the Responses `input` items or Anthropic
`messages` the same agent would send; the answer is drained as the SDK streams it. Whether it was
recorded right is judged by replaying the new tree (the recorded chunks are dialect-neutral).
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai

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


SENDERS = {"responses": send_responses, "anthropic": send_anthropic}
