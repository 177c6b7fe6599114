"""Routing requests to recorded sessions: by header (recorded or fresh ids) and by conversation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from mockllm.replay.conversations import ConversationIndex
from mockllm.replay.routing import calling_session, header_session
from mockllm.wire.chat.request import chat_messages
from mockllm.wire.request import Request
from tests.conftest import assert_mock_error, http, new_run, run_state
from tests.logbuilder import (
    FORK_ID,
    FORK_TASK,
    MIXED_ANSWERS,
    PRIMARY_ID,
    PRIMARY_PROMPTS,
    SPAWN_ID,
    SPAWN_TASK,
    SYSTEM,
    Log,
    header,
    text_call,
    write_log,
    write_mixed_tree,
    write_sessions,
)


async def chat(session: aiohttp.ClientSession, base: str, messages: list[Any],
               headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any], Any]:
    """One non-streaming call: (status, JSON body, response headers)."""
    async with session.post(f"{base}/chat/completions", json={"model": "m", "messages": messages},
                            headers=headers or {}) as response:
        return response.status, await response.json(), response.headers


def answer(body: dict[str, Any]) -> tuple[str, str]:
    """("tool", name) or ("text", content): what a served call said."""
    message = body["choices"][0]["message"]
    if message.get("tool_calls"):
        return "tool", message["tool_calls"][0]["function"]["name"]
    return "text", message["content"]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    return write_mixed_tree(tmp_path / "mixed")


# -- binding by header ----------------------------------------------------------------------------

async def test_recorded_ids_bind_to_their_sessions_in_any_order(serve, mixed):
    server = await serve(mixed)
    run, base = await new_run(server.base_url, "mixed")
    got: dict[str, list[tuple[str, str]]] = {PRIMARY_ID: [], SPAWN_ID: [], FORK_ID: []}
    order = [FORK_ID, SPAWN_ID, FORK_ID, PRIMARY_ID, SPAWN_ID, PRIMARY_ID, PRIMARY_ID, PRIMARY_ID]
    async with aiohttp.ClientSession() as session:
        for live in order:
            status, body, _ = await chat(session, base, [user("q")], {"x-mockllm-session": live})
            assert status == 200, body
            got[live].append(answer(body))
    assert got == MIXED_ANSWERS
    report = await run_state(server.base_url, run)
    assert report["bindings"] == {FORK_ID: FORK_ID, SPAWN_ID: SPAWN_ID, PRIMARY_ID: PRIMARY_ID}
    assert report["consumed"] is True
    assert report["failures"] == []


async def test_fresh_ids_skip_sessions_bound_by_their_recorded_id(serve, mixed):
    server = await serve(mixed)
    run, base = await new_run(server.base_url, "mixed")
    async with aiohttp.ClientSession() as session:
        firsts = []
        for live in (FORK_ID, "fresh-1", "fresh-2"):
            status, body, _ = await chat(session, base, [user("q")], {"x-mockllm-session": live})
            assert status == 200
            firsts.append(answer(body))
    assert firsts == [MIXED_ANSWERS[FORK_ID][0], MIXED_ANSWERS[PRIMARY_ID][0], MIXED_ANSWERS[SPAWN_ID][0]]
    bindings = (await run_state(server.base_url, run))["bindings"]
    assert bindings == {FORK_ID: FORK_ID, "fresh-1": PRIMARY_ID, "fresh-2": SPAWN_ID}


@pytest.fixture
def ordered(tmp_path: Path) -> Path:
    """Child files numbered against their script order: createdAt decides, then the recorded id."""
    folder = tmp_path / "ordered"
    write_log(folder, "session.jsonl", header("p", created_at=100), Log().turn("go", text_call("from p")).rows)
    children = [("late", 300), ("zeta", 200), ("alpha", 200)]
    for number, (name, created) in enumerate(children, start=1):
        write_log(folder, f"session.{number}.jsonl", header(name, created_at=created, parent="p"),
                  Log().turn("task", text_call(f"from {name}")).rows)
    # A session recorded with no model call never calls: it takes no place in first-call order.
    write_log(folder, "session.4.jsonl", header("silent", created_at=150, parent="p"), Log().turn("noop").rows)
    return folder


async def test_fresh_ids_bind_in_first_call_order(serve, ordered):
    server = await serve(ordered)
    run, base = await new_run(server.base_url, "ordered")
    async with aiohttp.ClientSession() as session:
        texts = []
        for number in range(4):
            status, body, _ = await chat(session, base, [user("q")], {"x-mockllm-session": f"live-{number}"})
            assert status == 200
            texts.append(answer(body)[1])
    assert texts == ["from p", "from alpha", "from zeta", "from late"]
    report = await run_state(server.base_url, run)
    assert report["bindings"] == {"live-0": "p", "live-1": "alpha", "live-2": "zeta", "live-3": "late"}
    assert report["consumed"] is True  # "silent" has no entries and needs no binding


@pytest.mark.parametrize(("options", "name"), [
    ({}, "x-mockllm-session"),
    ({}, "X-DeepSeek-Harness-Session-Id"),
    ({"session_headers": ["x-agent-id"]}, "X-Agent-Id"),
    ({"session_headers": ["x-agent-id"]}, "x-mockllm-session"),
], ids=["mockllm", "dsh-header", "extra-header", "builtin-still-works-with-extra"])
async def test_session_headers(serve, mixed, options, name):
    server = await serve(mixed, **options)
    run, base = await new_run(server.base_url, "mixed")
    async with aiohttp.ClientSession() as session:
        texts = []
        for live in (SPAWN_ID, PRIMARY_ID, SPAWN_ID):
            status, body, _ = await chat(session, base, [user("same question")], {name: live})
            assert status == 200
            texts.append(answer(body))
    assert texts == [MIXED_ANSWERS[SPAWN_ID][0], MIXED_ANSWERS[PRIMARY_ID][0], MIXED_ANSWERS[SPAWN_ID][1]]
    assert (await run_state(server.base_url, run))["bindings"] == {SPAWN_ID: SPAWN_ID, PRIMARY_ID: PRIMARY_ID}


async def test_unconfigured_header_is_not_a_session_id(serve, mixed):
    server = await serve(mixed)
    run, base = await new_run(server.base_url, "mixed")
    async with aiohttp.ClientSession() as session:
        status, body, _ = await chat(session, base, [user("q")], {"x-agent-id": SPAWN_ID})
    assert status == 200
    assert answer(body) == MIXED_ANSWERS[PRIMARY_ID][0]  # routed by conversation: the first new session
    assert (await run_state(server.base_url, run))["bindings"] == {"conversation-1": PRIMARY_ID}


async def test_client_headers_are_journaled_and_do_not_route(serve, mixed):
    server = await serve(mixed)
    run, base = await new_run(server.base_url, "mixed")
    headers = {"x-mockllm-session": "live", "x-deepseek-harness-compact": "1"}
    async with aiohttp.ClientSession() as session:
        for _ in range(2):
            status, _, _ = await chat(session, base, [user("q")], headers)
            assert status == 200
    journal = (await run_state(server.base_url, run))["journal"]
    assert [(j["session"], j["call"], j["headers"]["x-deepseek-harness-compact"]) for j in journal] == [
        ("live", 0, "1"), ("live", 1, "1")]


# -- header-less: routing by conversation ---------------------------------------------------------

class DshConversation:
    """Requests built the way dsh's DeepSeek adapter builds them: system first, then the history."""

    def __init__(self, *messages: dict[str, Any]) -> None:
        self.messages = [{"role": "system", "content": SYSTEM}, *messages]

    def served(self, body: dict[str, Any]) -> None:
        message = body["choices"][0]["message"]
        turn: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        if message.get("tool_calls"):
            turn["tool_calls"] = [{"id": c["id"], "type": "function",
                                   "function": {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}}
                                  for c in message["tool_calls"]]
            if message.get("reasoning_content"):  # kept only on turns with tool calls
                turn["reasoning_content"] = message["reasoning_content"]
        self.messages.append(turn)

    def tool_result(self, text: str) -> None:
        call = self.messages[-1]["tool_calls"][0]
        self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})

    def user(self, text: str) -> None:
        self.messages.append(user(text))


async def test_headerless_tree_routes_by_conversation(serve, mixed):
    server = await serve(mixed)
    run, base = await new_run(server.base_url, "mixed")
    got: dict[str, list[tuple[str, str]]] = {PRIMARY_ID: [], SPAWN_ID: [], FORK_ID: []}
    primary = DshConversation(user(PRIMARY_PROMPTS[0]))
    spawn = DshConversation(user(SPAWN_TASK))
    fork: DshConversation | None = None

    async with aiohttp.ClientSession() as session:
        async def call(conversation: DshConversation, recorded: str) -> None:
            status, body, _ = await chat(session, base, list(conversation.messages))
            assert status == 200, body
            got[recorded].append(answer(body))
            conversation.served(body)

        await call(primary, PRIMARY_ID)               # P0: text
        primary.user(PRIMARY_PROMPTS[1])
        await call(primary, PRIMARY_ID)               # P1: spawns
        await call(spawn, SPAWN_ID)                   # S0: [system, user(task)]
        spawn.tool_result("alpha file contents")
        primary.tool_result("ALPHA")
        await call(primary, PRIMARY_ID)               # P2: forks
        await call(spawn, SPAWN_ID)                   # S1
        # The fork child starts from the parent's seeded turns (system, user1, assistant1), then its task.
        fork = DshConversation(*primary.messages[1:3], user(FORK_TASK))
        assert [m["role"] for m in fork.messages] == ["system", "user", "assistant", "user"]
        await call(fork, FORK_ID)                     # F0
        fork.tool_result("codeword: SAFFRON")
        primary.tool_result("SAFFRON")
        await call(primary, PRIMARY_ID)               # P3
        await call(fork, FORK_ID)                     # F1

    assert got == MIXED_ANSWERS
    # reasoning_content rode along on the assistant turns with tool calls, and routing still matched.
    assert sum("reasoning_content" in m for m in primary.messages) == 2
    report = await run_state(server.base_url, run)
    assert report["bindings"] == {"conversation-1": PRIMARY_ID, "conversation-2": SPAWN_ID,
                                  "conversation-3": FORK_ID}
    assert report["consumed"] is True
    assert report["failures"] == []


async def test_headerless_history_rewrites_still_route(serve, mixed):
    """dsh strips reasoning_content from older turns and may send null for an empty content."""
    server = await serve(mixed)
    run, base = await new_run(server.base_url, "mixed")
    primary = DshConversation(user(PRIMARY_PROMPTS[0]))
    async with aiohttp.ClientSession() as session:
        for step in range(4):
            status, body, _ = await chat(session, base, list(primary.messages))
            assert status == 200
            assert answer(body) == MIXED_ANSWERS[PRIMARY_ID][step]
            primary.served(body)
            if step == 0:
                primary.user(PRIMARY_PROMPTS[1])
            elif step < 3:
                primary.tool_result("done")
            for message in primary.messages[:-2]:  # rewrite the older turns
                message.pop("reasoning_content", None)
                if message["role"] == "assistant" and message["content"] == "":
                    message["content"] = None
    # The last request really carried a rewritten turn: a tool-call turn with neither reasoning nor content.
    assert primary.messages[4]["tool_calls"] and primary.messages[4]["content"] is None
    assert "reasoning_content" not in primary.messages[4]
    assert (await run_state(server.base_url, run))["bindings"] == {"conversation-1": PRIMARY_ID}


async def test_anonymous_headerless_calls_are_one_session(serve, mixed):
    server = await serve(mixed, headerless="anonymous")
    run, base = await new_run(server.base_url, "mixed")
    async with aiohttp.ClientSession() as session:
        got = []
        for text in ("first", "something else entirely", "a third conversation"):
            status, body, _ = await chat(session, base, [{"role": "system", "content": text}, user(text)])
            assert status == 200
            got.append(answer(body))
        status, body, _ = await chat(session, base, [user("child")], {"x-mockllm-session": "child"})
        assert status == 200
    assert got == MIXED_ANSWERS[PRIMARY_ID][:3]
    assert answer(body) == MIXED_ANSWERS[SPAWN_ID][0]
    assert (await run_state(server.base_url, run))["bindings"] == {"anonymous": PRIMARY_ID, "child": SPAWN_ID}


# -- failures -------------------------------------------------------------------------------------

async def test_exhausted_and_unrecorded_sessions_fail_loudly_and_are_reported(serve, tmp_path):
    server = await serve(write_sessions(tmp_path / "two", {"p": [text_call("p0")], "c": [text_call("c0")]}))
    run, base = await new_run(server.base_url, "two")
    async with aiohttp.ClientSession() as session:
        status, body, _ = await chat(session, base, [user("q")], {"x-mockllm-session": "live-a"})
        assert (status, answer(body)) == (200, ("text", "p0"))

        status, body, headers = await chat(session, base, [user("q")], {"x-mockllm-session": "live-a"})
        message = assert_mock_error(status, body, headers, 410, "script_exhausted")
        assert body["error"]["type"] == "invalid_request_error"
        for part in (run, "session.jsonl", "live-a", "call 1 (0-based)", "1 entries"):
            assert part in message, (part, message)

        report = await run_state(server.base_url, run)
        assert report["consumed"] is False  # session c was never bound
        assert [(f["code"], f["session"], f["call"]) for f in report["failures"]] == [
            ("script_exhausted", "live-a", 1)]

        status, body, _ = await chat(session, base, [user("q")], {"x-mockllm-session": "live-b"})
        assert (status, answer(body)) == (200, ("text", "c0"))

        status, body, headers = await chat(session, base, [user("q")], {"x-mockllm-session": "live-c"})
        message = assert_mock_error(status, body, headers, 404, "unrecorded_session")
        for part in (run, "live-c", "session.jsonl<-live-a", "session.1.jsonl<-live-b"):
            assert part in message, (part, message)

    status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
    assert status == 200 and isinstance(report, dict)
    assert report["consumed"] is True  # every script bound and drained; the failures say what went wrong
    assert [(f["code"], f["session"], f["call"]) for f in report["failures"]] == [
        ("script_exhausted", "live-a", 1), ("unrecorded_session", "live-c", 0)]
    assert all(f["message"] for f in report["failures"])
    assert [(s["live_id"], s["served"], s["entries"]) for s in report["sessions"]] == [("live-a", 1, 1),
                                                                                       ("live-b", 1, 1)]


async def test_exhaustion_through_the_sdk_is_not_retried(serve, tmp_path):
    server = await serve(write_sessions(tmp_path / "one", {"p": [text_call("only")]}))
    run, base = await new_run(server.base_url, "one")
    # max_retries=2: x-should-retry false must stop the SDK at once, so exactly one more call is journaled.
    async with openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=2) as sdk:
        await sdk.chat.completions.create(model="m", messages=[user("q")])
        with pytest.raises(openai.APIStatusError) as caught:
            await sdk.chat.completions.create(model="m", messages=[user("q"), user("again")])
    assert caught.value.status_code == 410
    assert len((await run_state(server.base_url, run))["journal"]) == 2


# -- ConversationIndex ----------------------------------------------------------------------------

def route(index: ConversationIndex, messages: list[Any]) -> tuple[str, bool]:
    """Route chat messages, normalized as the chat completions dialect does."""
    return index.route(chat_messages(messages))


def msgs(*pairs: tuple[str, Any]) -> list[dict[str, Any]]:
    return [{"role": role, "content": content} for role, content in pairs]


S, U1, A1, U2, A2, U3 = ("system", "s"), ("user", "u1"), ("assistant", "a1"), ("user", "u2"), ("assistant", "a2"), \
    ("user", "u3")


def test_index_new_then_continued():
    index = ConversationIndex()
    assert route(index, msgs(S, U1)) == ("conversation-1", True)
    assert route(index, msgs(S, U1, A1, U2)) == ("conversation-1", False)
    assert route(index, msgs(S, U1, A1, U2)) == ("conversation-1", False)  # a retry: the same request again
    assert route(index, msgs(S, U2)) == ("conversation-2", True)
    # Only the latest request counts: the old prefix of conversation-1 no longer matches.
    assert route(index, msgs(S, U1, A2)) == ("conversation-3", True)


def test_index_longest_prefix_wins():
    index = ConversationIndex()
    assert route(index, msgs(S, U1, A1, U2)) == ("conversation-1", True)
    assert route(index, msgs(S, U1)) == ("conversation-2", True)  # shorter than any latest: new
    assert route(index, msgs(S, U1, A1, U2, A2, U3)) == ("conversation-1", False)
    assert route(index, msgs(S, U1, ("assistant", "other"))) == ("conversation-2", False)


def test_index_two_children_with_the_same_parent_prefix():
    index = ConversationIndex()
    parent = msgs(S, U1, A1, U2)
    assert route(index, parent)[0] == "conversation-1"
    fork = msgs(S, U1, A1, ("user", "fork task"))
    spawn = msgs(S, ("user", "spawn task"))
    assert route(index, fork) == ("conversation-2", True)
    assert route(index, spawn) == ("conversation-3", True)
    assert route(index, [*fork, A2])[0] == "conversation-2"
    assert route(index, [*spawn, A2])[0] == "conversation-3"
    assert route(index, [*parent, A2])[0] == "conversation-1"


TOOL_TURN = {"role": "assistant", "content": "", "reasoning_content": "think",
             "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}


@pytest.mark.parametrize("rewrite", [
    lambda m: {k: v for k, v in m.items() if k != "reasoning_content"},
    lambda m: {**m, "reasoning_content": "rewritten"},
    lambda m: {**m, "content": None},
    lambda m: {k: v for k, v in m.items() if k != "content"},
    lambda m: {**m, "content": [{"type": "text", "text": ""}]},
], ids=["reasoning-dropped", "reasoning-changed", "null-content", "missing-content", "empty-text-parts"])
def test_index_normalizes_history_rewrites(rewrite):
    index = ConversationIndex()
    first = [*msgs(S, U1), TOOL_TURN, {"role": "tool", "tool_call_id": "call_1", "content": "out"}]
    assert route(index, first)[0] == "conversation-1"
    rewritten = [*first[:2], rewrite(TOOL_TURN), first[3], *msgs(A1)]
    assert route(index, rewritten) == ("conversation-1", False)


def test_index_text_parts_equal_a_string():
    index = ConversationIndex()
    route(index, [{"role": "user", "content": [{"type": "text", "text": "he"}, {"type": "text", "text": "llo"}]}])
    assert route(index, [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "x"}]) == (
        "conversation-1", False)


@pytest.mark.parametrize("change", [
    lambda m: {**m, "tool_calls": [{**m["tool_calls"][0], "id": "call_2"}]},
    lambda m: {**m, "tool_calls": [{**m["tool_calls"][0], "function": {"name": "ls", "arguments": '{"a":1}'}}]},
    lambda m: {**m, "content": "said something"},
    lambda m: {**m, "role": "user"},
], ids=["tool-call-id", "tool-arguments", "content", "role"])
def test_index_real_differences_start_a_new_conversation(change):
    index = ConversationIndex()
    route(index, [*msgs(S, U1), TOOL_TURN])
    assert route(index, [*msgs(S, U1), change(TOOL_TURN), *msgs(U2)]) == ("conversation-2", True)


def test_the_routing_rule_replay_and_record_share_tries_header_then_reply_then_conversation():
    request = Request(stream=True, include_usage=True, model="m", raw_conversation=[], _decode=lambda raw: [],
                      continues="resp_1")
    asked: list[Request] = []

    def by_conversation(r: Request) -> str:
        asked.append(r)
        return "conversation-1"

    assert calling_session("from-header", request, {"resp_1": "chain"}.get, by_conversation) == "from-header"
    assert calling_session(None, request, {"resp_1": "chain"}.get, by_conversation) == "chain"
    assert calling_session(None, request, {}.get, by_conversation) == "conversation-1"
    assert asked == [request], "the conversation is looked at only when nothing else names the session"
    assert header_session({"x-b": "2", "x-a": "1"}, ("x-a", "x-b")) == "1", "the first configured name wins"
    assert header_session({"x-b": ""}, ("x-a", "x-b")) == "", "an empty value still names a session"
    assert header_session({}, ("x-a",)) is None
