"""Embeddings, Gemini's and Ollama's: recorded by `mockllm record` through the official clients
(google-genai's `models.embed_content`, one content and many; ollama's `embed` and `embeddings`)
against a scripted provider that knows nothing of mockllm, then replayed with it stopped, under
every base; Gemini's `:embedContent` (which google-genai does not call for the Gemini API) over
plain HTTP. A miss answers in the provider's own error shape."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import ollama
import pytest

import mockllm
from mockllm.dsh.names import EMBEDDINGS_FILE
from mockllm.record.command import RecordOptions, start_recorder
from mockllm.replay.report import RunNotClean
from tests import gemini_client, ollama_client
from tests.scripted_embeddings import ScriptedEmbeddings, embed

KEY = "gemini-key-do-not-record-0123456789"
TEXTS = ["a harbour older than its cathedral", "figs in the public squares"]
MODEL = "text-embedding-004"


@pytest.fixture
def upstream() -> Iterator[ScriptedEmbeddings]:
    with ScriptedEmbeddings() as up:
        yield up


@pytest.fixture(autouse=True)
async def _close_clients() -> AsyncIterator[None]:
    yield
    await gemini_client.close_all()
    await ollama_client.close_all()


async def gemini_calls(root: str) -> dict[str, object]:
    """google-genai's embed_content, one content and two (both are a batchEmbedContents call), and a
    plain `:embedContent` under /v1beta and /v1."""
    sdk = gemini_client.client(root, headers={"x-goog-api-key": KEY})
    one = await sdk.aio.models.embed_content(model=MODEL, contents=TEXTS[0])
    both = await sdk.aio.models.embed_content(model=MODEL, contents=TEXTS, config={"output_dimensionality": 8})
    single = {}
    async with aiohttp.ClientSession() as http:
        for version in ("v1beta", "v1"):
            async with http.post(f"{root}/{version}/models/{MODEL}:embedContent", headers={"x-goog-api-key": KEY},
                                 json={"content": {"parts": [{"text": TEXTS[1]}]}, "taskType": "RETRIEVAL_QUERY"}
                                 ) as response:
                assert response.status == 200, await response.text()
                single[version] = (await response.json())["embedding"]["values"]
    assert one.embeddings is not None and both.embeddings is not None
    return {"one": [e.values for e in one.embeddings], "both": [e.values for e in both.embeddings], **single}


async def ollama_calls(root: str) -> dict[str, object]:
    sdk = ollama_client.client(root)
    listed = await sdk.embed(model="nomic-embed-text", input=TEXTS)
    one = await sdk.embed(model="nomic-embed-text", input=TEXTS[0])
    legacy = await sdk.embeddings(model="nomic-embed-text", prompt=TEXTS[1])
    return {"listed": [list(v) for v in listed.embeddings], "one": [list(v) for v in one.embeddings],
            "legacy": list(legacy.embedding), "count": listed.prompt_eval_count}


async def record(upstream: ScriptedEmbeddings, out: Path) -> tuple[dict[str, object], dict[str, object]]:
    async with await start_recorder(RecordOptions(upstream.url, out, port=0)) as recorder:
        gemini, local = await gemini_calls(recorder.base_url), await ollama_calls(recorder.base_url)
    upstream.stop()
    return gemini, local


async def test_gemini_and_ollama_embeddings_are_recorded_and_replayed_under_every_base(upstream, tmp_path):
    out = tmp_path / "suite" / "embedded"
    gemini, local = await record(upstream, out)
    assert gemini["one"] == [embed(TEXTS[0])] and gemini["both"] == [embed(t, 8) for t in TEXTS]
    assert gemini["v1beta"] == gemini["v1"] == embed(TEXTS[1])
    assert local["listed"] == [embed(t) for t in TEXTS] and local["legacy"] == embed(TEXTS[1])
    pairs = json.loads((out / EMBEDDINGS_FILE).read_text())
    assert [(p["api"], p["model"]) for p in pairs] == [  # /v1beta and /v1 ask the same: kept once
        ("gemini/batchEmbedContents", MODEL), ("gemini/batchEmbedContents", MODEL), ("gemini/embedContent", MODEL),
        ("ollama/embed", "nomic-embed-text"), ("ollama/embed", "nomic-embed-text"),
        ("ollama/embeddings", "nomic-embed-text")]
    assert KEY.encode() not in (out / EMBEDDINGS_FILE).read_bytes()

    async with mockllm.AsyncServer(out.parent) as server:
        run = await server.run("embedded")
        for root in (run.root_url, f"{server.url}/scenarios/embedded"):
            assert await ollama_calls(root) == local  # another order than recorded
            assert await gemini_calls(root) == gemini
        await run.assert_consumed()
    async with mockllm.AsyncServer(out) as server:  # one scenario: served at the root too
        assert await gemini_calls(server.url) == gemini


async def test_a_miss_answers_in_the_providers_error_shape(upstream, tmp_path):
    out = tmp_path / "embedded"
    await record(upstream, out)
    async with mockllm.AsyncServer(out) as server:
        run = await server.run("embedded")
        with pytest.raises(ollama.ResponseError) as local:
            await ollama_client.client(run.root_url).embed(model="nomic-embed-text", input="figs in the squares")
        assert local.value.status_code == 404
        assert "unrecorded_embedding" in local.value.error and "figs in the public squares" in local.value.error
        async with aiohttp.ClientSession() as http, http.post(
                f"{run.root_url}/v1beta/models/{MODEL}:batchEmbedContents",
                json={"requests": [{"model": f"models/{MODEL}", "content": {"parts": [{"text": "harbour"}]}}]}
        ) as response:
            body = await response.json()
        assert response.status == 404
        assert body["error"]["status"] == "NOT_FOUND"
        assert body["error"]["details"][0]["reason"] == "unrecorded_embedding"
        assert "nearest recorded input: 'a harbour older than its cathedral'" in body["error"]["message"]
        with pytest.raises(RunNotClean) as unclean:
            await run.assert_consumed()
        assert "2 call(s) differed" in str(unclean.value)
