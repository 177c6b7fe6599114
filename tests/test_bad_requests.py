"""Bad input gets a clear OpenAI-shaped error (never retried), and the server keeps serving."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

import mockllm.server.app
from tests.conftest import assert_mock_error, http, new_run
from tests.logbuilder import chunks_entry, text_call, write_override

GOOD = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    write_override(tmp_path / "s", [chunks_entry(text_call("first answer")), chunks_entry(text_call("second"))])
    return tmp_path / "s"


async def raw(method: str, url: str, data: bytes | None = None,
              headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
    """(status, JSON body, headers) for one request with a raw body."""
    async with aiohttp.ClientSession() as session, session.request(method, url, data=data,
                                                                   headers=headers or {}) as response:
        return response.status, json.loads(await response.read()), response.headers


async def still_serves(base: str, expected: str = "first answer") -> None:
    """A normal request works afterwards, and gets the entry it would have got anyway."""
    status, body = await http("POST", f"{base}/chat/completions", GOOD)
    assert status == 200, body
    assert isinstance(body, dict)
    assert body["choices"][0]["message"]["content"] == expected


CHAT_BODIES = [
    (b"{not json", "not a chat completions request"),
    (b"", "not a chat completions request"),
    (b"\xff\xfe\x00", "not a chat completions request"),
    (b"[]", "not a chat completions request"),
    (b"{}", "messages"),
    (b'{"messages": "hello"}', "messages"),
    (b'{"messages": {"role": "user"}}', "messages"),
    (b'{"messages": null}', "messages"),
    (b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}', "stream"),
    (b'{"messages": [{"role": "user", "content": "x"}], "stream": 1}', "stream"),
    (b'{"messages": [{"role": "user", "content": "x"}], "stream_options": true}', "stream_options"),
    (b'{"messages": [{"role": "user", "content": "x"}], "model": 42}', "model"),
    (b'{"messages": []}', '"messages" is empty'),
]


@pytest.mark.parametrize(("data", "needle"), CHAT_BODIES, ids=[
    "broken-json", "empty-body", "not-utf8", "array-body", "no-messages", "messages-string", "messages-object",
    "messages-null", "stream-string", "stream-int", "stream-options-bool", "model-int", "empty-messages"])
async def test_bad_chat_bodies(serve, scenario, data, needle):
    server = await serve(scenario)
    run, base = await new_run(server.base_url, "s")
    status, body, headers = await raw("POST", f"{base}/chat/completions", data,
                                      {"Content-Type": "application/json", "x-mockllm-session": "agent"})
    message = assert_mock_error(status, body, headers, 400, "invalid_request")
    assert body["error"]["type"] == "invalid_request_error"
    assert needle in message
    assert run in message
    _, state = await http("GET", f"{server.base_url}/_mockllm/runs/{run}")
    assert isinstance(state, dict)
    # Refused before routing: nothing bound, nothing consumed, nothing journaled.
    assert (state["bindings"], state["journal"], state["failures"]) == ({}, [], [])
    await still_serves(base)


async def test_huge_body_is_413(serve, scenario, monkeypatch):
    # create_app reads MAX_BODY when the app is built (its client_max_size): patch it before starting.
    monkeypatch.setattr(mockllm.server.app, "MAX_BODY", 4096)
    server = await serve(scenario)
    _, base = await new_run(server.base_url, "s")
    under = {**GOOD, "messages": [{"role": "user", "content": "x" * 3000}]}
    over = {**GOOD, "messages": [{"role": "user", "content": "x" * 5000}]}
    status, body, headers = await raw("POST", f"{base}/chat/completions", json.dumps(over).encode(),
                                      {"Content-Type": "application/json"})
    message = assert_mock_error(status, body, headers, 413, "request_too_large")
    assert "4096" in message
    status, body, headers = await raw("POST", f"{server.base_url}/_mockllm/runs",
                                      json.dumps({"scenario": "s", "cwd": "x" * 5000}).encode())
    assert_mock_error(status, body, headers, 413, "request_too_large")
    status, ok = await http("POST", f"{base}/chat/completions", under)
    assert status == 200 and isinstance(ok, dict)
    assert ok["choices"][0]["message"]["content"] == "first answer"  # the refused call consumed nothing
    status, health = await http("GET", f"{server.base_url}/_mockllm/health")
    assert status == 200 and isinstance(health, dict) and health["runs"] == 1


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/"),
    ("GET", "/nope"),
    ("POST", "/v1/completions"),
    # (/v1/messages/batches, under Anthropic's route, answers in Anthropic's shape: test_beside_model_routes.py)
    ("POST", "/v1/responses/compact"),
    ("POST", "/scenarios/s/v1/images/generations"),  # (embeddings are served: tests/test_embeddings.py)
    ("GET", "/_mockllm/nothing"),
    ("POST", "/runs/x/v2/chat/completions"),
], ids=["root", "nope", "legacy-completions", "responses-compact", "images",
        "admin-unknown", "v2"])
async def test_unknown_paths(serve, scenario, method, path):
    server = await serve(scenario)
    status, body, headers = await raw(method, server.base_url + path, json.dumps(GOOD).encode())
    message = assert_mock_error(status, body, headers, 404, "unknown_path")
    assert path.split("?")[0] in message
    base = next((b for b in ("/scenarios/s/v1", "/v1") if path.startswith(b + "/")), None)
    if base is None:
        assert "/scenarios/NAME/v1" in message
    else:  # under a valid base: the endpoints that exist there are named
        assert (f"under {base} mockllm serves POST {base}/chat/completions, POST {base}/messages, "
                f"POST {base}/responses, GET {base}/models") in message
    await still_serves(f"{server.base_url}/v1")


async def test_an_anthropic_base_with_v1_twice_is_told_to_drop_it(serve, scenario):
    server = await serve(scenario)
    url = server.base_url + "/scenarios/s/v1/v1/messages"
    status, body, headers = await raw("POST", url, json.dumps(GOOD).encode())
    message = assert_mock_error(status, body, headers, 404, "unknown_path")
    assert "takes the base without it: /scenarios/s" in message


@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("GET", "/v1/chat/completions", "POST"),
    ("PUT", "/scenarios/s/v1/chat/completions", "POST"),
    ("POST", "/v1/models", "GET,HEAD"),
    ("POST", "/_mockllm/health", "GET,HEAD"),
    ("DELETE", "/_mockllm/runs", "GET,HEAD,POST"),  # GET lists the runs (the inspector)
    ("PUT", "/_mockllm/runs/run-1", "DELETE,GET,HEAD"),
], ids=["get-chat", "put-chat", "post-models", "post-health", "delete-runs", "put-run"])
async def test_wrong_methods(serve, scenario, method, path, allowed):
    server = await serve(scenario)
    status, body, headers = await raw(method, server.base_url + path, b"{}")
    message = assert_mock_error(status, body, headers, 405, "method_not_allowed")
    assert method in message and path in message
    assert headers["Allow"] == allowed
    await still_serves(f"{server.base_url}/v1")


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/scenarios/nope/v1/chat/completions"),
    ("GET", "/scenarios/nope/v1/models"),
], ids=["chat", "models"])
async def test_unknown_scenario(serve, scenario, method, path):
    server = await serve(scenario)
    status, body, headers = await raw(method, server.base_url + path, json.dumps(GOOD).encode())
    message = assert_mock_error(status, body, headers, 404, "unknown_run")
    assert "'nope'" in message and "loaded scenarios: s" in message
    await still_serves(f"{server.base_url}/scenarios/s/v1")


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/runs/run-999/v1/chat/completions"),
    ("GET", "/runs/run-999/v1/models"),
    ("GET", "/_mockllm/runs/run-999"),
    ("DELETE", "/_mockllm/runs/run-999"),
], ids=["chat", "models", "get", "delete"])
async def test_unknown_run(serve, scenario, method, path):
    server = await serve(scenario)
    _, base = await new_run(server.base_url, "s")
    status, body, headers = await raw(method, server.base_url + path, json.dumps(GOOD).encode())
    message = assert_mock_error(status, body, headers, 404, "unknown_run")
    assert "run-999" in message
    await still_serves(base)


async def test_ended_run_is_unknown(serve, scenario):
    server = await serve(scenario)
    run, base = await new_run(server.base_url, "s")
    await still_serves(base)
    status, _ = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
    assert status == 200
    status, body, headers = await raw("POST", f"{base}/chat/completions", json.dumps(GOOD).encode())
    message = assert_mock_error(status, body, headers, 404, "unknown_run")
    assert "POST /_mockllm/runs" in message
    _, fresh = await new_run(server.base_url, "s")
    await still_serves(fresh)


@pytest.mark.parametrize(("data", "status", "code"), [
    (b"{not json", 400, "invalid_request"),
    (b"", 400, "invalid_request"),
    (b"[]", 400, "invalid_request"),
    (b'"s"', 400, "invalid_request"),
    (b"{}", 400, "invalid_request"),
    (b'{"scenario": 5}', 400, "invalid_request"),
    (b'{"scenario": null}', 400, "invalid_request"),
    (b'{"scenario": "s", "cwd": 5}', 400, "invalid_request"),
    (b'{"scenario": "s", "cwd": ["/a"]}', 400, "invalid_request"),
    (b'{"scenario": "nope"}', 404, "unknown_run"),
    (b'{"scenario": "broken"}', 422, "scenario_invalid"),
], ids=["broken-json", "empty", "array", "string", "no-scenario", "scenario-int", "scenario-null", "cwd-int",
        "cwd-list", "unknown-scenario", "broken-scenario"])
async def test_bad_run_requests(serve, tmp_path, data, status, code):
    write_override(tmp_path / "suite" / "s", [chunks_entry(text_call("first answer"))])
    broken = tmp_path / "suite" / "broken"
    broken.mkdir()
    # Written by hand: the log writer only writes valid v0 headers.
    (broken / "session.jsonl").write_text('{"type":"session","version":3,"id":"b","createdAt":1}\n')
    server = await serve(tmp_path / "suite")
    got, body, headers = await raw("POST", f"{server.base_url}/_mockllm/runs", data,
                                   {"Content-Type": "application/json"})
    assert_mock_error(got, body, headers, status, code)
    _, health = await http("GET", f"{server.base_url}/_mockllm/health")
    assert isinstance(health, dict) and health["runs"] == 0  # nothing half-created
    await still_serves(f"{server.base_url}/scenarios/s/v1")


async def test_bad_requests_do_not_disturb_another_run(serve, scenario):
    server = await serve(scenario)
    _, base_a = await new_run(server.base_url, "s")
    _, base_b = await new_run(server.base_url, "s")
    await still_serves(base_a)
    for data in (b"{", b'{"messages": []}', b'{"messages": 1}'):
        status, _, _ = await raw("POST", f"{base_b}/chat/completions", data)
        assert status == 400
    await still_serves(base_a, "second")
    await still_serves(base_b, "first answer")


async def test_a_body_that_arrives_after_its_head_is_read_in_full(serve, scenario, monkeypatch):
    """Bodies all buffered when the handler runs are taken as they are; the rest are awaited."""
    reading = asyncio.Event()
    real_read = web.BaseRequest.read

    async def read(request: web.BaseRequest) -> bytes:
        reading.set()  # the handler is waiting for a body that is still on its way
        return await real_read(request)

    monkeypatch.setattr(web.BaseRequest, "read", read)
    server = await serve(scenario)
    _, base = await new_run(server.base_url, "s")
    data = json.dumps(GOOD).encode()

    async def body_in_two_parts():
        yield data[:10]
        await asyncio.wait_for(reading.wait(), 10)  # fails the request, not the suite, if never read
        yield data[10:]

    async with aiohttp.ClientSession() as session, session.post(
            f"{base}/chat/completions", data=body_in_two_parts(), headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["choices"][0]["message"]["content"] == "first answer"
    assert reading.is_set()
