"""The OpenAI Responses dialect through the official `openai` SDK over real sockets.

Every corpus scenario, every session, streamed (`responses.stream` + `get_final_response()`) and
not (`responses.create`): what the client assembles must equal each session's script. Then the
errors, and routing with no header: full-history trees and `previous_response_id` chains.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from mockllm.dsh.chunks import BlockEnd, BlockStart, FinishChunk, ReasoningDelta, TextDelta, ToolCallDelta, UsageChunk
from mockllm.scenario.load import load_scenario
from mockllm.script.entries import ChunksEntry, Entry, HangEntry, ThrowEntry, throw_status
from tests.conftest import new_run, run_state
from tests.logbuilder import (
    FORK_ID,
    FORK_TASK,
    MIXED_ANSWERS,
    PRIMARY_ID,
    PRIMARY_PROMPTS,
    SPAWN_ID,
    SPAWN_TASK,
    SYSTEM,
    chunks_entry,
    corpus_or_skip,
    corpus_scenarios,
    finish,
    text_call,
    write_mixed_tree,
    write_override,
    write_sessions,
)

STATUS_ERRORS: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError, 401: openai.AuthenticationError, 403: openai.PermissionDeniedError,
    404: openai.NotFoundError, 409: openai.ConflictError, 422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
}


def error_class(status: int) -> type[openai.APIStatusError]:
    """The exception openai-python raises for an HTTP status."""
    return STATUS_ERRORS.get(status, openai.InternalServerError if status >= 500 else openai.APIStatusError)


def client(base_url: str, headers: dict[str, str] | None = None) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, default_headers=headers or {})


def expected_call(entry: Entry) -> dict[str, Any]:
    """What a Responses client should assemble from a chunks entry, from the recorded chunks alone."""
    assert isinstance(entry, ChunksEntry)
    fragments: list[tuple[str, str]] = []
    ended = {c.index: c.block for c in entry.chunks if isinstance(c, BlockEnd)}
    with_deltas = {c.index for c in entry.chunks if isinstance(c, TextDelta | ReasoningDelta | ToolCallDelta)}
    text: list[str] = []
    reasoning: list[str] = []
    status, usage = "completed", None
    for chunk in entry.chunks:
        if isinstance(chunk, TextDelta):
            fragments.append(("text", chunk.text))
            text.append(chunk.text)
        elif isinstance(chunk, ReasoningDelta):
            fragments.append(("reasoning", chunk.text))
            reasoning.append(chunk.text)
        elif isinstance(chunk, ToolCallDelta):
            fragments.append(("tool", chunk.argumentsDelta))
        elif isinstance(chunk, BlockStart) and chunk.index not in with_deltas and chunk.index in ended:
            block = ended[chunk.index]
            if block.type in ("text", "reasoning"):
                fragments.append((block.type, block.text or ""))
                (text if block.type == "text" else reasoning).append(block.text or "")
        elif isinstance(chunk, UsageChunk):
            counts = chunk.usage
            prompt = counts.inputTokens + (counts.cacheReadTokens or 0) + (counts.cacheWriteTokens or 0)
            usage = {"input_tokens": prompt, "output_tokens": counts.outputTokens,
                     "total_tokens": prompt + counts.outputTokens,
                     "cached_tokens": counts.cacheReadTokens or 0, "reasoning_tokens": counts.reasoningTokens or 0}
        elif isinstance(chunk, FinishChunk):
            status = {"stop": "completed", "tool-calls": "completed", "max-tokens": "incomplete"}[chunk.reason.kind]
    tools = [{"call_id": b.id, "name": b.name,
              "arguments": json.loads(b.arguments) if isinstance(b.arguments, str) else b.arguments}
             for _, b in sorted(ended.items()) if b.type == "tool-call"]
    return {"fragments": fragments, "text": "".join(text), "reasoning": "".join(reasoning), "tools": tools,
            "status": status, "usage": usage}


def assembled(response: Any) -> dict[str, Any]:
    """The parts of a final Response that `expected_call` predicts (fragments filled in by the caller)."""
    reasoning = "".join(s.text for item in response.output if item.type == "reasoning" for s in item.summary)
    tools = [{"call_id": item.call_id, "name": item.name, "arguments": json.loads(item.arguments)}
             for item in response.output if item.type == "function_call"]
    usage = None
    if response.usage is not None:
        u = response.usage
        usage = {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens, "total_tokens": u.total_tokens,
                 "cached_tokens": u.input_tokens_details.cached_tokens,
                 "reasoning_tokens": u.output_tokens_details.reasoning_tokens}
    return {"text": response.output_text, "reasoning": reasoning, "tools": tools, "status": response.status,
            "usage": usage}


async def streamed(sdk: openai.AsyncOpenAI, **request: Any) -> dict[str, Any]:
    """One `responses.stream` call: every delta fragment in order, and the final response assembled."""
    fragments: list[tuple[str, str]] = []
    kinds = {"response.output_text.delta": "text", "response.reasoning_summary_text.delta": "reasoning",
             "response.function_call_arguments.delta": "tool"}
    async with sdk.responses.stream(model="m", **request) as stream:
        async for event in stream:
            if event.type in kinds:
                fragments.append((kinds[event.type], event.delta))  # type: ignore[union-attr]
        final = await stream.get_final_response()
    return {"fragments": fragments, **assembled(final), "id": final.id}



@pytest.mark.parametrize("stream", [True, False], ids=["stream", "create"])
@pytest.mark.parametrize("scenario_dir", corpus_scenarios())
async def test_every_session_gets_its_own_recorded_calls(serve, scenario_dir, stream):
    corpus_or_skip()
    scenario = load_scenario(scenario_dir)
    server = await serve(scenario_dir)
    run, base = await new_run(server.base_url, scenario.name)
    ids = set()
    for number, session in enumerate(scenario.sessions):
        async with client(base, {"x-mockllm-session": f"live-{number}"}) as sdk:
            for call, entry in enumerate(session.entries):
                where = f"{session.file} call {call}"
                request = {"input": f"{session.file} call {call}"}
                if isinstance(entry, ChunksEntry):
                    expected = expected_call(entry)
                    if stream:
                        got = await streamed(sdk, **request)
                    else:
                        final = await sdk.responses.create(model="m", **request)
                        got = {"fragments": expected["fragments"], **assembled(final), "id": final.id}
                    ids.add(got.pop("id"))
                    assert got == expected, where
                elif isinstance(entry, ThrowEntry):
                    status = throw_status(entry.code, entry.status)
                    with pytest.raises(error_class(status)) as caught:
                        await sdk.responses.create(model="m", stream=stream, **request)  # type: ignore[call-overload]
                    assert caught.value.status_code == status
                    assert entry.message in caught.value.message
                else:
                    assert isinstance(entry, HangEntry)
                    with pytest.raises(openai.APITimeoutError):
                        async with sdk.responses.stream(model="m", timeout=0.3, **request) as hanging:
                            async for event in hanging:
                                if event.type == "response.output_text.delta":
                                    assert event.delta == "partial"
            if session.entries:
                # One call past the end: 410 script_exhausted, in OpenAI's error shape, never retried.
                with pytest.raises(openai.APIStatusError) as past:
                    await sdk.responses.create(model="m", input="one more")
                assert past.value.status_code == 410
                assert past.value.response.headers["x-should-retry"] == "false"
                assert set(past.value.body) == {"message", "type", "param", "code"}  # type: ignore[arg-type]
                assert past.value.code == "script_exhausted"
    assert len(ids) == sum(isinstance(e, ChunksEntry) for s in scenario.sessions for e in s.entries)
    state = await run_state(server.base_url, run)
    assert state["consumed"] is True
    assert {f["code"] for f in state["failures"]} <= {"script_exhausted"}


def scripted(folder: Path, *entries: dict[str, Any]) -> Path:
    write_override(folder, list(entries))
    return folder


async def test_a_throw_mid_stream_raises_the_sdks_api_error(serve, tmp_path):
    partial = [{"type": "block-start", "index": 0, "blockType": "text"},
               {"type": "text-delta", "index": 0, "text": "par"}]
    server = await serve(scripted(tmp_path / "s", {"kind": "throw", "message": "overloaded", "code": "HTTP_529",
                                                   "chunks": partial}))
    _, base = await new_run(server.base_url, "s")
    seen = []
    async with client(base) as sdk:
        with pytest.raises(openai.APIError) as caught:
            async with sdk.responses.stream(model="m", input="q") as stream:
                async for event in stream:
                    seen.append(event.type)
    assert not isinstance(caught.value, openai.APIStatusError)  # mid-stream: no status code
    assert caught.value.message == "overloaded"
    assert caught.value.code == "HTTP_529"
    assert seen[-1] == "response.output_text.delta"


async def test_a_cut_stream_ends_with_no_completed_response(serve, tmp_path):
    partial = [{"type": "block-start", "index": 0, "blockType": "text"},
               {"type": "text-delta", "index": 0, "text": "half"}]
    server = await serve(scripted(tmp_path / "s", {"kind": "throw", "message": "gone", "code": "STREAM_CLOSED",
                                                   "chunks": partial}))
    _, base = await new_run(server.base_url, "s")
    async with client(base) as sdk, sdk.responses.stream(model="m", input="q") as stream:
        with pytest.raises(RuntimeError, match=r"response\.completed"):
            await stream.get_final_response()


async def test_max_tokens_is_an_incomplete_response(serve, tmp_path):
    server = await serve(scripted(tmp_path / "s", chunks_entry(text_call("cut sh", finish="max-tokens")),
                                  chunks_entry(text_call("cut sh", finish="max-tokens"))))
    _, base = await new_run(server.base_url, "s")
    async with client(base) as sdk:
        final = await sdk.responses.create(model="m", input="q")
        assert (final.status, final.incomplete_details.reason if final.incomplete_details else None) == (
            "incomplete", "max_output_tokens")
        assert final.output_text == "cut sh"
        events = [event async for event in await sdk.responses.create(model="m", input="q", stream=True)]
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"  # type: ignore[union-attr]


async def test_context_window_exceeded_is_a_bad_request(serve, tmp_path):
    server = await serve(scripted(tmp_path / "s", chunks_entry([finish(
        "error", failure={"code": "CONTEXT_WINDOW_EXCEEDED", "message": "prompt too long"})])))
    _, base = await new_run(server.base_url, "s")
    async with client(base) as sdk:
        with pytest.raises(openai.BadRequestError) as caught:
            await sdk.responses.create(model="m", input="q", stream=True)
    assert caught.value.code == "context_length_exceeded"


async def test_mock_errors_take_openais_shape(serve, tmp_path):
    server = await serve(write_sessions(tmp_path / "one", {"p": [text_call("only")]}))
    _, base = await new_run(server.base_url, "one")
    async with aiohttp.ClientSession() as session, session.post(f"{base}/responses", json={"model": "m"}) as response:
        body = await response.json()
        assert response.status == 400
        assert response.headers["x-should-retry"] == "false"
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == "invalid_request"
    assert '"input"' in body["error"]["message"]


# -- routing with no header -----------------------------------------------------------------------

def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def answer(response: Any) -> tuple[str, str]:
    calls = [item for item in response.output if item.type == "function_call"]
    return ("tool", calls[0].name) if calls else ("text", response.output_text)


class Conversation:
    """A full-history Responses agent: every call sends `instructions` and all items so far."""

    def __init__(self, *items: dict[str, Any]) -> None:
        self.items = list(items)

    def served(self, response: Any) -> None:
        # The output items go back as input as they came (reasoning included, as agents do).
        self.items += [item.model_dump(exclude_none=True) for item in response.output]

    def tool_result(self, text: str) -> None:
        call = next(i for i in reversed(self.items) if i.get("type") == "function_call")
        self.items.append({"type": "function_call_output", "call_id": call["call_id"], "output": text})


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    return write_mixed_tree(tmp_path / "mixed")


async def test_headerless_tree_routes_by_its_input(serve, mixed):
    server = await serve(mixed)
    run, base = await new_run(server.base_url, "mixed")
    got: dict[str, list[tuple[str, str]]] = {PRIMARY_ID: [], SPAWN_ID: [], FORK_ID: []}
    primary = Conversation(user(PRIMARY_PROMPTS[0]))
    spawn = Conversation(user(SPAWN_TASK))
    async with client(base) as sdk:
        async def call(conversation: Conversation, recorded: str) -> None:
            response = await sdk.responses.create(model="m", instructions=SYSTEM, input=list(conversation.items))
            got[recorded].append(answer(response))
            conversation.served(response)

        await call(primary, PRIMARY_ID)
        primary.items.append(user(PRIMARY_PROMPTS[1]))
        await call(primary, PRIMARY_ID)
        await call(spawn, SPAWN_ID)
        spawn.tool_result("alpha file contents")
        primary.tool_result("ALPHA")
        await call(primary, PRIMARY_ID)
        await call(spawn, SPAWN_ID)
        # The fork child starts from the parent's first turn (its prompt and the items it got), then its task.
        first_turn = primary.items[:primary.items.index(user(PRIMARY_PROMPTS[1]))]
        fork = Conversation(*first_turn, user(FORK_TASK))
        await call(fork, FORK_ID)
        fork.tool_result("codeword: SAFFRON")
        primary.tool_result("SAFFRON")
        await call(primary, PRIMARY_ID)
        await call(fork, FORK_ID)
    assert got == MIXED_ANSWERS
    state = await run_state(server.base_url, run)
    assert state["bindings"] == {"conversation-1": PRIMARY_ID, "conversation-2": SPAWN_ID,
                                 "conversation-3": FORK_ID}
    assert state["consumed"] is True
    assert state["failures"] == []


async def test_previous_response_id_chains_route_with_no_header(serve, mixed):
    """Each agent sends only its new items and the id of its last response; the fork child continues
    its parent's first response (an older one), which branches it off into a session of its own."""
    server = await serve(mixed)
    run, base = await new_run(server.base_url, "mixed")
    got: dict[str, list[tuple[str, str]]] = {PRIMARY_ID: [], SPAWN_ID: [], FORK_ID: []}
    last: dict[str, dict[str, Any]] = {}  # recorded session -> its latest streamed reply

    async with client(base) as sdk:
        async def call(recorded: str, *items: dict[str, Any], after: str | None = None) -> None:
            previous = after or (last[recorded]["id"] if recorded in last else None)
            extra = {"previous_response_id": previous} if previous else {"instructions": SYSTEM}
            reply = last[recorded] = await streamed(sdk, input=list(items), **extra)
            got[recorded].append(("tool", reply["tools"][0]["name"]) if reply["tools"] else ("text", reply["text"]))

        def result(recorded: str, text: str) -> dict[str, Any]:
            return {"type": "function_call_output", "call_id": last[recorded]["tools"][0]["call_id"], "output": text}

        await call(PRIMARY_ID, user(PRIMARY_PROMPTS[0]))
        first_reply = last[PRIMARY_ID]["id"]
        await call(PRIMARY_ID, user(PRIMARY_PROMPTS[1]))
        await call(SPAWN_ID, user(SPAWN_TASK))
        await call(SPAWN_ID, result(SPAWN_ID, "alpha file contents"))
        await call(PRIMARY_ID, result(PRIMARY_ID, "ALPHA"))
        await call(FORK_ID, user(FORK_TASK), after=first_reply)
        await call(FORK_ID, result(FORK_ID, "codeword: SAFFRON"))
        await call(PRIMARY_ID, result(PRIMARY_ID, "SAFFRON"))
    assert got == MIXED_ANSWERS
    state = await run_state(server.base_url, run)
    assert state["bindings"] == {"conversation-1": PRIMARY_ID, "conversation-2": SPAWN_ID,
                                 "conversation-3": FORK_ID}
    assert state["consumed"] is True
    assert state["failures"] == []


@pytest.mark.parametrize("previous", ["resp_from_elsewhere", "resp_mockllm_1_0", "resp_mockllm_0_3"],
                         ids=["foreign", "unbound-script", "never-served-call"])
async def test_an_id_this_run_never_served_routes_by_conversation(serve, mixed, previous):
    server = await serve(mixed)
    run, base = await new_run(server.base_url, "mixed")
    async with client(base) as sdk:
        first = await sdk.responses.create(model="m", instructions=SYSTEM, input=PRIMARY_PROMPTS[0])
        assert answer(first) == MIXED_ANSWERS[PRIMARY_ID][0]
        # Not a step of any chain of this run: a new conversation, bound to the next unbound session.
        other = await sdk.responses.create(model="m", input=SPAWN_TASK, previous_response_id=previous)
    assert answer(other) == MIXED_ANSWERS[SPAWN_ID][0]
    assert (await run_state(server.base_url, run))["bindings"] == {"conversation-1": PRIMARY_ID,
                                                                   "conversation-2": SPAWN_ID}


async def test_responses_and_chat_share_a_run(serve, mixed):
    """Dialects are views of one run: its cursors count every call, whatever wire it came by."""
    server = await serve(mixed)
    _, base = await new_run(server.base_url, "mixed")
    async with client(base, {"x-mockllm-session": PRIMARY_ID}) as sdk:
        first = await sdk.responses.create(model="m", input="q")
        second = await sdk.chat.completions.create(model="m", messages=[user("q")])
    assert answer(first) == MIXED_ANSWERS[PRIMARY_ID][0]
    calls = second.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls if c.type == "function"] == [MIXED_ANSWERS[PRIMARY_ID][1][1]]


async def test_from_request_templates_search_instructions_and_input(serve, tmp_path):
    said = [{"type": "block-start", "index": 0, "blockType": "text"},
            {"type": "text-delta", "index": 0,
             "text": "ticket {{fromRequest:ticket (\\w+)}} in {{fromRequest:repo=(\\w+)}}"},
            {"type": "finish", "reason": {"kind": "stop"}}]
    server = await serve(scripted(tmp_path / "s", chunks_entry(said)))
    _, base = await new_run(server.base_url, "s")
    async with client(base) as sdk:
        final = await sdk.responses.create(model="m", instructions="repo=mockllm", input=[
            {"role": "user", "content": [{"type": "input_text", "text": "fix ticket T42"}]}])
    assert final.output_text == "ticket T42 in mockllm"
