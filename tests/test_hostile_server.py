"""Issue 25, the server under hostile input: a clear 4xx in the route's shape, never a 500, nothing lost.

12. JSON nested 10,000 deep: a 400 on model routes, `POST /_mockllm/runs` and count_tokens;
14. names: a 300-character scenario name, a group that is a file, a bad call number, a side route's
    script outside its scenario folder;
15. record modes forward the path as received;
16. a scenario recorded while serving shows on the inspector page;
and the decision on per-run record modes: a server started with record mode none lets no run record
unless its operator named an upstream, and never under `--allow-run-record-modes false`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

import mockllm
from mockllm.errors import ScenarioError
from mockllm.options import ServeOptions, in_process
from mockllm.scenario.load import load_scenario
from tests.conftest import http, new_run
from tests.logbuilder import RECORDINGS
from tests.loopback import start_on_loopback
from tests.raw_http import json_of, raw_request
from tests.scripted_upstream import ScriptedUpstream

DEEP = b"[" * 10_000 + b"]" * 10_000


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as up:
        yield up


def error_of(body: bytes) -> str:
    """The message of an error body in any dialect's shape."""
    doc = json_of(body)
    error = doc["error"]
    return error if isinstance(error, str) else error["message"]


@pytest.mark.parametrize(("path", "body"), [
    (b"/v1/chat/completions", b'{"model": "m", "messages": [{"role": "user", "content": ' + DEEP + b"}]}"),
    (b"/v1/messages", b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": ' + DEEP + b"}]}"),
    (b"/v1/responses", b'{"model": "m", "input": ' + DEEP + b"}"),
    (b"/api/chat", b'{"model": "m", "messages": ' + DEEP + b"}"),
    (b"/v1beta/models/m:generateContent", b'{"contents": ' + DEEP + b"}"),
    (b"/v1/messages/count_tokens", b'{"model": "m", "messages": ' + DEEP + b"}"),
    (b"/_mockllm/runs", b'{"scenario": ' + DEEP + b"}"),
], ids=["chat", "anthropic", "responses", "ollama", "gemini", "count_tokens", "runs"])
async def test_json_nested_too_deep_is_a_400_in_the_routes_shape(serve, path, body):
    server = await serve(RECORDINGS / "text-turn")
    status, headers, answer = await raw_request(server.base_url, path, headers=(b"Content-Type: application/json",),
                                                body=body)
    assert status == 400, answer[:300]
    assert headers["content-type"].startswith("application/json")
    assert "nested" in error_of(answer), answer[:300]
    status, _ = await http("GET", f"{server.base_url}/_mockllm/health")
    assert status == 200


async def test_a_record_mode_run_with_a_deep_body_is_a_400_too(serve, tmp_path, upstream):
    server = await serve(tmp_path, upstream=(upstream.url,), record_mode="once")
    _, base = await new_run(server.base_url, "deep")
    root = base.removeprefix(server.base_url).encode()
    status, _, answer = await raw_request(server.base_url, root + b"/chat/completions", body=b'{"messages": ' + DEEP
                                          + b"}", headers=(b"Content-Type: application/json",))
    assert status == 400, answer[:300]
    assert "nested" in error_of(answer)


@pytest.mark.parametrize(("name", "why"), [
    ("x" * 300, "characters"),
    ("g/" + "y" * 300, "characters"),
    ("afile/case", "not a folder"),
], ids=["long", "long-in-group", "group-is-a-file"])
async def test_a_name_that_cannot_be_a_folder_is_a_400_and_leaves_nothing(serve, tmp_path, upstream, name, why):
    (tmp_path / "afile").write_text("a file, not a group")
    server = await serve(tmp_path, upstream=(upstream.url,), record_mode="once")
    before = sorted(os.listdir(tmp_path))
    status, body = await http("POST", f"{server.base_url}/_mockllm/runs", {"scenario": name})
    assert status == 400 and isinstance(body, dict), body
    assert why in body["error"]["message"]
    assert sorted(os.listdir(tmp_path)) == before, "no folder left behind"


@pytest.mark.parametrize("number", ["%C2%B2", "9" * 5000, "-1", "1e3", "%EF%BC%91"],
                         ids=["superscript", "5000-digits", "negative", "float", "fullwidth"])
async def test_a_call_number_that_is_no_number_is_a_404_json_error(serve, number):
    server = await serve(RECORDINGS / "text-turn")
    run, _ = await new_run(server.base_url, "text-turn")
    status, headers, body = await raw_request(server.base_url, f"/_mockllm/runs/{run}/calls/{number}".encode(),
                                              method=b"GET")
    assert status == 404, body[:300]
    assert headers["content-type"].startswith("application/json")
    assert json_of(body)["error"]["code"] == "unknown_call"


@pytest.mark.parametrize("script", ["../outside.json", "/abs/outside.json", "link.json"],
                         ids=["dotdot", "absolute", "symlink"])
def test_a_side_route_script_outside_its_scenario_folder_is_refused(tmp_path, script):
    scenario = tmp_path / "suite" / "case"
    scenario.mkdir(parents=True)
    (scenario / "session.jsonl").write_bytes((RECORDINGS / "text-turn" / "session.jsonl").read_bytes())
    outside = tmp_path / "suite" / "outside.json"
    outside.write_text("[]")
    (scenario / "link.json").symlink_to(outside)
    script = script.replace("/abs/outside.json", str(outside))
    (scenario / "mockllm.json").write_text(json.dumps({"side_routes": [{"model": "t", "script": script}]}))
    with pytest.raises(ScenarioError, match="outside"):
        load_scenario(scenario)


async def raw_path_upstream() -> tuple[web.AppRunner, str, list[str]]:
    """A Gemini-speaking upstream that keeps each request's path as it came on the wire."""
    seen: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(request.raw_path)
        return web.json_response({"candidates": [{"content": {"role": "model", "parts": [{"text": "hi"}]},
                                                  "finishReason": "STOP"}], "modelVersion": "m"})

    app = web.Application()
    app.router.add_route("*", r"/{tail:[\s\S]*}", answer)  # a decoded CR LF too
    runner, root = await start_on_loopback(app)
    return runner, root, seen


@pytest.mark.parametrize("model", ["%E4%B8%AD", "a%20b", "a%0D%0Ab"], ids=["utf8", "space", "crlf"])
async def test_record_modes_forward_the_path_as_received(serve, tmp_path, model):
    runner, root, seen = await raw_path_upstream()
    try:
        server = await serve(tmp_path, upstream=(root + "/v1",), record_mode="once")
        _, base = await new_run(server.base_url, "paths")
        path = base.removeprefix(server.base_url).removesuffix("/v1") + f"/v1beta/models/{model}:generateContent"
        status, _, body = await raw_request(server.base_url, path.encode() + b"?alt=json",
                                            headers=(b"Content-Type: application/json",),
                                            body=b'{"contents": [{"role": "user", "parts": [{"text": "x"}]}]}')
    finally:
        await runner.cleanup()
    assert status == 200, body
    assert seen == [f"/v1beta/models/{model}:generateContent?alt=json"]


async def test_a_scenario_recorded_while_serving_shows_on_the_inspector_page(serve, tmp_path, upstream):
    server = await serve(tmp_path, upstream=(upstream.url,), record_mode="once")
    async with aiohttp.ClientSession() as client:
        async with client.get(f"{server.base_url}/_mockllm/") as page:
            assert page.status == 200
        run, base = await new_run(server.base_url, "fresh/case")
        async with client.post(base + "/chat/completions", json={
                "model": "m", "messages": [{"role": "user", "content": "hi"}]}) as answer:
            assert answer.status == 200
        _status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
        assert isinstance(report, dict) and report["recording"]["written"], report
        for path in ("/_mockllm/", f"/_mockllm/runs/{run}/report.html"):
            async with client.get(server.base_url + path) as page:
                text = await page.text()
                assert page.status == 200, text[:500]
        assert "fresh/case" in text or "fresh/case" in (await (await client.get(
            server.base_url + "/_mockllm/")).text())


async def test_a_server_in_record_mode_none_lets_no_run_record_unless_allowed(serve, tmp_path, upstream):
    # as `mockllm serve DIR --upstream URL --allow-run-record-modes false`: a shared replay server
    server = await serve(tmp_path, upstream=(upstream.url,), allow_run_record_modes=False)
    for mode in ("once", "new_episodes", "rewrite"):
        status, body = await http("POST", f"{server.base_url}/_mockllm/runs", {"scenario": "s", "record_mode": mode})
        assert status == 403 and isinstance(body, dict), body
        assert body["error"]["code"] == "record_mode_not_allowed"
        assert "--allow-run-record-modes false" in body["error"]["message"]
    assert upstream.received == []
    allowed = await serve(tmp_path, upstream=(upstream.url,))  # naming the upstream allows it, by default
    status, body = await http("POST", f"{allowed.base_url}/_mockllm/runs", {"scenario": "s", "record_mode": "once"})
    assert status == 201, body
    recording = await serve(tmp_path, upstream=(upstream.url,), record_mode="once")  # the operator chose one
    status, body = await http("POST", f"{recording.base_url}/_mockllm/runs", {"scenario": "t",
                                                                             "record_mode": "rewrite"})
    assert status == 201, body


def test_the_python_apis_caller_is_the_operator():
    """`mockllm.Server(upstream=...)` and the pytest plugin start the server for their own runs: as the CLI,
    naming an upstream lets runs record."""
    assert in_process().allow_run_record_modes is True
    assert ServeOptions().allow_run_record_modes is True


def test_serve_takes_the_flag(monkeypatch):
    from mockllm.cli.main import main

    given = []
    monkeypatch.setattr("mockllm.server.running.serve_forever", lambda path, options: given.append(options) or 0)
    main(["serve", str(RECORDINGS / "text-turn"), "--allow-run-record-modes", "false"])
    assert given and given[0].allow_run_record_modes is False


def recorded(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


_ = mockllm
