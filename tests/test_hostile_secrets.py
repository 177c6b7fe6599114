"""Issue 25, secrets: no credential reaches a page, a report, a log line or a recorded file.

1. an upstream URL's credentials (`user:pass@`, Gemini's `?key=`) are never shown;
2. the journal shows a header's value only when its name is on an allowlist of harmless ones;
3. a credential the client forwarded, echoed back by the upstream, is masked wherever it is written.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from mockllm.record.command import RecordOptions, start_recorder
from mockllm.replay.journal import client_headers
from mockllm.shown_url import shown_url
from tests.conftest import http
from tests.fake_upstream import chat_chunk
from tests.logbuilder import ROOT
from tests.loopback import start_on_loopback

PASSWORD = "pw-Upstream-9f8e7d6c"
QUERY_KEY = "AIzaQueryKey-5a4b3c2d1e"
KEY = "sk-live-Header-0123456789abcdef"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(("url", "shown"), [
    ("http://user:pass@host:8/v1", "http://host:8/v1"),
    ("https://host/v1beta/models/m:streamGenerateContent?alt=sse&key=AIza123",
     "https://host/v1beta/models/m:streamGenerateContent?alt=sse&key=[redacted]"),
    ("https://api.openai.com/v1", "https://api.openai.com/v1"),
    ("http://token@[::1]:9/v1", "http://[::1]:9/v1"),
], ids=["userinfo", "query-key", "plain", "ipv6"])
def test_a_url_is_shown_without_its_credentials(url: str, shown: str) -> None:
    assert shown_url(url) == shown


async def test_an_upstream_urls_credentials_reach_no_report_page_or_log(serve, tmp_path, caplog):
    """Point 1, serve: an unreachable upstream named with credentials, a Gemini call with `?key=`."""
    caplog.set_level(logging.INFO)
    upstream = f"http://user:{PASSWORD}@127.0.0.1:{closed_port()}/v1"
    server = await serve(tmp_path, upstream=(upstream,), record_mode="once")
    status, body = await http("POST", f"{server.base_url}/_mockllm/runs", {"scenario": "case"})
    assert status == 201, body
    assert isinstance(body, dict)
    run, root = body["run"], body["base_url"].removesuffix("/v1")
    async with aiohttp.ClientSession() as client:
        async with client.post(f"{root}/v1beta/models/gemini-x:generateContent?key={QUERY_KEY}",
                               json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}) as answer:
            answered = await answer.text()
            assert answer.status == 502, answered
        shown = [answered]
        for path in (f"/_mockllm/runs/{run}", "/_mockllm/", f"/_mockllm/runs/{run}/report.html",
                     f"/_mockllm/runs/{run}/view"):
            async with client.get(server.base_url + path) as page:
                assert page.status == 200, path
                shown.append(await page.text())
        async with client.delete(f"{server.base_url}/_mockllm/runs/{run}") as ended:
            shown.append(await ended.text())
    shown.append(caplog.text)
    assert "cannot reach the upstream" in shown[-2], "the failure is still told, its URL without credentials"
    assert "127.0.0.1" in shown[-2]
    for text in shown:
        assert PASSWORD not in text and QUERY_KEY not in text, text[:2000]


async def test_mockllm_record_shows_its_upstream_without_credentials(tmp_path):
    """Point 1, `mockllm record`: its banner, its log line for an unreachable upstream, its closing line."""
    port = closed_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mockllm.cli", "record", "--upstream", f"http://user:{PASSWORD}@127.0.0.1:{port}/v1",
        "--out", str(tmp_path / "out"), "--port", "0", cwd=ROOT, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    try:
        assert process.stdout is not None
        banner = (await asyncio.wait_for(process.stdout.readline(), 20)).decode()
        base_url = (await asyncio.wait_for(process.stdout.readline(), 20)).decode().strip()
        assert f"forwarding to http://127.0.0.1:{port}/v1" in banner
        async with aiohttp.ClientSession() as client, client.post(
                base_url.removesuffix("/v1") + f"/v1beta/models/g:generateContent?key={QUERY_KEY}",
                json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}) as answer:
            answered = await answer.text()
            assert answer.status == 502
        process.send_signal(signal.SIGINT)
        rest, errors = await asyncio.wait_for(process.communicate(), 20)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    for text in (banner, answered, rest.decode(), errors.decode()):
        assert PASSWORD not in text and QUERY_KEY not in text, text


@pytest.mark.parametrize(("name", "shown"), [
    ("x-mockllm-session", True), ("x-deepseek-harness-compact", True), ("x-stainless-retry-count", True),
    ("x-request-id", True), ("x-jwt", False), ("x-goog-api-key", False), ("x-amz-security-token", False),
    ("x-custom", False), ("x-session-bearer", False),
], ids=lambda v: str(v))
def test_the_journal_shows_a_header_value_only_when_its_name_is_known_harmless(name: str, shown: bool) -> None:
    """Point 2: an allowlist, not a list of suspicious words (`x-jwt` holds none of them)."""
    headers = client_headers(((name.encode(), b"v-secret-value-123"), (b"Cookie", b"sid=abc"),
                              (b"api-key", b"azure-0123"), (b"Proxy-Authorization", b"Basic Zm9v")))
    assert headers[name] == ("v-secret-value-123" if shown else "[redacted]")
    assert "v-secret" not in json.dumps({k: v for k, v in headers.items() if k != name}) or shown
    assert not {"cookie", "api-key", "proxy-authorization"} & set(headers), "not the client's own x- headers"


async def echoing_upstream() -> tuple[web.AppRunner, str]:
    """A provider that echoes the caller's key: in streamed content, in an error body, in a count."""

    def key_of(request: web.Request) -> str:
        return request.headers.get("x-api-key") or request.headers.get("Authorization", "").removeprefix("Bearer ")

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        key = key_of(request)
        if "FAIL" in json.dumps(body["messages"]):
            return web.json_response({"error": {"message": f"Incorrect API key provided: {key}", "type": "x",
                                                "code": "invalid_api_key"}}, status=400)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(chat_chunk({"role": "assistant", "content": "your key: " + key[:9]}))
        await response.write(chat_chunk({"content": key[9:] + " ok"}))
        await response.write(chat_chunk({}, finish="stop"))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def count(request: web.Request) -> web.Response:
        return web.json_response({"input_tokens": 3, "echo": key_of(request)})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/messages/count_tokens", count)
    return await start_on_loopback(app)


def recorded_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


async def test_a_key_echoed_by_the_upstream_is_masked_in_every_recorded_file(tmp_path):
    """Point 3: a log, the sidecar (`replay.override.json`), a side route, `count_tokens.json`."""
    runner, root = await echoing_upstream()
    out = tmp_path / "out"
    try:
        recorder = await start_recorder(RecordOptions(root + "/v1", out, port=0, side_routes=("title-model",)))
        async with recorder, aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEY}"}) as client:
            base = recorder.base_url
            for model, text in (("m", "FAIL please"), ("m", "hello"), ("title-model", "a title")):
                async with client.post(f"{base}/v1/chat/completions", json={
                        "model": model, "stream": True, "messages": [{"role": "user", "content": text}]}) as answer:
                    await answer.read()
            async with client.post(f"{base}/v1/messages/count_tokens", headers={"x-api-key": KEY},
                                   json={"model": "c", "messages": [{"role": "user", "content": "hi"}]}) as answer:
                assert answer.status == 200
    finally:
        await runner.cleanup()
    files = recorded_bytes(out)
    assert {"session.jsonl", "replay.override.json", "count_tokens.json", "side.title-model.json"} <= set(files)
    for name, data in files.items():
        assert KEY.encode() not in data, name
        assert KEY[:9].encode() not in data or name == "nothing", name  # not even the key's pieces
    assert b"[REDACTED]" in files["replay.override.json"] and b"[REDACTED]" in files["count_tokens.json"]


async def test_a_key_echoed_by_the_upstream_is_masked_in_a_record_mode_run(serve, tmp_path):
    """Point 3, the server's record modes: the written scenario and the run's report."""
    runner, root = await echoing_upstream()
    try:
        server = await serve(tmp_path, upstream=(root + "/v1",), record_mode="once")
        _, body = await http("POST", f"{server.base_url}/_mockllm/runs", {"scenario": "echo"})
        assert isinstance(body, dict)
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEY}"}) as client:
            for text in ("FAIL", "hello"):
                async with client.post(body["base_url"] + "/chat/completions", json={
                        "model": "m", "stream": True, "messages": [{"role": "user", "content": text}]}) as answer:
                    await answer.read()
            async with client.get(f"{server.base_url}/_mockllm/runs/{body['run']}") as state:
                shown = await state.text()
        _, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{body['run']}")
    finally:
        await runner.cleanup()
    assert KEY not in shown and KEY not in json.dumps(report)
    assert isinstance(report, dict) and report["recording"]["written"], report
    files = recorded_bytes(tmp_path / "echo")
    assert "replay.override.json" in files, "the 400 is kept, to replay as it happened"
    for name, data in files.items():
        assert KEY.encode() not in data and KEY[:9].encode() not in data, name


def test_learned_credentials_are_one_rule_and_mask_whole_keys() -> None:
    from mockllm.record.redact import Redactor

    redactor = Redactor()
    redactor.learn(["sk-short-key", "sk-short-key-and-more", "sk-short-key"])
    redactor.learn(["another-secret-1"])
    assert len(redactor.rules) == 1
    assert redactor.text("a sk-short-key-and-more b sk-short-key c another-secret-1") == \
        "a [REDACTED] b [REDACTED] c [REDACTED]"


def test_a_configured_session_header_is_not_taken_for_a_credential() -> None:
    from mockllm.shown_headers import header_secrets

    raw = ((b"X-Agent-Id", b"planner-agent-7"), (b"Authorization", b"Bearer sk-abcdefgh12"))
    assert header_secrets(raw, {"x-agent-id"}) == ["Bearer sk-abcdefgh12", "sk-abcdefgh12"]
