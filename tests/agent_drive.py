"""Test helper: drive a recorded tree's sessions as their agent did, through any OpenAI base URL.

Each session's requests are rebuilt from its log as an agent sends them: the conversation so far
(user messages, the assistant's answers as assembled from their chunks, tool results), ending in
what the agent sent before the call. A fork child's conversation starts with its seed's turns.
Calls of all sessions are made in the order they happened (each call's first chunk time), so that
a child runs between the parent call that spawned it and the one that reads its result.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import msgspec
import openai
import pytest

from mockllm.dsh.chunks import Block, BlockEnd, FinishChunk
from mockllm.dsh.names import TOOL_RESULT, USER_MESSAGE
from mockllm.dsh.reader import CallChunk, SessionLog
from mockllm.scenario.load import Scenario, SessionScript
from mockllm.script.entries import ChunksEntry, Entry, HangEntry, ThrowEntry
from mockllm.script.inputs import recorded_inputs
from tests.replay_client import expected_from_entry, received_from_stream

HOLD_TIMEOUT = 0.3  # a held call (hang, aborted finish) is given up after this, as an agent cancels


@dataclass(slots=True)
class PlannedCall:
    session: SessionScript
    number: int  # the call's index in its session's script
    entry: Entry
    messages: list[dict[str, Any]]
    at: float  # when it happened, for ordering across sessions
    anonymous: bool = False  # send no session or lineage headers (routed by conversation)

    @property
    def headers(self) -> dict[str, str]:
        if self.anonymous:
            return {}
        headers = {"x-mockllm-session": self.session.id}
        if self.number == 0 and self.session.parent is not None:
            headers["x-mockllm-parent"] = self.session.parent
            if self.session.kind == "fork":
                headers["x-mockllm-fork"] = "true"
        return headers


def _assistant(blocks: list[Block]) -> dict[str, Any]:
    text = "".join(b.text or "" for b in blocks if b.type == "text")
    calls = [{"id": b.id, "type": "function", "function": {
        "name": b.name, "arguments": b.arguments if isinstance(b.arguments, str) else msgspec.json.encode(
            b.arguments).decode()}} for b in blocks if b.type == "tool-call"]
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    return message


def session_requests(log: SessionLog) -> list[tuple[list[dict[str, Any]], float | None]]:
    """The conversation the agent sent before each of the session's own calls, and when the call ran."""
    messages: list[dict[str, Any]] = []
    out: list[tuple[list[dict[str, Any]], float | None]] = []
    open_calls: dict[tuple[int, int], list[Block]] = {}
    for index, event in enumerate(log.events):
        data = event.data
        if isinstance(data, CallChunk):
            key = (data.turn, data.step)
            if key not in open_calls:
                open_calls[key] = []
                if index >= log.header.cut:
                    out.append(([dict(m) for m in messages], event.time))
            if isinstance(data.chunk, BlockEnd):
                open_calls[key].append(data.chunk.block)
            elif isinstance(data.chunk, FinishChunk):
                messages.append(_assistant(open_calls.pop(key)))
        elif event.type in (USER_MESSAGE, TOOL_RESULT) and isinstance(data, msgspec.Raw):
            for item in recorded_inputs(event.type, data):
                if item.role == "user":
                    messages.append({"role": "user", "content": item.text})
                else:
                    messages.append({"role": "tool", "tool_call_id": item.tool_call_id, "content": item.text})
    if not out or (messages[-1:] and messages[-1]["role"] != "assistant"):
        out.append((messages, None))  # what the agent sent next: a call the log holds no chunks for
    return out


def plan(scenario: Scenario) -> list[PlannedCall]:
    """Every session's calls in the order they happened (ties: script order)."""
    calls: list[PlannedCall] = []
    for order, session in enumerate(scenario.sessions):
        assert session.log is not None, "load the scenario with keep_logs=True"
        requests = session_requests(session.log)
        for number, entry in enumerate(session.entries):
            messages, at = requests[min(number, len(requests) - 1)]
            if not messages:
                messages = [{"role": "user", "content": f"{session.file} call {number}"}]
            calls.append(PlannedCall(session, number, entry, messages, at if at is not None else order + number))
    calls.sort(key=lambda c: c.at)
    return calls


def holds(entry: Entry) -> bool:
    if isinstance(entry, HangEntry):
        return True
    if isinstance(entry, ChunksEntry) and entry.chunks and isinstance(entry.chunks[-1], FinishChunk):
        return entry.chunks[-1].reason.kind == "aborted"
    return False


async def drive(base_url: str, calls: list[PlannedCall]) -> None:
    """Make every call through `base_url`; each must answer as its original entry says."""
    for call in calls:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0, default_headers=call.headers)
        async with client:
            await expect_entry(client, call)


async def expect_entry(client: openai.AsyncOpenAI, call: PlannedCall) -> None:
    where = f"{call.session.file} call {call.number}"
    entry = call.entry
    messages: Any = call.messages
    if holds(entry):
        stream = await client.chat.completions.create(model="m", messages=messages, stream=True,
                                                      timeout=HOLD_TIMEOUT)
        with pytest.raises(openai.APITimeoutError):
            async for chunk in stream:
                assert chunk.choices[0].delta.content in ("partial", None, ""), where
        await asyncio.sleep(0)  # let the server see the client leave
    elif isinstance(entry, ThrowEntry):
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model="m", messages=messages, stream=True)
        assert caught.value.status_code == (entry.status or 500), where
        assert entry.message in caught.value.message, where
    else:
        stream = await client.chat.completions.create(model="m", messages=messages, stream=True,
                                                      stream_options={"include_usage": True})
        assert await received_from_stream(stream) == expected_from_entry(entry), where
