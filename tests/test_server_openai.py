"""The official openai SDK against the in-process server: stream and non-stream, errors, admin."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from tests.conftest import http, new_run, run_state
from tests.logbuilder import (
    FORK_ARGS,
    MODEL,
    SPAWN_ARGS,
    chunks_entry,
    finish,
    header,
    text_call,
    usage,
    write_log,
    write_mixed_tree,
    write_override,
)

PRIMARY = {"x-mockllm-session": "rec-primary"}


def client(base_url: str, headers: dict[str, str] | None = None) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, default_headers=headers or {})


def ask(text: str = "hi") -> list[dict[str, Any]]:
    return [{"role": "system", "content": "sys"}, {"role": "user", "content": text}]


async def collect(stream: Any) -> dict[str, Any]:
    """Content, reasoning, finish and usage chunks of an SDK stream."""
    out: dict[str, Any] = {"content": "", "reasoning": "", "finish": None, "usage": [], "roles": []}
    async for chunk in stream:
        if chunk.usage is not None:
            assert chunk.choices == []
            out["usage"].append(chunk.usage.model_dump(exclude_none=True))
        for choice in chunk.choices:
            if choice.delta.role:
                out["roles"].append(choice.delta.role)
            out["content"] += choice.delta.content or ""
            out["reasoning"] += (choice.delta.model_extra or {}).get("reasoning_content") or ""
            out["finish"] = choice.finish_reason or out["finish"]
    return out


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    return write_mixed_tree(tmp_path / "mixed")


def scripted(folder: Path, *entries: dict[str, Any]) -> Path:
    write_override(folder, list(entries))
    return folder


# -- answers --------------------------------------------------------------------------------------

async def test_text_and_reasoning_streamed(serve, mixed):
    server = await serve(mixed)
    _, base = await new_run(server.base_url, "mixed")
    async with client(base, PRIMARY) as sdk:
        stream = await sdk.chat.completions.create(model="m", messages=ask(), stream=True,
                                                   stream_options={"include_usage": True})
        got = await collect(stream)
    assert got["roles"] == ["assistant"]
    assert got["reasoning"] == "the user wants OK"
    assert got["content"] == "P0 OK"
    assert got["finish"] == "stop"
    assert got["usage"] == [{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}]


async def test_text_and_reasoning_non_stream(serve, mixed):
    server = await serve(mixed)
    _, base = await new_run(server.base_url, "mixed")
    async with client(base, PRIMARY) as sdk:
        completion = await sdk.chat.completions.create(model="m", messages=ask())
    message = completion.choices[0].message
    assert message.content == "P0 OK"
    assert message.model_extra["reasoning_content"] == "the user wants OK"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.model == MODEL
    assert completion.usage is not None and completion.usage.total_tokens == 15


async def test_tool_calls_accumulated_by_the_stream_helper(serve, mixed):
    server = await serve(mixed)
    _, base = await new_run(server.base_url, "mixed")
    async with client(base, PRIMARY) as sdk:
        await sdk.chat.completions.create(model="m", messages=ask())  # call 0: text
        finals = []
        for _ in range(2):  # calls 1 and 2: one tool call each, arguments in fragments
            async with sdk.chat.completions.stream(model="m", messages=ask()) as stream:
                events = [event.type async for event in stream]
                finals.append(await stream.get_final_completion())
    assert "tool_calls.function.arguments.done" in events
    calls = [(f.choices[0].finish_reason, [(c.id, c.type, c.function.name, c.function.arguments)
                                           for c in f.choices[0].message.tool_calls or ()]) for f in finals]
    assert calls == [
        ("tool_calls", [("call_p1", "function", "subagent", SPAWN_ARGS)]),
        ("tool_calls", [("call_p2", "function", "subagent_fork", FORK_ARGS)]),
    ]
    assert finals[0].choices[0].message.model_extra["reasoning_content"] == "spawn a child first"


async def test_tool_calls_non_stream(serve, mixed):
    server = await serve(mixed)
    _, base = await new_run(server.base_url, "mixed")
    async with client(base, {"x-mockllm-session": "rec-spawn"}) as sdk:
        completion = await sdk.chat.completions.create(model="m", messages=ask())
    message = completion.choices[0].message
    assert message.content is None
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or ()] == [
        ("call_s0", "read_file", '{"path":"a.txt"}')]
    assert completion.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize(("stream_options", "expected"), [
    (None, []),
    ({"include_usage": False}, []),
    ({"include_usage": True}, [{"prompt_tokens": 130, "completion_tokens": 7, "total_tokens": 137,
                                "prompt_tokens_details": {"cached_tokens": 120},
                                "completion_tokens_details": {"reasoning_tokens": 2}}]),
], ids=["no-options", "include-false", "include-true"])
async def test_usage_chunk_only_with_include_usage(serve, tmp_path, stream_options, expected):
    use = usage(10, 7, cacheReadTokens=120, cacheWriteTokens=50, reasoningTokens=2)
    server = await serve(scripted(tmp_path / "s", chunks_entry(text_call("counted", use=use))))
    _, base = await new_run(server.base_url, "s")
    extra = {"stream_options": stream_options} if stream_options is not None else {}
    async with client(base) as sdk:
        got = await collect(await sdk.chat.completions.create(model="m", messages=ask(), stream=True, **extra))
    assert got["usage"] == expected
    assert got["content"] == "counted"


def _text_then(reason: dict[str, Any]) -> dict[str, Any]:
    return chunks_entry([{"type": "block-start", "index": 0, "blockType": "text"},
                         {"type": "text-delta", "index": 0, "text": "cut short"}, finish(**reason)])


FINISHES = [
    ({"kind": "stop"}, "stop", "cut short"),
    ({"kind": "max-tokens"}, "length", "cut short"),
    ({"kind": "error", "failure": {"code": "CONTENT_FILTER", "message": "filtered"}}, "content_filter", "cut short"),
]


@pytest.mark.parametrize(("reason", "expected", "content"), FINISHES, ids=["stop", "length", "error-code-lowercased"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
async def test_finish_reasons(serve, tmp_path, reason, expected, content, stream):
    server = await serve(scripted(tmp_path / "s", _text_then(reason)))
    _, base = await new_run(server.base_url, "s")
    async with client(base) as sdk:
        if stream:
            got = await collect(await sdk.chat.completions.create(model="m", messages=ask(), stream=True))
            assert (got["finish"], got["content"]) == (expected, content)
        else:
            completion = await sdk.chat.completions.create(model="m", messages=ask())
            assert (completion.choices[0].finish_reason, completion.choices[0].message.content) == (expected, content)


async def test_empty_response_error_is_an_empty_stop(serve, tmp_path):
    entry = chunks_entry([finish("error", failure={"code": "EMPTY_RESPONSE", "message": "empty"})])
    server = await serve(scripted(tmp_path / "s", entry, entry))
    _, base = await new_run(server.base_url, "s")
    async with client(base) as sdk:
        got = await collect(await sdk.chat.completions.create(model="m", messages=ask(), stream=True))
        completion = await sdk.chat.completions.create(model="m", messages=ask())
    assert (got["content"], got["finish"], got["roles"]) == ("", "stop", ["assistant"])
    assert (completion.choices[0].message.content, completion.choices[0].finish_reason) == ("", "stop")


# -- replayed errors --------------------------------------------------------------------------------

THROWS = [
    ({"code": "AUTH"}, openai.AuthenticationError, 401),
    ({"code": "RATE_LIMIT"}, openai.RateLimitError, 429),
    ({"code": "INVALID_REQUEST"}, openai.BadRequestError, 400),
    ({"code": "HTTP_503"}, openai.InternalServerError, 503),
    ({"code": "AUTH", "status": 403}, openai.PermissionDeniedError, 403),
]


@pytest.mark.parametrize(("throw", "error", "status"), THROWS,
                         ids=["auth", "rate-limit", "invalid-request", "http-503", "explicit-status"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
async def test_throw_is_the_providers_http_error(serve, tmp_path, throw, error, status, stream):
    server = await serve(scripted(tmp_path / "s", {"kind": "throw", "message": "provider refused", **throw}))
    _, base = await new_run(server.base_url, "s")
    async with client(base) as sdk:
        with pytest.raises(error) as caught:
            await sdk.chat.completions.create(model="m", messages=ask(), stream=stream)
    assert caught.value.status_code == status
    assert caught.value.code == throw["code"]
    assert "provider refused" in caught.value.message
    # Replayed as the provider sent it: no x-should-retry, so an SDK may retry as it did when recorded.
    assert "x-should-retry" not in caught.value.response.headers


async def test_context_window_exceeded_is_a_400(serve, tmp_path):
    entry = _text_then({"kind": "error", "failure": {"code": "CONTEXT_WINDOW_EXCEEDED", "message": "too many"}})
    server = await serve(scripted(tmp_path / "s", entry))
    _, base = await new_run(server.base_url, "s")
    async with client(base) as sdk:
        with pytest.raises(openai.BadRequestError) as caught:
            await sdk.chat.completions.create(model="m", messages=ask(), stream=True)
    assert caught.value.code == "context_length_exceeded"
    assert "too many" in caught.value.message


MID_STREAM = {"kind": "throw", "message": "upstream overloaded", "code": "SERVER",
              "chunks": [{"type": "block-start", "index": 0, "blockType": "text"},
                         {"type": "text-delta", "index": 0, "text": "half an "},
                         {"type": "text-delta", "index": 0, "text": "answer"}]}


async def test_throw_with_chunks_streams_then_raises(serve, tmp_path):
    server = await serve(scripted(tmp_path / "s", MID_STREAM))
    _, base = await new_run(server.base_url, "s")
    received = []
    async with client(base) as sdk:
        stream = await sdk.chat.completions.create(model="m", messages=ask(), stream=True)
        with pytest.raises(openai.APIError) as caught:
            async for chunk in stream:
                received.append(chunk.choices[0].delta.content)
    assert received == ["half an ", "answer"]
    assert not isinstance(caught.value, openai.APIStatusError)
    assert caught.value.message == "upstream overloaded"
    assert caught.value.code == "SERVER"


async def test_throw_with_chunks_fails_a_non_streaming_call(serve, tmp_path):
    server = await serve(scripted(tmp_path / "s", MID_STREAM))
    _, base = await new_run(server.base_url, "s")
    async with client(base) as sdk:
        with pytest.raises(openai.InternalServerError) as caught:
            await sdk.chat.completions.create(model="m", messages=ask())
    assert caught.value.status_code == 500
    assert "upstream overloaded" in caught.value.message


async def test_stream_closed_is_a_cut_without_done(serve, tmp_path):
    entry = {**MID_STREAM, "code": "STREAM_CLOSED"}
    server = await serve(scripted(tmp_path / "s", entry))
    _, base = await new_run(server.base_url, "s")
    async with aiohttp.ClientSession() as session, session.post(
            f"{base}/chat/completions", json={"model": "m", "messages": ask(), "stream": True}) as response:
        assert response.status == 200
        raw = await response.read()
    assert raw.count(b"data: ") == 2
    assert b"[DONE]" not in raw
    assert b"error" not in raw


# -- templates ------------------------------------------------------------------------------------

TEMPLATED = chunks_entry(text_call("Ticket {{fromRequest:ticket-(\\d+)}} in {{fromRequest:repo\\s([a-z]+)}}"))


async def test_from_request_uses_the_last_match(serve, tmp_path):
    server = await serve(scripted(tmp_path / "s", TEMPLATED, TEMPLATED))
    _, base = await new_run(server.base_url, "s")
    messages = [{"role": "system", "content": "repo alpha"},
                {"role": "user", "content": [{"type": "text", "text": "see ticket-12 and ticket-34 in repo beta"}]}]
    async with client(base, {"x-mockllm-session": "agent"}) as sdk:
        got = await collect(await sdk.chat.completions.create(model="m", messages=messages, stream=True))
        other = [{"role": "user", "content": "ticket-7, repo gamma"}]
        completion = await sdk.chat.completions.create(model="m", messages=other)
    assert got["content"] == "Ticket 34 in beta"
    assert completion.choices[0].message.content == "Ticket 7 in gamma"


@pytest.mark.parametrize(("text", "needle"), [
    ("value {{fromRequest:ticket-(\\d+)}}", "matched nothing"),
    ("value {{fromRequest:ticket-(\\d+}}", "bad pattern"),
], ids=["no-match", "bad-pattern"])
async def test_from_request_unmatched_is_a_422(serve, tmp_path, text, needle):
    server = await serve(scripted(tmp_path / "s", chunks_entry(text_call(text))))
    run, base = await new_run(server.base_url, "s")
    async with client(base, {"x-mockllm-session": "agent"}) as sdk:
        with pytest.raises(openai.UnprocessableEntityError) as caught:
            await sdk.chat.completions.create(model="m", messages=ask("no tickets here"), stream=True)
    assert caught.value.code == "from_request_unmatched"
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert needle in caught.value.message
    assert run in caught.value.message
    state = await run_state(server.base_url, run)
    assert [(f["code"], f["session"], f["call"]) for f in state["failures"]] == [
        ("from_request_unmatched", "agent", 0)]


def _cwd_entry() -> dict[str, Any]:
    chunks = [{"type": "block-start", "index": 0, "blockType": "text"},
              {"type": "text-delta", "index": 0, "text": "edited {{cwd}}/main.py"},
              {"type": "block-end", "index": 0, "block": {"type": "text", "text": "edited {{cwd}}/main.py"}},
              {"type": "block-start", "index": 1, "blockType": "tool-call"},
              {"type": "tool-call-delta", "index": 1, "id": "call_c", "name": "edit",
               "argumentsDelta": '{"path":"{{cwd}}/main.py"}'},
              finish("tool-calls")]
    return chunks_entry(chunks)


@pytest.mark.parametrize(("server_cwd", "run_cwd", "expected"), [
    (None, "/srv/checkout", "/srv/checkout"),
    (None, None, "{{cwd}}"),
    ("/from/serve", None, "/from/serve"),
    ("/from/serve", "/from/run", "/from/run"),
], ids=["run-cwd", "unset-left-as-is", "server-cwd", "run-cwd-wins"])
async def test_cwd_is_replaced_by_the_runs_cwd(serve, tmp_path, server_cwd, run_cwd, expected):
    server = await serve(scripted(tmp_path / "s", _cwd_entry()), cwd=server_cwd)
    _, base = await new_run(server.base_url, "s", **({"cwd": run_cwd} if run_cwd is not None else {}))
    async with client(base) as sdk:
        completion = await sdk.chat.completions.create(model="m", messages=ask())
    message = completion.choices[0].message
    assert message.content == f"edited {expected}/main.py"
    assert message.tool_calls is not None
    assert json.loads(message.tool_calls[0].function.arguments) == {"path": f"{expected}/main.py"}


async def test_cwd_of_one_run_does_not_leak_into_another(serve, tmp_path):
    server = await serve(scripted(tmp_path / "s", _cwd_entry()))
    answers = []
    for cwd in ("/one", None, "/two"):
        _, base = await new_run(server.base_url, "s", **({"cwd": cwd} if cwd else {}))
        async with client(base) as sdk:
            completion = await sdk.chat.completions.create(model="m", messages=ask())
        answers.append(completion.choices[0].message.content)
    assert answers == ["edited /one/main.py", "edited {{cwd}}/main.py", "edited /two/main.py"]


async def test_default_run_uses_the_servers_cwd(serve, tmp_path):
    server = await serve(scripted(tmp_path / "s", _cwd_entry()), cwd="/dflt")
    async with client(f"{server.base_url}/scenarios/s/v1") as sdk:
        completion = await sdk.chat.completions.create(model="m", messages=ask())
    assert completion.choices[0].message.content == "edited /dflt/main.py"


# -- addresses ------------------------------------------------------------------------------------

async def test_v1_is_served_when_one_scenario_is_loaded(serve, mixed):
    server = await serve(mixed)
    async with client(f"{server.base_url}/v1", PRIMARY) as sdk:
        completion = await sdk.chat.completions.create(model="m", messages=ask())
        models = await sdk.models.list()
    assert completion.choices[0].message.content == "P0 OK"
    assert [m.id for m in models.data] == [MODEL]
    # /v1 is the scenario's default run: the next call of the same session continues there.
    async with client(f"{server.base_url}/scenarios/mixed/v1", PRIMARY) as sdk:
        completion = await sdk.chat.completions.create(model="m", messages=ask())
    assert completion.choices[0].message.tool_calls is not None


async def test_v1_with_several_scenarios_is_a_helpful_404(serve, tmp_path):
    write_mixed_tree(tmp_path / "suite" / "mixed")
    scripted(tmp_path / "suite" / "other", chunks_entry(text_call("other answer")))
    server = await serve(tmp_path / "suite")
    for method, path in (("POST", "/v1/chat/completions"), ("GET", "/v1/models")):
        async with aiohttp.ClientSession() as session, session.request(
                method, server.base_url + path, json={"model": "m", "messages": ask()}) as response:
            body = await response.json()
            assert response.status == 404
            assert response.headers["x-should-retry"] == "false"
        assert "/scenarios/NAME/v1" in body["error"]["message"]
        assert "mixed, other" in body["error"]["message"]
    async with client(f"{server.base_url}/scenarios/other/v1") as sdk:
        completion = await sdk.chat.completions.create(model="m", messages=ask())
        models = await sdk.models.list()
    assert completion.choices[0].message.content == "other answer"
    assert [m.id for m in models.data] == ["mockllm"]  # override-only: no recorded model


async def test_models_under_a_run(serve, mixed):
    server = await serve(mixed)
    _, base = await new_run(server.base_url, "mixed")
    status, body = await http("GET", f"{base}/models")
    assert status == 200
    assert body == {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "mockllm"}]}


# -- admin ----------------------------------------------------------------------------------------

@pytest.fixture
def suite(tmp_path: Path) -> Path:
    write_mixed_tree(tmp_path / "suite" / "mixed")
    broken = tmp_path / "suite" / "broken"
    write_log(broken, "session.jsonl", header("b"), [{"type": "turn/start", "data": {"turn": 1}}])
    with (broken / "session.jsonl").open("a") as log:
        log.write("{not json\n")
    (tmp_path / "suite" / "notes").mkdir()
    return tmp_path / "suite"


async def test_health(serve, suite):
    server = await serve(suite)
    status, body = await http("GET", f"{server.base_url}/_mockllm/health")
    assert status == 200
    assert body == {"status": "ok", "scenarios": 1, "broken": 1, "runs": 0}


async def test_scenarios_lists_sessions_and_broken_ones(serve, suite):
    server = await serve(suite)
    status, body = await http("GET", f"{server.base_url}/_mockllm/scenarios")
    assert status == 200
    assert isinstance(body, dict)
    by_name = {s["name"]: s for s in body["scenarios"]}
    mixed = by_name["mixed"]
    assert mixed["valid"] is True
    assert mixed["base_url"] == f"{server.base_url}/scenarios/mixed/v1"
    assert [(s["id"], s["file"], s["kind"], s["cut"], s["entries"], s["parent"]) for s in mixed["sessions"]] == [
        ("rec-primary", "session.jsonl", "primary", 0, 4, None),
        ("rec-spawn", "session.1.jsonl", "spawn", 0, 2, "rec-primary"),
        ("rec-fork", "session.2.jsonl", "fork", 18, 2, "rec-primary"),
    ]
    broken = by_name["broken"]
    assert broken["valid"] is False
    assert len(broken["errors"]) == 1
    assert "broken/session.jsonl:3" in broken["errors"][0]
    assert body["skipped"] == ["notes"]


async def test_run_for_a_broken_scenario_is_refused(serve, suite):
    server = await serve(suite)
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{server.base_url}/_mockllm/runs", json={"scenario": "broken"}) as response:
            body = await response.json()
            assert response.status == 422
            assert response.headers["x-should-retry"] == "false"
        assert body["error"]["code"] == "scenario_invalid"
        assert "session.jsonl:3" in body["error"]["message"]
        async with session.post(f"{server.base_url}/scenarios/broken/v1/chat/completions",
                                json={"messages": ask()}) as response:
            assert response.status == 422
            assert (await response.json())["error"]["code"] == "scenario_invalid"


async def test_run_create_get_delete_report(serve, mixed):
    server = await serve(mixed)
    status, created = await http("POST", f"{server.base_url}/_mockllm/runs", {"scenario": "mixed", "cwd": "/c"})
    assert status == 201
    assert isinstance(created, dict)
    assert set(created) == {"run", "base_url"}
    run = created["run"]
    assert created["base_url"] == f"{server.base_url}/runs/{run}/v1"
    async with client(created["base_url"], {"x-mockllm-session": "live-a"}) as sdk:
        await sdk.chat.completions.create(model="m", messages=ask())

    state = await run_state(server.base_url, run)
    assert state["run"] == run and state["scenario"] == "mixed" and state["cwd"] == "/c"
    assert state["bindings"] == {"live-a": "rec-primary"}
    assert state["cursors"] == {"live-a": 1}
    assert state["holding"] == 0
    assert [(j["session"], j["script"], j["call"], j["status"]) for j in state["journal"]] == [
        ("live-a", "session.jsonl", 0, 200)]

    status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
    assert status == 200
    assert isinstance(report, dict)
    assert set(report) >= {"run", "scenario", "consumed", "failures", "sessions"}
    assert (report["run"], report["scenario"], report["consumed"], report["failures"]) == (run, "mixed", False, [])
    assert [{k: s[k] for k in ("id", "file", "live_id", "served", "entries")} for s in report["sessions"]] == [
        {"id": "rec-primary", "file": "session.jsonl", "live_id": "live-a", "served": 1, "entries": 4},
        {"id": "rec-spawn", "file": "session.1.jsonl", "live_id": None, "served": 0, "entries": 2},
        {"id": "rec-fork", "file": "session.2.jsonl", "live_id": None, "served": 0, "entries": 2},
    ]
    for method in ("GET", "DELETE"):
        status, body = await http(method, f"{server.base_url}/_mockllm/runs/{run}")
        assert status == 404
        assert isinstance(body, dict) and body["error"]["code"] == "unknown_run"
    async with client(created["base_url"]) as sdk:
        with pytest.raises(openai.NotFoundError) as caught:
            await sdk.chat.completions.create(model="m", messages=ask())
    assert caught.value.code == "unknown_run"


async def test_consumed_run_report(serve, tmp_path):
    server = await serve(scripted(tmp_path / "s", chunks_entry(text_call("a")), chunks_entry(text_call("b"))))
    run, base = await new_run(server.base_url, "s")
    async with client(base) as sdk:
        texts = [(await sdk.chat.completions.create(model="m", messages=ask())).choices[0].message.content
                 for _ in range(2)]
    assert texts == ["a", "b"]
    status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
    assert status == 200 and isinstance(report, dict)
    assert report["consumed"] is True
    assert report["failures"] == []
    assert [(s["served"], s["entries"]) for s in report["sessions"]] == [(2, 2)]
