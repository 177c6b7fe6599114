"""Embeddings, OpenAI's: recorded by `mockllm record` through the official SDK against a scripted
provider that knows nothing of mockllm (tests/scripted_embeddings.py), then replayed with the
provider stopped: by content, in any order, as often as asked, float or base64 as the client asks;
a miss is a 404 naming the nearest recorded input and a divergence of the run. Also the pure layer:
what a request's content is, the file, its errors."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

import mockllm
from mockllm.cli.main import main
from mockllm.cli.tree_view import run_inspect
from mockllm.cli.validate import run_check
from mockllm.dsh.names import EMBEDDINGS_FILE
from mockllm.errors import RecordingError
from mockllm.record.command import RecordOptions, start_recorder
from mockllm.replay.report import RunNotClean
from mockllm.scenario.embeddings import (
    GEMINI_BATCH,
    OLLAMA,
    OLLAMA_LEGACY,
    OPENAI,
    BadEmbeddingRequest,
    RecordedEmbedding,
    call_of,
    read_embeddings,
    write_embeddings,
)
from mockllm.scenario.load import load_scenario
from mockllm.wire.embeddings.openai import OpenAIEmbeddings, to_base64, to_floats
from tests.scripted_embeddings import ScriptedEmbeddings, embed

pytest_plugins = ["pytester"]

KEY = "sk-embed-do-not-record-0123456789"
DOCS = ["Oslo has a harbour older than its cathedral.", "Figs grow in the squares of Palermo.",
        "The bridge of Mostar is lit all night."]


@pytest.fixture
def upstream() -> Iterator[ScriptedEmbeddings]:
    with ScriptedEmbeddings() as up:
        yield up


# --- the pure layer ------------------------------------------------------------------------------


@pytest.mark.parametrize(("api", "model", "a", "b"), [
    (OPENAI, None, {"model": "m", "input": "hi"}, {"model": "m", "input": ["hi"], "encoding_format": "base64"}),
    (OPENAI, None, {"model": "m", "input": [1, 2, 3]}, {"model": "m", "input": [[1, 2, 3]], "user": "u"}),
    (OLLAMA, None, {"model": "m", "input": "hi"}, {"model": "m", "input": ["hi"], "keep_alive": "5m"}),
    (GEMINI_BATCH, "e", {"requests": [{"model": "models/e", "content": {"parts": [{"text": "hi"}]}}]},
     {"requests": [{"model": "models/other", "content": {"parts": [{"text": "hi"}]}}]}),
], ids=["one-text-or-a-list-of-it", "one-token-array-or-a-list-of-it", "ollama-text-or-list", "gemini-path-model"])
def test_requests_that_ask_the_same_vectors_compare_equal(api, model, a, b):
    assert call_of(api, model, a).key == call_of(api, model, b).key


@pytest.mark.parametrize(("api", "a", "b"), [
    (OPENAI, {"model": "m", "input": "hi"}, {"model": "m2", "input": "hi"}),
    (OPENAI, {"model": "m", "input": "hi"}, {"model": "m", "input": "hi", "dimensions": 8}),
    (OPENAI, {"model": "m", "input": ["a", "b"]}, {"model": "m", "input": ["b", "a"]}),
    (OLLAMA, {"model": "m", "input": "hi"}, {"model": "m", "input": "ho"}),
    (OLLAMA_LEGACY, {"model": "m", "prompt": "hi"}, {"model": "m", "prompt": "hi "}),
], ids=["model", "dimensions", "input-order", "ollama-input", "legacy-prompt"])
def test_requests_that_ask_other_vectors_differ(api, a, b):
    assert call_of(api, None, a).key != call_of(api, None, b).key


@pytest.mark.parametrize(("api", "body", "words"), [
    (OPENAI, {"input": "x"}, "names no model"),
    (OPENAI, {"model": "m", "input": []}, "non-empty list"),
    (OPENAI, {"model": "m", "input": 3}, "not a text"),
    (OLLAMA_LEGACY, {"model": "m"}, "no prompt"),
    (GEMINI_BATCH, {"model": "m", "requests": "x"}, "no list of requests"),
    ("cohere/embed", {"model": "m"}, "unknown embeddings API"),
    (OPENAI, [1], "not a JSON object"),
], ids=["no-model", "empty", "number", "no-prompt", "no-requests", "unknown-api", "not-object"])
def test_a_request_that_is_none_says_why(api, body, words):
    with pytest.raises(BadEmbeddingRequest, match=words):
        call_of(api, None, body)


def test_base64_is_the_float32_bytes_and_reads_back_to_the_same_floats():
    vector = embed("a harbour older than its cathedral")
    assert base64.b64decode(to_base64(vector)) == struct.pack(f"<{len(vector)}f", *vector)
    assert to_floats(to_base64(vector)) == vector


def recorded(encoding: str) -> RecordedEmbedding:
    vector = embed("hi")
    wire: Any = to_base64(vector) if encoding == "base64" else vector
    return RecordedEmbedding(OPENAI, "m", {"model": "m", "input": "hi", "encoding_format": encoding},
                             {"object": "list", "model": "m-1", "data": [{"object": "embedding", "index": 0,
                                                                         "embedding": wire}], "usage": {"x": 1}})


@pytest.mark.parametrize("stored", ["float", "base64"])
@pytest.mark.parametrize("asked", ["float", "base64", None])
def test_an_openai_answer_is_written_in_the_encoding_asked_and_nothing_else_changes(stored, asked):
    pair = recorded(stored)
    request: dict[str, Any] = {"model": "m", "input": "hi"} | ({"encoding_format": asked} if asked else {})
    answer = json.loads(OpenAIEmbeddings().answer(pair, request))
    vector = answer["data"][0]["embedding"]
    assert (to_floats(vector) if isinstance(vector, str) else vector) == embed("hi")
    assert isinstance(vector, str) == (asked == "base64")
    assert {k: v for k, v in answer.items() if k != "data"} == {"object": "list", "model": "m-1", "usage": {"x": 1}}
    if (asked or "float") == stored:
        assert answer == pair.response, "as recorded, byte for byte in value"


def test_a_broken_file_names_itself_and_the_pair(tmp_path):
    (tmp_path / EMBEDDINGS_FILE).write_text('[{"api": "openai/embeddings", "model": "m"}]')
    with pytest.raises(RecordingError, match=r"embeddings\.json: not a list of .*request"):
        read_embeddings(tmp_path)
    write_embeddings(tmp_path, [recorded("float"), RecordedEmbedding(OPENAI, "m", {"model": "m"}, {})])
    with pytest.raises(RecordingError, match=r"embeddings\.json: pair 2 \(`\$\[1\]`\): the input is not"):
        read_embeddings(tmp_path)


def test_a_folder_with_only_embeddings_is_a_scenario_with_no_model_call(tmp_path):
    write_embeddings(tmp_path, [recorded("float")])
    scenario = load_scenario(tmp_path)
    assert [len(s.entries) for s in scenario.sessions] == [0]
    assert scenario.embeddings is not None and len(scenario.embeddings) == 1


# --- recorded and replayed through the SDK -------------------------------------------------------


def no_key_in(folder: Path) -> None:
    assert not [p for p in folder.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()], "no key written"


async def embed_all(client: openai.AsyncOpenAI) -> dict[str, Any]:
    """Every form of request the SDK sends: what each gave."""
    floats = await client.embeddings.create(model="text-embedding-3-small", input=DOCS, encoding_format="float")
    # no encoding_format: the SDK asks base64 and decodes it
    default = await client.embeddings.create(model="text-embedding-3-small", input=DOCS[0])
    raw = await client.embeddings.create(model="text-embedding-3-small", input="figs", encoding_format="base64")
    tokens = await client.embeddings.create(model="text-embedding-3-small", input=[[9906, 1917], [15339]],
                                            encoding_format="float")
    short = await client.embeddings.create(model="text-embedding-3-large", input=DOCS[1], dimensions=4,
                                           encoding_format="float")
    return {"floats": [d.embedding for d in floats.data], "default": default.data[0].embedding,
            "raw": raw.data[0].embedding, "tokens": [d.embedding for d in tokens.data],
            "short": short.data[0].embedding, "model": floats.model, "usage": floats.usage.total_tokens}


async def test_mockllm_record_keeps_openai_embeddings_and_a_replay_serves_them_offline(upstream, tmp_path):
    out = tmp_path / "retrieval"
    async with await start_recorder(RecordOptions(upstream.url, out, port=0)) as recorder, \
            openai.AsyncOpenAI(base_url=recorder.base_url + "/v1", api_key=KEY, max_retries=0) as client:
        live = await embed_all(client)
        await client.embeddings.create(model="text-embedding-3-small", input=DOCS, encoding_format="float")
        await recorder.tree.flushed()
        assert len(json.loads((out / EMBEDDINGS_FILE).read_text())) == 5, "on disk as it goes; a repeat kept once"
    assert live["floats"] == [embed(d) for d in DOCS]
    assert live["default"] == embed(DOCS[0]) and live["tokens"][0] == embed("9906 1917")
    assert len(live["short"]) == 4
    assert len(upstream.requests("/v1/embeddings")) == 6, "every call went upstream"
    assert KEY in upstream.received[-1]["headers"]["Authorization"], "the key is forwarded"
    no_key_in(out)
    pairs = json.loads((out / EMBEDDINGS_FILE).read_text())
    assert pairs[1]["request"]["encoding_format"] == "base64" and isinstance(
        pairs[1]["response"]["data"][0]["embedding"], str), "the provider's base64 kept as it sent it"
    upstream.stop()

    async with mockllm.AsyncServer(out) as server:
        run = await server.run(out.name)
        async with openai.AsyncOpenAI(base_url=run.base_url, api_key="x", max_retries=0) as client:
            assert await embed_all(client) == live
            again = await client.embeddings.create(model="text-embedding-3-small", input=DOCS[0])
            assert again.data[0].embedding == live["default"], "as often as asked"
            # the other encoding than recorded: base64 recorded, floats asked; floats recorded, base64 asked
            asked = await client.embeddings.create(model="text-embedding-3-small", input=DOCS[0],
                                                   encoding_format="float")
            assert asked.data[0].embedding == live["default"]
            both = await client.embeddings.create(model="text-embedding-3-small", input=DOCS)
            assert [d.embedding for d in both.data] == live["floats"]
        await run.assert_consumed()
        await run.end()


async def test_an_unrecorded_input_is_a_404_naming_the_nearest_and_a_divergence(tmp_path):
    out = tmp_path / "miss"
    out.mkdir()
    write_embeddings(out, [RecordedEmbedding(OPENAI, "m", {"model": "m", "input": d}, {
        "object": "list", "data": [{"object": "embedding", "index": 0, "embedding": embed(d)}]}) for d in DOCS])
    async with mockllm.AsyncServer(out) as server:
        run = await server.run(out.name)
        async with openai.AsyncOpenAI(base_url=run.base_url, api_key="x", max_retries=0) as client:
            with pytest.raises(openai.NotFoundError) as missed:
                await client.embeddings.create(model="m", input="Figs grow in the squares of Naples.")
            assert (await client.embeddings.create(model="m", input=DOCS[2])).data[0].embedding == embed(DOCS[2])
        error = missed.value.body
        assert error["code"] == "unrecorded_embedding"  # type: ignore[index]
        assert "nearest recorded input: 'Figs grow in the squares of Palermo.'" in error["message"]  # type: ignore[index]
        report = await run.report()
        assert [(d.kind, d.session, d.got) for d in report.divergences] == [
            ("embedding", EMBEDDINGS_FILE, "Figs grow in the squares of Naples.")]
        assert report.diverged_calls == 1
        journal = report.state["journal"]  # type: ignore[index]
        assert [(r["dialect"], r["script"], r["call"], r["status"], r["error"]) for r in journal] == [
            (OPENAI, EMBEDDINGS_FILE, 0, 404, "unrecorded_embedding"), (OPENAI, EMBEDDINGS_FILE, 2, 200, None)]
        page = await run.report_html()  # the inspector: a lane of their own, the miss where divergences are
        assert 'data-session="embeddings.json"' in page and "Figs grow in the squares of Naples." in page
        assert 'data-lane="embeddings.json"' in page
        with pytest.raises(RunNotClean, match="Palermo"):
            await run.assert_consumed()
        warned = await server.run(out.name, divergence="warn")
        async with openai.AsyncOpenAI(base_url=warned.base_url, api_key="x", max_retries=0) as client:
            with pytest.raises(openai.NotFoundError):
                await client.embeddings.create(model="m", input="unheard of")
        await warned.assert_consumed()  # under "warn" a miss is reported and fails nothing


async def test_a_failed_embeddings_call_is_passed_back_and_not_recorded(upstream, tmp_path):
    out = tmp_path / "failed"
    async with await start_recorder(RecordOptions(upstream.url, out, port=0)) as recorder, \
            openai.AsyncOpenAI(base_url=recorder.base_url + "/v1", api_key=KEY, max_retries=0) as client:
        with pytest.raises(openai.InternalServerError):
            await client.embeddings.create(model="m", input="FAIL please", encoding_format="float")
    assert not (out / EMBEDDINGS_FILE).exists()


# --- inspect and check ---------------------------------------------------------------------------


def test_inspect_shows_the_recorded_embeddings_and_check_passes_them(tmp_path, capsys):
    folder = tmp_path / "suite" / "rag"
    folder.mkdir(parents=True)
    write_embeddings(folder, [recorded("float"), RecordedEmbedding(OLLAMA, "nomic", {"model": "nomic", "input": "x"},
                                                                   {"embeddings": [[0.5]]})])
    assert run_inspect(folder.parent, as_json=False) == 0
    assert "embeddings: embeddings.json  (2 recorded calls: openai/embeddings 1, ollama/embed 1; model(s) m, nomic)" \
        in capsys.readouterr().out
    assert run_inspect(folder.parent, as_json=True) == 0
    assert json.loads(capsys.readouterr().out)["scenarios"][0]["embeddings"] == {
        "file": EMBEDDINGS_FILE, "calls": 2, "apis": {"openai/embeddings": 1, "ollama/embed": 1},
        "models": ["m", "nomic"]}
    assert run_check(folder.parent) == 0


@pytest.mark.parametrize(("content", "problem"), [
    ('{"api": "openai/embeddings"}', "not a list of"),
    ('[{"api": "openai/embeddings", "model": "m", "request": {"model": "m"}, "response": {}}]',
     "pair 1 (`$[0]`): the input is not a text"),
    ('[{"api": "voyage", "model": "m", "request": {"model": "m"}, "response": {}}]', "unknown embeddings API 'voyage'"),
    ('[{"api": "ollama/embeddings", "model": "m", "request": {"model": "m", "prompt": "p"}, "response": [1]}]',
     "the response is not a JSON object"),
], ids=["not-a-list", "no-input", "unknown-api", "response-not-object"])
def test_check_and_inspect_name_a_broken_embeddings_file_and_what_is_wrong(tmp_path, capsys, content, problem):
    folder = tmp_path / "rag"
    folder.mkdir()
    (folder / EMBEDDINGS_FILE).write_text(content)
    assert run_check(folder) == 1
    out = capsys.readouterr().out
    assert f"{folder / EMBEDDINGS_FILE}: " in out and problem in out, out
    assert run_inspect(folder, as_json=False) == 1
    assert problem in capsys.readouterr().out


# --- the pytest plugin ---------------------------------------------------------------------------

PLUGIN_TESTS = '''
import openai
import pytest

def embed(run, text):
    with openai.OpenAI(base_url=run.base_url, api_key="unused", max_retries=0) as client:
        return client.embeddings.create(model="m", input=text, encoding_format="float").data[0].embedding

@pytest.mark.mockllm("rag")
def test_recorded(mockllm_run):
    assert embed(mockllm_run, "Oslo has a harbour older than its cathedral.") == EXPECTED

@pytest.mark.mockllm("rag")
def test_missed(mockllm_run):
    with pytest.raises(openai.NotFoundError):
        embed(mockllm_run, "Oslo has a harbor older than its cathedral?")

@pytest.mark.mockllm("rag", divergence="warn")
def test_missed_under_warn(mockllm_run):
    with pytest.raises(openai.NotFoundError):
        embed(mockllm_run, "Oslo has a harbor older than its cathedral?")
'''


def test_a_miss_fails_the_test_at_the_plugins_teardown_unless_divergence_is_warn(pytester: pytest.Pytester) -> None:
    recordings = pytester.path / "recordings"
    (recordings / "rag").mkdir(parents=True)
    write_embeddings(recordings / "rag", [RecordedEmbedding(OPENAI, "m", {"model": "m", "input": d}, {
        "object": "list", "data": [{"object": "embedding", "index": 0, "embedding": embed(d)}]}) for d in DOCS])
    pytester.makeini(f"[pytest]\naddopts = --strict-markers -p no:asyncio\nmockllm_recordings = {recordings}\n")
    pytester.makepyfile(f"EXPECTED = {embed(DOCS[0])!r}\n" + PLUGIN_TESTS)
    result = pytester.runpytest()
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines([
        "*ERROR at teardown of test_missed*",
        "*session embeddings.json (live id openai/embeddings) call 0 (0-based), an openai/embeddings request "
        "(model m) with no recorded answer: expected 'Oslo has a harbour older than its cathedral.', "
        "got 'Oslo has a harbor older than its cathedral?'*",
    ])


async def test_the_record_verb_keeps_an_embeddings_only_recording_that_check_passes_and_serve_replays(
        upstream, tmp_path):
    out = tmp_path / "indexed"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mockllm.cli", "record", "--upstream", upstream.url, "--out", str(out), "--port", "0",
        cwd=Path(__file__).resolve().parents[1], stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        assert process.stdout is not None
        await asyncio.wait_for(process.stdout.readline(), 20)
        base_url = (await process.stdout.readline()).decode().strip()
        async with openai.AsyncOpenAI(base_url=base_url, api_key=KEY, max_retries=0) as client:
            live = await client.embeddings.create(model="text-embedding-3-small", input=DOCS)
        process.send_signal(signal.SIGINT)
        rest, errors = await asyncio.wait_for(process.communicate(), 20)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, errors
    assert "recorded no sessions and 1 embeddings call(s) (embeddings.json)" in rest.decode()
    no_key_in(out)
    assert main(["check", str(out)]) == 0
    upstream.stop()
    async with mockllm.AsyncServer(out) as server:
        run = await server.run(out.name)
        async with openai.AsyncOpenAI(base_url=run.base_url, api_key="x", max_retries=0) as client:
            replayed = await client.embeddings.create(model="text-embedding-3-small", input=DOCS)
        assert [d.embedding for d in replayed.data] == [d.embedding for d in live.data] == [embed(d) for d in DOCS]
        await run.assert_consumed()


@pytest.mark.parametrize(("path", "body", "status", "code", "shape"), [
    ("/v1/embeddings", b"not json", 400, "invalid_request", "openai"),
    ("/v1/embeddings", b'{"model": "m", "input": []}', 400, "invalid_request", "openai"),
    ("/v1beta/models/e:batchEmbedContents", b'{"requests": 3}', 400, "invalid_request", "gemini"),
    ("/api/embeddings", b'{"model": "m"}', 400, "invalid_request", "ollama"),
    ("/api/embed", b'{"model": "m", "input": "never recorded"}', 404, "unrecorded_embedding", "ollama"),
], ids=["not-json", "empty-input", "gemini-no-requests", "ollama-no-prompt", "ollama-miss"])
async def test_bad_requests_are_answered_in_the_providers_shape_and_the_server_stays_up(
        tmp_path, path, body, status, code, shape):
    (tmp_path / "rag").mkdir()
    write_embeddings(tmp_path / "rag", [recorded("float")])
    async with mockllm.AsyncServer(tmp_path / "rag") as server, aiohttp.ClientSession() as http:
        run = await server.run("rag")
        async with http.post(run.root_url + path, data=body) as response:
            answer = await response.json()
            assert response.status == status and response.headers["x-should-retry"] == "false"
        message = {"openai": lambda a: a["error"]["code"], "gemini": lambda a: a["error"]["details"][0]["reason"],
                   "ollama": lambda a: a["code"]}[shape](answer)
        assert message == code, answer
        async with http.get(run.base_url + "/embeddings") as refused:
            assert refused.status == 405
        async with http.post(run.base_url + "/embeddings", json={"model": "m", "input": "hi"}) as served:
            assert served.status == 200 and (await served.json())["data"][0]["embedding"] == embed("hi")


def test_the_nearest_recorded_input_is_found_among_many_and_prefers_the_same_model(tmp_path):
    texts = [f"chunk {n}: the ledger of warehouse {n * 7} lists {n % 13} crates of salt" for n in range(400)]
    pairs = [RecordedEmbedding(OPENAI, "m", {"model": "m", "input": t}, {"data": []}) for t in texts]
    pairs.append(RecordedEmbedding(OPENAI, "other", {"model": "other", "input": "Where do figs grow?"}, {"data": []}))
    pairs.append(RecordedEmbedding(OPENAI, "m", {"model": "m", "input": "Where do the figs grow?"}, {"data": []}))
    write_embeddings(tmp_path, pairs)
    store = read_embeddings(tmp_path)
    assert store is not None
    asked = call_of(OPENAI, None, {"model": "m", "input": ["chunk 3: the ledger of warehouse 21 lists 3 crates of salt",
                                                           "Where do figs grow?"]})
    assert store.find(asked) is None
    assert store.nearest(asked) == ("Where do the figs grow?", "openai/embeddings, model m")
    assert store.find(call_of(OPENAI, None, {"model": "m", "input": texts[399]})) == 399
