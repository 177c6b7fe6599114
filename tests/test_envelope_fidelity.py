"""Replayed in the dialect it was recorded in, a call is what the provider sent: the same events in
the same order, each with the same fields and values (model, ids, created, fingerprints,
service_tier, usage where the provider put it), streamed and whole. Recorded through `mockllm
record` from a scripted upstream with realistic envelopes (`provider_envelopes`), compared field
by field; only framing whitespace may differ.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from mockllm.record.command import RecordOptions, start_recorder
from tests.conftest import http, new_run
from tests.fake_upstream import Answer, running_upstream
from tests.provider_envelopes import (
    CASES,
    CHAT_MODEL,
    CHAT_STREAM_REQUEST,
    Case,
    differing_fields,
    parse_stream,
    stream_request,
    whole_request,
)


async def _post(base: str, route: str, body: dict[str, Any]) -> bytes:
    async with aiohttp.ClientSession() as client, client.post(base + route, json=body) as response:
        assert response.status == 200, await response.text()
        return await response.read()


async def _record(case: Case, out: Path, **options: Any) -> tuple[bytes, bytes]:
    """Record the case's streamed call into `out/stream` and its whole call into `out/whole`; what
    the client got through the recorder each time."""
    got = []
    for mode in ("stream", "whole"):
        async with running_upstream() as upstream:
            if mode == "stream":
                kind = "application/x-ndjson" if case.ndjson else "text/event-stream"
                upstream.answers.append(Answer(case.stream_pieces(), content_type=kind))
            else:
                upstream.answers.append(Answer([json.dumps(case.whole).encode()], content_type="application/json"))
            recording = RecordOptions(upstream.base_url, out / mode, port=0, **options)
            async with await start_recorder(recording) as recorder:
                route = case.stream_route if mode == "stream" else case.route
                body = stream_request(case) if mode == "stream" else whole_request(case)
                got.append(await _post(recorder.base_url, route, body))
    return got[0], got[1]


async def _replay(serve: Any, out: Path, scenario: str, route: str, body: dict[str, Any], **run: Any) -> bytes:
    server = await serve(out)
    run_id, base = await new_run(server.base_url, scenario, **run)
    answer = await _post(base.removesuffix("/v1"), route, body)
    report = (await http("DELETE", f"{server.base_url}/_mockllm/runs/{run_id}"))[1]
    assert isinstance(report, dict) and report["consumed"] is True, report
    return answer


async def replay_gaps(serve: Any, tmp_path: Path, case: Case) -> tuple[int, int]:
    """How many fields of the case's streamed and whole answers a replay gets wrong."""
    out = tmp_path / case.dialect
    live_stream, live_whole = await _record(case, out)
    assert parse_stream(live_stream, case.ndjson) == case.stream  # the recorder passed it on as it came
    assert json.loads(live_whole) == case.whole
    stream = await _replay(serve, out, "stream", case.stream_route, stream_request(case))
    whole = await _replay(serve, out, "whole", case.route, whole_request(case))
    return (differing_fields(case.stream, parse_stream(stream, case.ndjson)),
            differing_fields(case.whole, json.loads(whole)))


@pytest.mark.parametrize("dialect", list(CASES))
async def test_a_replay_in_the_recorded_dialect_is_what_the_provider_sent(serve, tmp_path, dialect):
    case = CASES[dialect]
    stream, whole = await replay_gaps(serve, tmp_path, case)
    print(f"{dialect}: {stream} fields differ streamed, {whole} whole")
    assert (stream, whole) == (0, 0)


def test_the_comparison_counts_every_differing_leaf() -> None:
    assert differing_fields({"a": 1, "b": {"c": 2, "d": [1, 2]}}, {"a": 1, "b": {"c": 3, "d": [1]}, "e": None}) == 3
    assert differing_fields([(None, {"x": 1})], [(None, {"x": 1})]) == 0
    assert differing_fields(1, 1.0) == 1  # a number's type is a field's value too (created: 1 vs 1.0)


async def test_replayed_in_another_dialect_model_and_usage_carry_over(serve, tmp_path):
    case = CASES["chat"]
    out = tmp_path / "chat"
    await _record(case, out)
    body = {"model": "claude-x", "max_tokens": 100, "messages": [{"role": "user", "content": "list it"}]}
    message = json.loads(await _replay(serve, out, "stream", "/v1/messages", body))
    assert message["model"] == CHAT_MODEL
    assert message["usage"]["output_tokens"] == 57
    assert message["usage"]["cache_read_input_tokens"] == 1024
    contents = {"contents": [{"role": "user", "parts": [{"text": "list it"}]}]}
    gemini = json.loads(await _replay(serve, out, "whole", "/v1beta/models/gemini-2.5-flash:generateContent",
                                      contents))
    assert gemini["modelVersion"] == CHAT_MODEL
    usage = gemini["usageMetadata"]  # Gemini counts thoughts apart from the answer's tokens
    assert (usage["candidatesTokenCount"], usage["thoughtsTokenCount"]) == (57 - 12, 12)
    # Streamed as Anthropic: message_start counts no output yet, message_delta all of it, as the
    # provider says them (a client adding the two, LangChain's ChatAnthropic, counts 57, not 114).
    events = dict(parse_stream(await _replay(serve, out, "stream", "/v1/messages", {**body, "stream": True})))
    assert events["message_start"]["message"]["model"] == CHAT_MODEL
    assert events["message_start"]["message"]["usage"]["output_tokens"] == 0
    assert events["message_delta"]["usage"]["output_tokens"] == 57


@pytest.mark.parametrize("dialect", list(CASES))
async def test_a_record_mode_run_keeps_what_the_provider_sent(serve, tmp_path, dialect):
    """`record_mode: once` on the server records through the same forwarder: its replay is the
    provider's answer too, streamed and whole."""
    case = CASES[dialect]
    async with running_upstream() as upstream:
        kind = "application/x-ndjson" if case.ndjson else "text/event-stream"
        upstream.answers += [Answer(case.stream_pieces(), content_type=kind),
                             Answer([json.dumps(case.whole).encode()], content_type="application/json")]
        root = upstream.base_url.removesuffix("/v1")
        server = await serve(tmp_path, upstream=(upstream.base_url, f"anthropic={root}", f"gemini={root}",
                                                 f"ollama={root}"))
        for scenario, route, body in (("stream", case.stream_route, stream_request(case)),
                                      ("whole", case.route, whole_request(case))):
            run, base = await new_run(server.base_url, scenario, record_mode="once")
            await _post(base.removesuffix("/v1"), route, body)
            status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
            assert status == 200, report
    for scenario, route, body, expected in (("stream", case.stream_route, stream_request(case), case.stream),
                                            ("whole", case.route, whole_request(case), case.whole)):
        run, base = await new_run(server.base_url, scenario)
        answer = await _post(base.removesuffix("/v1"), route, body)
        got = parse_stream(answer, case.ndjson) if scenario == "stream" else json.loads(answer)
        assert differing_fields(expected, got) == 0, got


async def test_a_replayed_provider_id_is_continued_by_it(tmp_path):
    """A Responses client continues a replayed answer by the provider's id it was given
    (`previous_response_id`): the catalog names the call that id was recorded for."""
    from mockllm.replay.catalog import Catalog
    from mockllm.scenario.load import load_scenario
    from mockllm.wire import dialect_named

    case = CASES["responses"]
    await _record(case, tmp_path)
    responses = dialect_named("responses")
    assert responses is not None
    catalog = Catalog(load_scenario(tmp_path / "stream"))
    assert catalog.reply_of(responses, case.stream[0][1]["response"]["id"]) == (0, 0)
    assert catalog.reply_of(responses, "resp_mockllm_0_0") == (0, 0)  # made-up ids still read back
    assert catalog.reply_of(responses, "resp_unknown") is None


async def test_paced_the_recorded_events_keep_their_order_and_fields(serve, tmp_path):
    case = CASES["anthropic"]
    await _record(case, tmp_path)
    paced = await _replay(serve, tmp_path, "stream", case.stream_route, stream_request(case), pace="recorded",
                          speed=1000)
    assert differing_fields(case.stream, parse_stream(paced)) == 0


async def test_a_chat_client_that_asks_no_usage_gets_no_usage_chunk(serve, tmp_path):
    case = CASES["chat"]
    await _record(case, tmp_path)
    body = {**stream_request(case), "stream_options": {"include_usage": False}}
    events = parse_stream(await _replay(serve, tmp_path, "stream", case.stream_route, body))
    assert events == [e for e in case.stream if not (isinstance(e[1], dict) and e[1]["choices"] == [])]


async def test_an_edited_log_is_rendered_from_its_chunks_under_the_recorded_model(serve, tmp_path):
    case = CASES["chat"]
    await _record(case, tmp_path)
    log = tmp_path / "stream" / "session.jsonl"
    log.write_text(log.read_text().replace("Let me", "Let us"))
    events = parse_stream(await _replay(serve, tmp_path, "stream", case.stream_route, stream_request(case)))
    texts = "".join(e[1]["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e[1]["choices"])
    assert texts == "Let us look."
    assert {e[1]["model"] for e in events[:-1]} == {CHAT_MODEL}
    assert {e[1]["id"] for e in events[:-1]} == {case.stream[0][1]["id"]}
    assert "system_fingerprint" not in events[0][1], "rendered: what the chunks cannot say is not invented"


async def test_masked_recordings_keep_no_secret_in_envelopes(tmp_path):
    case = CASES["anthropic"]
    await _record(case, tmp_path, redact=("look",))
    written = (tmp_path / "stream" / "envelopes.jsonl").read_text()
    assert "look" not in written and "[REDACTED]" in written
    (line,) = [json.loads(text) for text in written.splitlines()]
    assert line["model"] == "claude-sonnet-4-5-20250929" and line["stream"][0][0] == "message_start"
    # A secret split across two deltas is masked across them in the log, but in no event on its own:
    # the line then keeps the model only.
    await _record(case, tmp_path / "split", redact=("me look",))
    written = (tmp_path / "split" / "stream" / "envelopes.jsonl").read_text()
    assert {k: v for k, v in json.loads(written).items() if k != "session"} == {
        "call": 0, "dialect": "anthropic", "model": "claude-sonnet-4-5-20250929"}
    assert " look." not in written


def test_a_broken_envelopes_line_names_its_file_and_line(tmp_path):
    from mockllm.errors import ScenarioError
    from mockllm.scenario.load import load_scenario
    from tests.logbuilder import text_call, write_sessions

    tree = write_sessions(tmp_path / "tree", {"p": [text_call("ONE")]})
    (tree / "envelopes.jsonl").write_text('{"session":"p","call":0,"dialect":"chat"}\n{"session":1}\n')
    with pytest.raises(ScenarioError) as broken:
        load_scenario(tree)
    assert "envelopes.jsonl:2" in str(broken.value)


async def test_the_official_sdks_read_the_providers_envelope_back(serve, tmp_path):
    """What the SDKs make of a replay: the provider's model, ids, fingerprint, tier and usage
    (the Anthropic SDK's final output_tokens is message_delta's 28, its input message_start's)."""
    import anthropic
    import openai

    chat, messages = CASES["chat"], CASES["anthropic"]
    await _record(chat, tmp_path / "chat")
    await _record(messages, tmp_path / "anthropic")
    server = await serve(tmp_path)
    _, base = await new_run(server.base_url, "chat/stream")
    async with openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=0) as client:
        stream = await client.chat.completions.create(**CHAT_STREAM_REQUEST)
        chunks = [chunk async for chunk in stream]
    head = chat.stream[0][1]
    assert {(c.id, c.model, c.system_fingerprint, c.service_tier, c.created) for c in chunks} == {
        (head["id"], CHAT_MODEL, head["system_fingerprint"], head["service_tier"], head["created"])}
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 57
    _, base = await new_run(server.base_url, "anthropic/stream")
    async with anthropic.AsyncAnthropic(base_url=base.removesuffix("/v1"), api_key="x", max_retries=0) as client:
        body = stream_request(messages)
        async with client.messages.stream(**{k: v for k, v in body.items() if k != "stream"}) as events:
            final = await events.get_final_message()
    start = messages.stream[0][1]["message"]
    assert (final.id, final.model) == (start["id"], start["model"])
    assert (final.usage.input_tokens, final.usage.output_tokens) == (25, 28)
    assert final.content[0].type == "thinking" and final.content[0].signature.startswith("EqQB")


def test_each_recorded_event_is_paced_with_the_chunk_it_carries() -> None:
    """`says`: an event goes with the last chunk it made (before any: at once); the events after
    the last one that made a chunk (finish, usage, `[DONE]`) go with the call's end."""
    from mockllm.scenario.envelopes import WireCall
    from mockllm.wire import dialect_named
    from mockllm.wire.recorded import says
    from mockllm.wire.reply import AT_START

    case = CASES["chat"]
    chat = dialect_named("chat")
    assert chat is not None
    decoder, chunks = chat.stream_decoder(), []
    for name, data in case.stream:
        chunks += decoder.feed(name, data.encode() if isinstance(data, str) else json.dumps(data).encode())
    chunks += decoder.close()
    sources = says(chat, WireCall("s", 0, "chat", stream=case.stream), chunks)
    assert sources is not None and len(sources) == len(case.stream)
    assert sources[0] == AT_START  # the role chunk carries no content
    assert sources[-3:] == [len(chunks) - 1] * 3  # finish_reason, usage, [DONE]
    assert sources == sorted(sources)
    assert says(chat, WireCall("s", 0, "chat", stream=case.stream[:4]), chunks) is None  # says less: not used
