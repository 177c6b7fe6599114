"""What real agents call beside the model routes: Anthropic's count_tokens (replayed by request),
a WebSocket upgrade (426, so Codex falls back to HTTP), errors and the models list in the
client's own shape."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import anthropic
import openai
import pytest

from mockllm.dsh.names import COUNT_TOKENS_FILE
from tests.logbuilder import text_call, write_sessions

COUNT_REQUEST = {"model": "claude-x", "messages": [{"role": "user", "content": "How long is this?"}]}


@pytest.fixture
def counted(tmp_path: Path) -> Path:
    folder = write_sessions(tmp_path / "counted", {"p": [text_call("hello")]})
    (folder / COUNT_TOKENS_FILE).write_text(json.dumps([{"request": COUNT_REQUEST, "response": {"input_tokens": 17}}]))
    return folder


async def test_a_recorded_count_is_replayed_for_an_equal_request_and_others_are_anthropic_404s(serve, counted):
    server = await serve(counted)
    async with anthropic.AsyncAnthropic(base_url=server.base_url, api_key="x", max_retries=0) as client:
        counted_tokens = await client.messages.count_tokens(**COUNT_REQUEST)  # type: ignore[arg-type]
        assert counted_tokens.input_tokens == 17
        with pytest.raises(anthropic.NotFoundError) as caught:
            await client.messages.count_tokens(model="claude-x", messages=[{"role": "user", "content": "other"}])
    assert caught.value.body["type"] == "error"  # type: ignore[index]
    assert caught.value.body["error"]["code"] == "unrecorded_count_tokens"  # type: ignore[index]


async def test_a_websocket_upgrade_on_a_model_route_is_426(serve, counted):
    server = await serve(counted)
    headers = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
    async with aiohttp.ClientSession() as session, session.get(f"{server.base_url}/v1/responses",
                                                               headers=headers) as got:
        assert got.status == 426 and got.headers["x-should-retry"] == "false"
    async with aiohttp.ClientSession() as session, session.post(f"{server.base_url}/v1/responses",
                                                                headers=headers, json={}) as got:
        assert got.status == 426


async def test_errors_on_anthropic_paths_take_anthropics_shape(serve, counted):
    server = await serve(counted)
    async with aiohttp.ClientSession() as session:
        for method, path in (("GET", "/v1/messages"), ("POST", "/v1/messages/batches")):
            async with session.request(method, server.base_url + path) as got:
                body = await got.json()
                assert got.status in (404, 405) and body["type"] == "error" and "code" in body["error"], body
                if got.status == 404:  # and it still names what is served
                    assert "POST /v1/messages/count_tokens" in body["error"]["message"]


async def test_the_models_list_takes_the_clients_shape(serve, counted):
    server = await serve(counted)
    async with anthropic.AsyncAnthropic(base_url=server.base_url, api_key="x", max_retries=0) as client:
        page = await client.models.list()
        assert [m.id for m in page.data] == ["deepseek-v4-flash"]
    async with openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0) as client:
        models = await client.models.list()
        assert [m.id for m in models.data] == ["deepseek-v4-flash"]
