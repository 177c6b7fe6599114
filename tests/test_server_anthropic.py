"""The Anthropic Messages dialect through the official `anthropic` SDK, over real sockets.

Every real dsh tree, every session, streamed (`messages.stream` + `get_final_message()`) and not
(`messages.create`): what the client assembles equals each session's own script. Then errors,
exhaustion, base URLs, authentication styles and header-less routing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import httpx2
import pytest

from mockllm.scenario.load import load_scenario
from mockllm.script.entries import ChunksEntry, HangEntry, ThrowEntry
from tests.anthropic_client import SDK_ERRORS, create_message, expected_from_entry, sdk_base, stream_message
from tests.conftest import http, new_run, run_state
from tests.logbuilder import (
    FORK_ID,
    FORK_TASK,
    MIXED_ANSWERS,
    PRIMARY_ID,
    PRIMARY_PROMPTS,
    SPAWN_ID,
    SPAWN_TASK,
    SYSTEM,
    corpus_or_skip,
    corpus_scenarios,
    text_call,
    write_mixed_tree,
    write_override,
    write_sessions,
)

MODES = {"stream": stream_message, "create": create_message}
# A held call, seen by a client with a short timeout: before the response (non-stream), or while
# reading a stream that has started (the SDK lets the transport's ReadTimeout through then).
HELD = (anthropic.APITimeoutError, httpx2.ReadTimeout)



def client(base_url: str, **options: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=sdk_base(base_url), **{"api_key": "x", "max_retries": 0, **options})


def override(folder: Path, entries: list[dict[str, Any]]) -> Path:
    """An override-only scenario: `entries` is its primary's whole script."""
    return write_override(folder, entries).parent


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("scenario_dir", corpus_scenarios())
async def test_every_session_gets_its_own_recorded_calls(serve, scenario_dir, mode):
    corpus_or_skip()
    scenario = load_scenario(scenario_dir)
    server = await serve(scenario_dir)
    run, base = await new_run(server.base_url, scenario.name)
    ask = MODES[mode]
    # Fresh live ids, bound in first-call order: the same way dsh binds when replaying.
    for number, session in enumerate(scenario.sessions):
        async with client(base, default_headers={"x-mockllm-session": f"live-{number}"}) as sdk:
            for call, entry in enumerate(session.entries):
                messages = [user(f"{session.file} call {call}")]
                where = f"{session.file} call {call}"
                if isinstance(entry, ChunksEntry):
                    received = await ask(sdk, messages)
                    expected = expected_from_entry(entry)
                    if mode == "create":
                        expected["fragments"] = []
                    assert received.pop("id") == f"msg_mockllm_{number}_{call}", where
                    assert received == expected, where
                elif isinstance(entry, ThrowEntry):
                    with pytest.raises(anthropic.APIStatusError) as caught:
                        await ask(sdk, messages)
                    assert type(caught.value) is SDK_ERRORS[entry.status or 500], where
                    assert caught.value.body["error"]["message"] == entry.message
                else:
                    assert isinstance(entry, HangEntry)
                    with pytest.raises(HELD):
                        await ask(sdk, messages, timeout=0.3)
    status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
    assert status == 200 and isinstance(report, dict)
    assert report["failures"] == []
    assert report["consumed"] is True


async def test_hang_streams_partial_then_holds(serve, tmp_path):
    server = await serve(override(tmp_path / "hang", [{"kind": "hang"}]))
    _, base = await new_run(server.base_url, "hang")
    seen: list[str] = []
    async with client(base) as sdk:
        with pytest.raises(HELD):
            async with sdk.messages.stream(model="m", max_tokens=10, messages=[user("q")], timeout=0.3) as stream:
                async for text in stream.text_stream:
                    seen.append(text)
    assert seen == ["partial"]


# -- errors ---------------------------------------------------------------------------------------

THROWS = [
    ({"code": "AUTH"}, 401, "authentication_error"),
    ({"code": "RATE_LIMIT"}, 429, "rate_limit_error"),
    ({"code": "INVALID_REQUEST"}, 400, "invalid_request_error"),
    ({"code": "SERVER"}, 500, "api_error"),
    ({"code": "HTTP_529"}, 529, "overloaded_error"),
    ({"code": "HTTP_503"}, 503, "api_error"),
    ({"code": "AUTH", "status": 403}, 403, "permission_error"),
]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(("throw", "status", "error_type"), THROWS,
                         ids=["auth", "rate-limit", "invalid-request", "server", "overloaded", "http-503", "explicit"])
async def test_throw_raises_the_sdk_class_for_its_status(serve, tmp_path, throw, status, error_type, mode):
    server = await serve(override(tmp_path / "err", [{"kind": "throw", "message": "provider said no", **throw}]))
    run, base = await new_run(server.base_url, "err")
    async with client(base) as sdk:
        with pytest.raises(anthropic.APIStatusError) as caught:
            await MODES[mode](sdk, [user("q")])
    assert type(caught.value) is SDK_ERRORS[status]
    assert caught.value.status_code == status
    # A replayed error is Anthropic's own shape, exactly: no mockllm fields.
    assert caught.value.body == {"type": "error", "error": {"type": error_type, "message": "provider said no"}}
    assert "x-should-retry" not in caught.value.response.headers
    assert (await run_state(server.base_url, run))["failures"] == []


async def test_throw_after_chunks_is_an_error_event_mid_stream(serve, tmp_path):
    chunks = [{"type": "block-start", "index": 0, "blockType": "text"},
              {"type": "text-delta", "index": 0, "text": "par"}, {"type": "text-delta", "index": 0, "text": "tial"}]
    server = await serve(override(tmp_path / "mid", [
        {"kind": "throw", "message": "overloaded", "code": "HTTP_529", "chunks": chunks}]))
    _, base = await new_run(server.base_url, "mid")
    seen: list[str] = []
    async with client(base) as sdk:
        with pytest.raises(anthropic.APIStatusError) as caught:
            async with sdk.messages.stream(model="m", max_tokens=10, messages=[user("q")]) as stream:
                async for text in stream.text_stream:
                    seen.append(text)
    assert seen == ["par", "tial"]
    assert caught.value.status_code == 200  # the stream had started: Anthropic SDKs raise with the 200
    assert caught.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": "overloaded"}}


@pytest.mark.parametrize("mode", list(MODES))
async def test_context_window_exceeded_is_a_400_prompt_too_long(serve, tmp_path, mode):
    failure = {"code": "CONTEXT_WINDOW_EXCEEDED", "message": "250000 > 200000"}
    finish = {"type": "finish", "reason": {"kind": "error", "failure": failure}}
    server = await serve(override(tmp_path / "ctx", [{"kind": "chunks", "chunks": [finish]}]))
    _, base = await new_run(server.base_url, "ctx")
    async with client(base) as sdk:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await MODES[mode](sdk, [user("q")])
    assert caught.value.body == {"type": "error", "error": {"type": "invalid_request_error",
                                                            "message": "prompt is too long: 250000 > 200000"}}


@pytest.mark.parametrize("mode", list(MODES))
async def test_empty_response_is_a_message_with_no_content(serve, tmp_path, mode):
    finish = {"type": "finish", "reason": {"kind": "error", "failure": {"code": "EMPTY_RESPONSE", "message": "empty"}}}
    server = await serve(override(tmp_path / "empty", [{"kind": "chunks", "chunks": [finish]}]))
    _, base = await new_run(server.base_url, "empty")
    async with client(base) as sdk:
        received = await MODES[mode](sdk, [user("q")])
    assert (received["blocks"], received["stop_reason"]) == ([], "end_turn")


@pytest.mark.parametrize("mode", list(MODES))
async def test_one_call_past_the_end_is_410_script_exhausted_and_not_retried(serve, tmp_path, mode):
    server = await serve(write_sessions(tmp_path / "one", {"p": [text_call("only")]}))
    run, base = await new_run(server.base_url, "one")
    # max_retries=2: x-should-retry false must stop the SDK at once, so exactly one more call is journaled.
    async with client(base, max_retries=2) as sdk:
        await MODES[mode](sdk, [user("q")])
        with pytest.raises(anthropic.APIStatusError) as caught:
            await MODES[mode](sdk, [user("q"), {"role": "assistant", "content": "only"}, user("again")])
    error = caught.value
    assert error.status_code == 410
    assert error.response.headers["x-should-retry"] == "false"
    assert error.response.headers["content-type"].startswith("application/json")
    assert set(error.body) == {"type", "error"} and error.body["type"] == "error"
    assert set(error.body["error"]) == {"type", "message", "code"}
    assert error.body["error"]["type"] == "invalid_request_error"
    assert error.body["error"]["code"] == "script_exhausted"
    message = error.body["error"]["message"]
    assert message.startswith("script_exhausted: ")
    for part in (run, "session.jsonl", "call 1 (0-based)", "1 entries"):
        assert part in message, (part, message)
    state = await run_state(server.base_url, run)
    assert len(state["journal"]) == 2
    assert [f["code"] for f in state["failures"]] == ["script_exhausted"]


async def test_unknown_run_is_404_in_anthropic_shape(serve, tmp_path):
    server = await serve(write_sessions(tmp_path / "one", {"p": [text_call("only")]}))
    async with client(f"{server.base_url}/runs/run-404/v1") as sdk:
        with pytest.raises(anthropic.NotFoundError) as caught:
            await create_message(sdk, [user("q")])
    assert caught.value.body["error"]["code"] == "unknown_run"
    assert caught.value.body["error"]["type"] == "not_found_error"


@pytest.mark.parametrize(("body", "needle"), [
    (b"not json", "not an Anthropic Messages request"),
    (b'{"model":"m","max_tokens":5,"messages":[]}', '"messages" is empty'),
    (b'{"model":"m","max_tokens":5}', "not an Anthropic Messages request"),
], ids=["not-json", "empty-messages", "no-messages"])
async def test_bad_request_is_400_invalid_request(serve, tmp_path, body, needle):
    server = await serve(write_sessions(tmp_path / "one", {"p": [text_call("only")]}))
    async with aiohttp.ClientSession() as session, session.post(
            f"{server.base_url}/v1/messages", data=body, headers={"content-type": "application/json"}) as response:
        status, payload = response.status, await response.json()
    assert status == 400
    assert payload["type"] == "error"
    assert payload["error"]["code"] == "invalid_request"
    assert payload["error"]["type"] == "invalid_request_error"
    assert needle in payload["error"]["message"]


# -- addresses and authentication -----------------------------------------------------------------

@pytest.mark.parametrize("base", ["root", "scenario", "run"])
@pytest.mark.parametrize("auth", ["api-key", "bearer"])
async def test_every_base_url_and_either_auth_style(serve, tmp_path, base, auth):
    server = await serve(write_sessions(tmp_path / "one", {"p": [text_call("hello there")]}))
    urls = {"root": f"{server.base_url}/v1", "scenario": f"{server.base_url}/scenarios/one/v1"}
    urls["run"] = (await new_run(server.base_url, "one"))[1]
    # anthropic 2.14 sends even an api_key as a bearer token: x-api-key (what older SDKs and curl send) is set by hand.
    credentials: dict[str, Any] = {"api_key": None, "default_headers": {"x-api-key": "sk-anything"}} \
        if auth == "api-key" else {"api_key": None, "auth_token": "tok"}
    sent: list[dict[str, str]] = []

    async def note(request: Any) -> None:
        sent.append(dict(request.headers))

    async with client(urls[base], http_client=httpx2.AsyncClient(event_hooks={"request": [note]}),
                      **credentials) as sdk:
        received = await stream_message(sdk, [user("q")])
    assert received["text"] == "hello there"
    assert sent[0].get("x-api-key") == ("sk-anything" if auth == "api-key" else None)
    assert sent[0].get("authorization") == ("Bearer tok" if auth == "bearer" else None)
    assert "anthropic-version" in sent[0]


# -- header-less: routing by conversation ---------------------------------------------------------

class AnthropicConversation:
    """Requests built the way an Anthropic agent builds them: `system` apart, the served content sent back."""

    def __init__(self, *messages: dict[str, Any]) -> None:
        self.messages = list(messages)

    async def ask(self, sdk: anthropic.AsyncAnthropic) -> anthropic.types.Message:
        async with sdk.messages.stream(model="m", max_tokens=1024, system=SYSTEM, messages=self.messages) as stream:
            final = await stream.get_final_message()
        # Thinking blocks (with their signature) go back as they came, as Anthropic requires with tools.
        self.messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in final.content]})
        return final

    def tool_result(self, text: str) -> None:
        call = next(b for b in self.messages[-1]["content"] if b["type"] == "tool_use")
        self.messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"],
                                                            "content": text}]})

    def user(self, text: str) -> None:
        self.messages.append(user(text))


def answer(message: anthropic.types.Message) -> tuple[str, str]:
    tools = [b for b in message.content if b.type == "tool_use"]
    if tools:
        return "tool", tools[0].name
    return "text", "".join(b.text for b in message.content if b.type == "text")


async def test_headerless_tree_routes_by_conversation(serve, tmp_path):
    server = await serve(write_mixed_tree(tmp_path / "mixed"))
    run, base = await new_run(server.base_url, "mixed")
    got: dict[str, list[tuple[str, str]]] = {PRIMARY_ID: [], SPAWN_ID: [], FORK_ID: []}
    primary = AnthropicConversation(user(PRIMARY_PROMPTS[0]))
    spawn = AnthropicConversation(user(SPAWN_TASK))

    async with client(base) as sdk:
        async def call(conversation: AnthropicConversation, recorded: str) -> None:
            got[recorded].append(answer(await conversation.ask(sdk)))

        await call(primary, PRIMARY_ID)               # P0: text
        primary.user(PRIMARY_PROMPTS[1])
        await call(primary, PRIMARY_ID)               # P1: spawns
        await call(spawn, SPAWN_ID)                   # S0: [user(task)]
        spawn.tool_result("alpha file contents")
        primary.tool_result("ALPHA")
        await call(primary, PRIMARY_ID)               # P2: forks
        await call(spawn, SPAWN_ID)                   # S1
        # The fork child starts from the parent's seeded turns (user1, assistant1), then its task.
        fork = AnthropicConversation(*primary.messages[:2], user(FORK_TASK))
        await call(fork, FORK_ID)                     # F0
        fork.tool_result("codeword: SAFFRON")
        primary.tool_result("SAFFRON")
        await call(primary, PRIMARY_ID)               # P3
        # An older turn rewritten as clients do: thinking dropped, cache_control moved, keys reordered.
        for message in fork.messages:
            if message["role"] == "assistant":
                message["content"] = [{**b, "input": dict(reversed(b["input"].items()))} if b["type"] == "tool_use"
                                      else b for b in message["content"] if b["type"] != "thinking"]
        fork.messages[-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
        await call(fork, FORK_ID)                     # F1

    assert got == MIXED_ANSWERS
    report = await run_state(server.base_url, run)
    assert report["bindings"] == {"conversation-1": PRIMARY_ID, "conversation-2": SPAWN_ID,
                                  "conversation-3": FORK_ID}
    assert report["consumed"] is True
    assert report["failures"] == []


# -- templates ------------------------------------------------------------------------------------

SAYS = "the codeword is {{fromRequest:codeword (\\w+)}}"
TEMPLATED = [{"kind": "chunks", "chunks": [
    {"type": "block-start", "index": 0, "blockType": "text"},
    {"type": "text-delta", "index": 0, "text": SAYS},
    {"type": "block-end", "index": 0, "block": {"type": "text", "text": SAYS}},
    {"type": "finish", "reason": {"kind": "stop"}},
]}]


@pytest.mark.parametrize(("system", "expected"), [
    ("remember: codeword SAFFRON", "SAFFRON"),                 # found in system
    ([{"type": "text", "text": "codeword SAFFRON"}], "BASIL"),  # the last match wins: messages come after system
], ids=["system", "messages-last"])
async def test_from_request_searches_system_and_messages(serve, tmp_path, system, expected):
    server = await serve(override(tmp_path / "tpl", TEMPLATED))
    _, base = await new_run(server.base_url, "tpl")
    content = "hello" if expected == "SAFFRON" else "now the codeword BASIL"
    async with client(base) as sdk:
        received = await stream_message(sdk, [user(content)], system=system)
    assert received["text"] == f"the codeword is {expected}"


async def test_unmatched_template_is_422_in_anthropic_shape(serve, tmp_path):
    server = await serve(override(tmp_path / "tpl", TEMPLATED))
    _, base = await new_run(server.base_url, "tpl")
    async with client(base) as sdk:
        with pytest.raises(anthropic.UnprocessableEntityError) as caught:
            await create_message(sdk, [user("nothing here")])
    assert caught.value.body["error"]["code"] == "from_request_unmatched"
    assert caught.value.response.headers["x-should-retry"] == "false"
