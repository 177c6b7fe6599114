"""A real retrieval flow: LangChain's `OpenAIEmbeddings` fills an `InMemoryVectorStore`, a similarity
search finds the document a question is about, and a chat model answers from it. Recorded through
`mockllm record` against a scripted provider that knows nothing of mockllm, then replayed with the
provider stopped: the same document found, the same answer, the run consumed.

`check_embedding_ctx_length=False`: otherwise LangChain tokenizes with tiktoken, which downloads its
vocabulary (no network here); its token-array requests are proven with the openai SDK in
tests/test_embeddings.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_openai import ChatOpenAI, OpenAIEmbeddings

import mockllm
from mockllm.dsh.names import EMBEDDINGS_FILE, PRIMARY_FILE
from mockllm.record.command import RecordOptions, start_recorder
from tests.scripted_embeddings import ScriptedEmbeddings

KEY = "sk-rag-do-not-record-0123456789"
DOCS = ["Oslo has a harbour older than its cathedral.", "Figs grow in the public squares of Palermo.",
        "The old bridge of Mostar is lit all night.", "Bergen names a street after every river it trades with."]
QUESTION = "In which city do figs grow in the squares?"


@pytest.fixture
def upstream() -> Iterator[ScriptedEmbeddings]:
    with ScriptedEmbeddings() as up:
        yield up


async def retrieve_and_answer(base_url: str, api_key: str) -> tuple[list[str], str]:
    """Index the documents, find the one the question is about, ask the model with it."""
    # HTTP clients of our own, closed at the end: LangChain would make (and leave open) its own.
    with openai.DefaultHttpxClient() as sync_client:
        async with openai.DefaultAsyncHttpxClient() as client:
            clients: dict[str, Any] = {"http_client": sync_client, "http_async_client": client}
            embeddings = OpenAIEmbeddings(model="text-embedding-3-small", base_url=base_url,
                                          api_key=api_key,  # type: ignore[arg-type]
                                          check_embedding_ctx_length=False, max_retries=0, **clients)
            store = InMemoryVectorStore(embeddings)
            await store.aadd_documents([Document(page_content=d, metadata={"n": n}) for n, d in enumerate(DOCS)])
            found = await store.asimilarity_search(QUESTION, k=1)
            model = ChatOpenAI(model="gpt-4o-mini", base_url=base_url, api_key=api_key,  # type: ignore[arg-type]
                               max_retries=0, **clients)
            answer = await model.ainvoke([("system", "Answer from the context."),
                                          ("user", f"Context: {found[0].page_content}\nQuestion: {QUESTION}")])
    return [d.page_content for d in found], str(answer.content)


async def test_a_langchain_retrieval_flow_is_recorded_and_replayed_offline(upstream, tmp_path):
    out = tmp_path / "rag"
    async with await start_recorder(RecordOptions(upstream.url, out, port=0)) as recorder:
        live = await retrieve_and_answer(recorder.base_url + "/v1", KEY)
    assert live == ([DOCS[1]], f"echo: Context: {DOCS[1]}\nQuestion: {QUESTION}"), "the search found the figs"
    assert [r["input"] for r in upstream.requests("/v1/embeddings")] == [DOCS, [QUESTION]]
    assert (out / PRIMARY_FILE).is_file() and (out / EMBEDDINGS_FILE).is_file()
    assert not [p for p in out.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()], "no key written"
    upstream.stop()

    async with mockllm.AsyncServer(out) as server:
        for _ in range(2):  # a second run asks the same embeddings again
            run = await server.run(out.name)
            assert await retrieve_and_answer(run.base_url, "x") == live
            await run.assert_consumed()
            await run.end()


async def test_the_inspector_shows_a_runs_embeddings_calls_in_a_lane_of_their_own(upstream, tmp_path):
    out = tmp_path / "rag"
    async with await start_recorder(RecordOptions(upstream.url, out, port=0)) as recorder:
        await retrieve_and_answer(recorder.base_url + "/v1", KEY)
    upstream.stop()
    async with mockllm.AsyncServer(out) as server:
        run = await server.run(out.name)
        await retrieve_and_answer(run.base_url, "x")
        page = await run.report_html()
    assert 'data-lane="embeddings.json"' in page and "answered by content, in any order" in page
    assert 'data-lane="session.jsonl"' in page
