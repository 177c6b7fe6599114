"""Embeddings under the server's record modes (`once`, `new_episodes`, `rewrite`), through the official
clients against a scripted provider that knows nothing of mockllm, then replayed with it stopped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ollama
import openai
import pytest

import mockllm
from mockllm.dsh.names import EMBEDDINGS_FILE, PRIMARY_FILE
from tests.scripted_embeddings import ScriptedEmbeddings, embed

KEY = "sk-embed-do-not-record-0123456789"
DOCS = ["Oslo has a harbour older than its cathedral.", "Figs grow in the squares of Palermo."]
QUERY = "Where do figs grow?"


@pytest.fixture
def upstream() -> Iterator[ScriptedEmbeddings]:
    with ScriptedEmbeddings() as up:
        yield up


def server(path: Path, upstream: ScriptedEmbeddings, **options: Any) -> mockllm.Server:
    return mockllm.Server(path, upstream=(upstream.url, f"ollama={upstream.root}"), **options)


def index(run: mockllm.RunHandle, texts: list[str], api_key: str = KEY) -> list[list[float]]:
    with openai.OpenAI(base_url=run.base_url, api_key=api_key, max_retries=0) as client:
        return [d.embedding for d in client.embeddings.create(model="text-embedding-3-small", input=texts).data]


def pairs_in(folder: Path) -> list[dict[str, Any]]:
    return json.loads((folder / EMBEDDINGS_FILE).read_text())  # type: ignore[no-any-return]


def no_key_in(folder: Path) -> None:
    assert not [p for p in folder.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()], "no key written"


def test_once_records_a_run_that_only_embeds_and_replays_it_with_the_upstream_gone(upstream, tmp_path):
    with server(tmp_path, upstream, record_mode="once") as mock:
        with mock.run("rag") as run:
            assert index(run, DOCS) == [embed(d) for d in DOCS]
            assert index(run, [QUERY]) == [embed(QUERY)]
            sdk = ollama.Client(host=run.root_url)
            try:
                local = sdk.embed(model="nomic-embed-text", input=QUERY)
            finally:
                sdk.close()
            assert [list(v) for v in local.embeddings] == [embed(QUERY)]
        recording = run.end().recording
        assert recording is not None and recording.written, recording
        assert "3 embeddings call(s)" in recording.message
        folder = tmp_path / "rag"
        assert not (folder / PRIMARY_FILE).exists(), "no model call: no session log"
        assert [p["api"] for p in pairs_in(folder)] == ["openai/embeddings", "openai/embeddings", "ollama/embed"]
        no_key_in(tmp_path)
        upstream.stop()
        with mock.run("rag", record_mode="none") as run:
            assert index(run, [QUERY], "x") == [embed(QUERY)]
            assert index(run, DOCS, "x") == [embed(d) for d in DOCS]
            run.assert_consumed()
        with mock.run("rag") as run:  # once, now that it has a recording: replayed
            assert index(run, [QUERY], "x") == [embed(QUERY)]
            run.assert_consumed()


def test_new_episodes_replays_what_it_has_and_sends_and_keeps_a_miss(upstream, tmp_path):
    with server(tmp_path, upstream) as mock:
        with mock.run("rag", record_mode="once") as run:
            index(run, DOCS)
        assert len(upstream.requests("/v1/embeddings")) == 1
        with mock.run("rag", record_mode="new_episodes") as run:
            assert index(run, DOCS) == [embed(d) for d in DOCS]
            assert index(run, [QUERY]) == [embed(QUERY)]
            run.assert_consumed()  # a miss under new_episodes went upstream: no divergence
        report = run.end()
        assert report.recording is not None and report.recording.written, report.recording
        assert "added 1 embeddings call(s)" in report.recording.message
        assert [r["input"] for r in upstream.requests("/v1/embeddings")] == [DOCS, [QUERY]], "the miss only"
        assert [p["request"]["input"] for p in pairs_in(tmp_path / "rag")] == [DOCS, [QUERY]], "old pairs, then new"
        no_key_in(tmp_path)
        upstream.stop()
        with mock.run("rag") as run:
            assert index(run, [QUERY], "x") == [embed(QUERY)]
            assert index(run, DOCS, "x") == [embed(d) for d in DOCS]
            run.assert_consumed()


def test_rewrite_asks_the_upstream_again_and_keeps_only_what_it_asked(upstream, tmp_path):
    with server(tmp_path, upstream) as mock:
        with mock.run("rag", record_mode="once") as run:
            index(run, DOCS)
        with mock.run("rag", record_mode="rewrite") as run:
            index(run, [QUERY])
        assert run.end().recording.written  # type: ignore[union-attr]
        assert [r["input"] for r in upstream.requests("/v1/embeddings")] == [DOCS, [QUERY]]
        assert [p["request"]["input"] for p in pairs_in(tmp_path / "rag")] == [[QUERY]]


def test_an_embedding_recorded_under_a_cwd_is_found_from_another_folder(upstream, tmp_path):
    with server(tmp_path, upstream, record_mode="once") as mock:
        with mock.run("cwd", cwd="/home/a/project") as run:
            recorded = index(run, ["read /home/a/project/notes.md"])
        assert pairs_in(tmp_path / "cwd")[0]["request"]["input"] == ["read {{cwd}}/notes.md"]
        upstream.stop()
        with mock.run("cwd", cwd="/tmp/other") as run:
            assert index(run, ["read /tmp/other/notes.md"], "x") == recorded
            run.assert_consumed()
