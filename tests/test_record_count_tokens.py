"""Anthropic's `count_tokens`, recorded: by `mockllm record` and by the server's record modes, through
the official SDK against a scripted upstream that knows nothing of mockllm, then replayed offline
(tests/scripted_upstream.py counts every text's length)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

import mockllm
from mockllm.dsh.names import COUNT_TOKENS_FILE
from mockllm.record.command import RecordOptions, start_recorder
from tests.conftest import new_run
from tests.scripted_upstream import ScriptedUpstream, counted_tokens

KEY = "sk-ant-do-not-record-0123456789"
ASKED = {"model": "claude", "system": "You count.", "messages": [{"role": "user", "content": "How long is this?"}]}
OTHER = {"model": "claude", "messages": [{"role": "user", "content": "and this one, how long?"}]}


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as up:
        yield up


def counts_in(folder: Path) -> list[dict[str, Any]]:
    return json.loads((folder / COUNT_TOKENS_FILE).read_text())  # type: ignore[no-any-return]


def no_key_in(folder: Path) -> None:
    assert not [p for p in folder.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()], "no key written"


def count_requests(upstream: ScriptedUpstream) -> list[dict[str, Any]]:
    return [json.loads(r["body"]) for r in upstream.received if r["path"].endswith("/count_tokens")]


async def test_mockllm_record_keeps_each_count_once_as_it_goes_and_a_replay_answers_it_offline(
        upstream, serve, tmp_path):
    out = tmp_path / "counted"
    async with await start_recorder(RecordOptions(upstream.url, out, port=0)) as recorder, \
            anthropic.AsyncAnthropic(base_url=recorder.base_url, api_key=KEY, max_retries=0) as client:
        async with client.messages.stream(max_tokens=64, **ASKED) as stream:  # type: ignore[arg-type]
            assert await stream.get_final_text() == "echo: How long is this?"
        for _ in range(2):  # asked twice: forwarded twice, recorded once
            counted = await client.messages.count_tokens(**ASKED)  # type: ignore[arg-type]
            assert counted.input_tokens == counted_tokens(ASKED)
        await recorder.tree.flushed()
        assert [c["request"] for c in counts_in(out)] == [ASKED], "on disk as soon as it is counted"
        assert (await client.messages.count_tokens(**OTHER)).input_tokens == counted_tokens(OTHER)  # type: ignore[arg-type]
    assert len(count_requests(upstream)) == 3
    assert KEY in " ".join(upstream.received[-1]["headers"].values()), "the key is forwarded"
    assert counts_in(out) == [{"request": ASKED, "response": {"input_tokens": counted_tokens(ASKED)}},
                              {"request": OTHER, "response": {"input_tokens": counted_tokens(OTHER)}}]
    no_key_in(out)
    upstream.stop()
    server = await serve(out)
    _, base = await new_run(server.base_url, out.name)
    async with anthropic.AsyncAnthropic(base_url=base.removesuffix("/v1"), api_key="x", max_retries=0) as client:
        assert (await client.messages.count_tokens(**OTHER)).input_tokens == counted_tokens(OTHER)  # type: ignore[arg-type]
        assert (await client.messages.count_tokens(**ASKED)).input_tokens == counted_tokens(ASKED)  # type: ignore[arg-type]
        with pytest.raises(anthropic.NotFoundError) as unrecorded:
            await client.messages.count_tokens(model="claude", messages=[{"role": "user", "content": "new"}])
    assert unrecorded.value.body["error"]["code"] == "unrecorded_count_tokens"  # type: ignore[index]


async def test_a_count_the_upstream_refused_is_passed_back_and_not_recorded(serve, tmp_path):
    with ScriptedUpstream() as gone:
        url = gone.url
    out = tmp_path / "refused"
    async with await start_recorder(RecordOptions(url, out, port=0)) as recorder, \
            anthropic.AsyncAnthropic(base_url=recorder.base_url, api_key=KEY, max_retries=0) as client:
        with pytest.raises(anthropic.InternalServerError) as failed:
            await client.messages.count_tokens(**ASKED)  # type: ignore[arg-type]
    assert failed.value.status_code == 502
    assert not (out / COUNT_TOKENS_FILE).exists()


def ask(run: mockllm.Run, api_key: str = KEY) -> tuple[str, int, int]:
    """One model call and two counts, through the Anthropic SDK: the answer and both counts."""
    with anthropic.Anthropic(base_url=run.anthropic_base_url, api_key=api_key, max_retries=0) as client:
        with client.messages.stream(max_tokens=64, **ASKED) as stream:  # type: ignore[arg-type]
            text = stream.get_final_text()
        return (text, client.messages.count_tokens(**ASKED).input_tokens,  # type: ignore[arg-type]
                client.messages.count_tokens(**OTHER).input_tokens)  # type: ignore[arg-type]


def converse(client: anthropic.Anthropic, request: dict[str, Any]) -> str:
    with client.messages.stream(max_tokens=64, **request) as stream:
        return stream.get_final_text()


def anthropic_server(path: Path, upstream: ScriptedUpstream, **options: Any) -> mockllm.Server:
    return mockllm.Server(path, upstream=f"anthropic={upstream.url.removesuffix('/v1')}", **options)


def test_once_records_the_counts_and_replays_them_with_the_upstream_gone(upstream, tmp_path):
    expected = ("echo: How long is this?", counted_tokens(ASKED), counted_tokens(OTHER))
    with anthropic_server(tmp_path, upstream, record_mode="once") as server:
        with server.run("counted") as run:
            assert ask(run) == expected
        recording = run.end().recording
        assert recording is not None and recording.written and recording.live_calls == 1, recording
        assert [c["request"] for c in counts_in(tmp_path / "counted")] == [ASKED, OTHER]
        no_key_in(tmp_path)
        upstream.stop()
        with server.run("counted", record_mode="none") as run:
            assert ask(run, "x") == expected
            with anthropic.Anthropic(base_url=run.anthropic_base_url, api_key="x", max_retries=0) as client, \
                    pytest.raises(anthropic.NotFoundError) as unrecorded:
                client.messages.count_tokens(model="claude", messages=[{"role": "user", "content": "new"}])
            run.assert_consumed()
        assert unrecorded.value.body["type"] == "error"  # type: ignore[index]
        assert unrecorded.value.body["error"]["code"] == "unrecorded_count_tokens"  # type: ignore[index]


def test_new_episodes_replays_the_counts_it_has_and_adds_the_ones_it_lacks(upstream, tmp_path):
    with anthropic_server(tmp_path, upstream) as server:
        with server.run("counted", record_mode="once") as run, \
                anthropic.Anthropic(base_url=run.anthropic_base_url, api_key=KEY, max_retries=0) as client:
            converse(client, ASKED)
            client.messages.count_tokens(**ASKED)  # type: ignore[arg-type]
        assert len(count_requests(upstream)) == 1
        with server.run("counted", record_mode="new_episodes") as run:
            assert ask(run)[1:] == (counted_tokens(ASKED), counted_tokens(OTHER))
        report = run.end()
        assert report.recording is not None and report.recording.written, report.recording
        assert "count_tokens" in report.recording.message
        assert count_requests(upstream) == [ASKED, OTHER], "the count it had was replayed, the other went upstream"
        assert [c["request"] for c in counts_in(tmp_path / "counted")] == [ASKED, OTHER], "old pairs, then new"
        no_key_in(tmp_path)
        upstream.stop()
        with server.run("counted") as run:
            assert ask(run, "x") == ("echo: How long is this?", counted_tokens(ASKED), counted_tokens(OTHER))
            run.assert_consumed()


def test_rewrite_asks_the_upstream_again_and_keeps_only_what_it_counted(upstream, tmp_path):
    with anthropic_server(tmp_path, upstream) as server:
        with server.run("counted", record_mode="once") as run:
            ask(run)
        with server.run("counted", record_mode="rewrite") as run, \
                anthropic.Anthropic(base_url=run.anthropic_base_url, api_key=KEY, max_retries=0) as client:
            converse(client, ASKED)
            client.messages.count_tokens(**OTHER)  # type: ignore[arg-type]
        assert run.end().recording.written  # type: ignore[union-attr]
        assert count_requests(upstream) == [ASKED, OTHER, OTHER], "a run recording from scratch replays no count"
        assert [c["request"] for c in counts_in(tmp_path / "counted")] == [OTHER]


def test_a_count_recorded_under_a_cwd_is_found_from_another_folder(upstream, tmp_path):
    def request(cwd: str) -> dict[str, Any]:
        return {"model": "claude", "system": f"You work in {cwd}.", "messages": ASKED["messages"]}

    with anthropic_server(tmp_path / "recordings", upstream, record_mode="once") as server:
        with server.run("cwd", cwd="/home/a/project") as run, \
                anthropic.Anthropic(base_url=run.anthropic_base_url, api_key=KEY, max_retries=0) as client:
            converse(client, request("/home/a/project"))
            recorded = client.messages.count_tokens(**request("/home/a/project")).input_tokens  # type: ignore[arg-type]
        assert counts_in(tmp_path / "recordings" / "cwd")[0]["request"]["system"] == "You work in {{cwd}}."
        upstream.stop()
        with server.run("cwd", cwd="/tmp/other") as run, \
                anthropic.Anthropic(base_url=run.anthropic_base_url, api_key="x", max_retries=0) as client:
            assert client.messages.count_tokens(**request("/tmp/other")).input_tokens == recorded  # type: ignore[arg-type]
