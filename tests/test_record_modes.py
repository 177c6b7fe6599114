"""Record modes on the server, through the official SDKs: `once`, `rewrite`, `new_episodes` and
`none`, against a scripted upstream that knows nothing of mockllm (tests/scripted_upstream.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

import mockllm
from mockllm.cli.validate import check_suite
from mockllm.options import parse_upstream
from mockllm.record.recording import Upstreams, host_of
from mockllm.server.app import SERVER_KEY
from mockllm.wire import DIALECTS
from tests.fake_upstream import Answer, chat_chunk, running_upstream
from tests.scripted_upstream import ScriptedUpstream

KEY = "sk-live-do-not-record-0123456789"
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as up:
        yield up


def chat(run: mockllm.Run, texts: list[str], session: str = "agent") -> list[str]:
    """A conversation of one user message per text, streamed; the answers' texts."""
    with openai.OpenAI(base_url=run.base_url, api_key=KEY, max_retries=0,
                       default_headers=run.headers(session)) as client:
        messages: list[Any] = []
        answers = []
        for text in texts:
            messages.append({"role": "user", "content": text})
            stream = client.chat.completions.create(model="m", messages=messages, stream=True,
                                                    stream_options={"include_usage": True})
            answer = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            messages.append({"role": "assistant", "content": answer})
            answers.append(answer)
        return answers


def tool_loop(run: mockllm.Run, result: str = "3") -> str:
    """One tool call, its result sent back, the final answer (streamed)."""
    with openai.OpenAI(base_url=run.base_url, api_key=KEY, max_retries=0) as client:
        messages: list[Any] = [{"role": "user", "content": 'CALL add {"a": 1, "b": 2}'}]
        first = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)  # type: ignore[arg-type]
        call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
        messages += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": result}]
        stream = client.chat.completions.create(model="m", messages=messages, tools=TOOLS,  # type: ignore[arg-type]
                                                stream=True)
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_once_records_a_missing_scenario_then_replays_it_with_the_upstream_gone(upstream, tmp_path):
    recordings = tmp_path / "recordings"  # created on first record
    with mockllm.Server(recordings, upstream=upstream.url, record_mode="once") as server:
        with server.run("test_agent/test_tool_loop") as run:
            assert tool_loop(run) == "got: 3"
        recording = run.end().recording
        assert recording is not None and recording.written, recording
        assert recording.mode == "once" and recording.live_calls == 2
        scenario = recordings / "test_agent" / "test_tool_loop"
        assert sorted(files(scenario)) == ["envelopes.jsonl", "mockllm.json", "session.jsonl"]
        stamp = json.loads((scenario / "mockllm.json").read_text())["recorded"]
        assert stamp["mode"] == "once" and stamp["by"] == f"mockllm {mockllm_version()}"
        assert stamp["upstream"] == host_of(upstream.url) and "http" not in stamp["upstream"]
        assert not [p for p in recordings.rglob("*") if p.name.startswith(".")], "no staging folder is left"
        assert upstream.received[0]["headers"]["authorization"] == f"Bearer {KEY}", "the agent's key is forwarded"
        upstream.stop()
        for mode in ("once", "none"):  # a recorded scenario replays, offline
            with server.run("test_agent/test_tool_loop", record_mode=mode) as run:
                assert tool_loop(run) == "got: 3"
                run.assert_consumed()
            assert run.end().recording is None
    assert not any(KEY.encode() in data for data in files(recordings).values()), "no key in any recorded byte"


def mockllm_version() -> str:
    from mockllm.record.recording import mockllm_version as version

    return version()


def test_none_refuses_a_scenario_with_no_recording_and_names_how_to_record_it(upstream, tmp_path):
    with mockllm.Server(tmp_path, upstream=upstream.url) as server, pytest.raises(mockllm.AdminError) as refused:
        server.run("missing")
    assert refused.value.status == 404
    assert "no recording" in refused.value.message and '"record_mode": "once"' in refused.value.message
    assert "--mockllm-record-mode once" in refused.value.message
    assert upstream.received == [], "replay only: the upstream is never contacted"


def test_a_record_mode_needs_an_upstream(tmp_path):
    (tmp_path / "recordings").mkdir()
    with mockllm.Server(tmp_path / "recordings", record_mode="once") as server, \
            pytest.raises(mockllm.AdminError) as refused:
        server.run("new")
    assert refused.value.status == 400
    assert f"mockllm serve {tmp_path / 'recordings'} --upstream https://api.openai.com/v1 --record-mode once" \
        in refused.value.message


def test_rewrite_records_every_run_anew_and_replaces_the_scenario(upstream, tmp_path):
    with mockllm.Server(tmp_path, upstream=upstream.url) as server:
        with server.run("case", record_mode="once") as run:
            assert chat(run, ["first version"]) == ["echo: first version"]
        with server.run("case", record_mode="rewrite") as run:
            assert chat(run, ["second version", "more"]) == ["echo: second version", "echo: more"]
        assert run.end().recording.written  # type: ignore[union-attr]
        upstream.stop()
        with server.run("case") as run:
            assert chat(run, ["second version", "more"]) == ["echo: second version", "echo: more"]
            run.assert_consumed()


def test_new_episodes_continues_a_session_past_its_end_and_adds_a_new_one(upstream, tmp_path):
    with mockllm.Server(tmp_path, upstream=upstream.url) as server:
        with server.run("case", record_mode="once") as run:
            chat(run, ["one", "two"], "agent")
            chat(run, ["side"], "other")
        before = files(tmp_path / "case")
        calls_before = len(upstream.received)
        with server.run("case", record_mode="new_episodes") as run:
            assert chat(run, ["one", "two", "three"], "agent") == ["echo: one", "echo: two", "echo: three"]
            assert chat(run, ["side"], "other") == ["echo: side"]
            assert chat(run, ["helping"], "helper") == ["echo: helping"]
            run.assert_consumed()
        report = run.end()
        assert len(upstream.received) == calls_before + 2, "only what the recording cannot serve goes upstream"
        assert [(w.session, w.live_id, w.call, w.code) for w in report.went_live] == [
            ("session.jsonl", "agent", 2, "script_exhausted"), (None, "helper", 0, "unrecorded_session")]
        assert "went live" in report.describe() and "rewrote" in report.describe()
        after = files(tmp_path / "case")
        assert after["session.1.jsonl"] == before["session.1.jsonl"], "an untouched session stays byte for byte"
        kept = before["session.jsonl"].split(b"\n")
        assert after["session.jsonl"].split(b"\n")[: len(kept) - 4] == kept[:-4], "recorded calls kept as they were"
        header = json.loads(after["session.2.jsonl"].split(b"\n")[0])
        assert header["id"] == "helper" and header["parentSession"] == "agent"
        # What the provider sent is kept for the new calls too, after the recorded ones' (envelopes.jsonl).
        wires = [json.loads(line) for line in after["envelopes.jsonl"].splitlines()]
        assert [(w["session"], w["call"]) for w in wires] == [("agent", 0), ("agent", 1), ("other", 0),
                                                              ("agent", 2), ("helper", 0)]
        assert after["envelopes.jsonl"].startswith(before["envelopes.jsonl"])
        assert [str(d) for d in check_suite(mockllm.load_suite(tmp_path, keep_logs=True))] == [], "mockllm check"
        upstream.stop()
        with server.run("case") as run:
            assert chat(run, ["one", "two", "three"], "agent") == ["echo: one", "echo: two", "echo: three"]
            assert chat(run, ["side"], "other") == ["echo: side"]
            assert chat(run, ["helping"], "helper") == ["echo: helping"]
            run.assert_consumed()


def test_new_episodes_takes_a_diverged_call_live_and_reports_the_divergence(upstream, tmp_path):
    with mockllm.Server(tmp_path, upstream=upstream.url) as server:
        with server.run("case", record_mode="once") as run:
            chat(run, ["one", "two"])
        with server.run("case", record_mode="new_episodes") as run:
            assert chat(run, ["one", "changed"]) == ["echo: one", "echo: changed"]
        report = run.end()
        [went] = report.went_live
        assert (went.session, went.call, went.code) == ("session.jsonl", 1, "request_diverged")
        assert "changed" in went.why and "two" in went.why
        assert report.problems() == [], "under new_episodes a divergence is what gets recorded, not a failure"
        upstream.stop()
        with server.run("case") as run:
            assert chat(run, ["one", "changed"]) == ["echo: one", "echo: changed"]
            run.assert_consumed()


def test_new_episodes_continues_a_tool_loop_from_the_step_whose_tool_result_changed(upstream, tmp_path):
    with mockllm.Server(tmp_path, upstream=upstream.url) as server:
        with server.run("loop", record_mode="once") as run:
            assert tool_loop(run, "3") == "got: 3"
        with server.run("loop", record_mode="new_episodes") as run:
            assert tool_loop(run, "4") == "got: 4"
        [went] = run.end().went_live
        assert (went.call, went.code) == (1, "request_diverged") and "the tool result" in went.why
        upstream.stop()
        with server.run("loop") as run:
            assert tool_loop(run, "4") == "got: 4"
            run.assert_consumed()
    assert mockllm.load_scenario(tmp_path / "loop").primary.entries[0] is not None
    events = [json.loads(line)["type"] for line in (tmp_path / "loop" / "session.jsonl").read_text().splitlines()[1:]]
    assert events.count("turn/start") == events.count("turn/end") == 1, "one turn, its two steps continued"
    assert events.count("step/start") == events.count("step/end") == 2


@pytest.mark.parametrize("mode", ["once", "new_episodes"])
def test_a_run_with_upstream_failures_writes_nothing_and_says_so(upstream, tmp_path, mode):
    with mockllm.Server(tmp_path, upstream=upstream.url) as server:
        if mode == "new_episodes":
            with server.run("case", record_mode="once") as run:
                chat(run, ["one"])
        before = files(tmp_path)
        with server.run("case", record_mode=mode) as run:
            chat(run, ["one"])
            with pytest.raises(openai.InternalServerError):
                chat(run, ["one", "FAIL 503"])
        report = run.end(discard=None)
        assert report.recording is not None and not report.recording.written
        assert "failures" in report.recording.message and "503" in report.recording.message
        assert [f.code for f in report.failures] == ["upstream_failed"]
    assert files(tmp_path) == before, "nothing is written"


def test_an_unreachable_upstream_fails_the_call_and_writes_nothing(tmp_path):
    with ScriptedUpstream() as gone:
        url = gone.url
    with mockllm.Server(tmp_path / "recordings", upstream=url, record_mode="once") as server:
        with server.run("case") as run, pytest.raises(openai.InternalServerError) as failed:
            chat(run, ["hello"])
        assert failed.value.status_code == 502 and "cannot reach the upstream" in failed.value.message
        assert not run.end().recording.written  # type: ignore[union-attr]
    assert not (tmp_path / "recordings").exists(), "a first recording that failed leaves no folder behind"


def test_a_run_whose_block_raised_records_nothing(upstream, tmp_path):
    with mockllm.Server(tmp_path, upstream=upstream.url, record_mode="once") as server:
        with pytest.raises(RuntimeError), server.run("case") as run:
            chat(run, ["one"])
            raise RuntimeError("the test failed")
        recording = run.end().recording
        assert recording is not None and not recording.written and "RuntimeError" in recording.message
    assert not (tmp_path / "case").exists()


def test_an_anthropic_stream_is_recorded_and_replayed(upstream, tmp_path):
    def ask(run: mockllm.Run) -> list[str]:
        with anthropic.Anthropic(base_url=run.anthropic_base_url, api_key=KEY, max_retries=0) as client, \
                client.messages.stream(model="claude", max_tokens=64,
                                       messages=[{"role": "user", "content": "hello there"}]) as stream:
            return [*stream.text_stream, stream.get_final_message().stop_reason or ""]

    # Only Anthropic's calls have an upstream of their own; the default one would fail them.
    with mockllm.Server(tmp_path, upstream=["http://127.0.0.1:9/v1", f"anthropic={upstream.url.removesuffix('/v1')}"],
                        record_mode="once") as server:
        with server.run("claude") as run:
            live = ask(run)
        assert "".join(live[:-1]) == "echo: hello there" and live[-1] == "end_turn"
        assert run.end().recording.written  # type: ignore[union-attr]
        assert KEY in " ".join(upstream.received[0]["headers"].values()), "the agent's key is forwarded"
        upstream.stop()
        with server.run("claude", record_mode="none") as run:
            assert ask(run) == live, "the same fragments, the same stop reason"
            run.assert_consumed()


def test_a_responses_stream_is_recorded_and_replayed(upstream, tmp_path):
    def ask(run: mockllm.Run) -> str:
        with openai.OpenAI(base_url=run.base_url, api_key=KEY, max_retries=0) as client:
            stream = client.responses.create(model="m", input="what now", stream=True)
            return "".join(e.delta for e in stream if e.type == "response.output_text.delta")

    with mockllm.Server(tmp_path, upstream=upstream.url, record_mode="once") as server:
        with server.run("responses") as run:
            assert ask(run) == "echo: what now"
        assert run.end().recording.written  # type: ignore[union-attr]
        upstream.stop()
        with server.run("responses") as run:
            assert ask(run) == "echo: what now"
            run.assert_consumed()


def test_a_scenario_one_level_down_is_served_at_its_path(upstream, tmp_path):
    with mockllm.Server(tmp_path, upstream=upstream.url, record_mode="once") as server:
        with server.run("group/case") as run:
            chat(run, ["hi"])
        with openai.OpenAI(base_url=f"{server.url}/scenarios/group/case/v1", api_key="x", max_retries=0,
                           default_headers={"x-mockllm-session": "agent"}) as client:
            answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content == "echo: hi"
    assert mockllm.load_suite(tmp_path).scenarios.keys() == {"group/case"}


@pytest.mark.parametrize(("specs", "dialect", "base"), [
    (["https://api.openai.com/v1"], "chat", "https://api.openai.com/v1"),
    (["https://api.openai.com/v1"], "anthropic", "https://api.openai.com/v1"),
    (["https://api.openai.com/v1", "anthropic=https://api.anthropic.com"], "anthropic", "https://api.anthropic.com/v1"),
    (["anthropic=https://proxy.example/anthropic/v1/"], "anthropic", "https://proxy.example/anthropic/v1"),
    (["anthropic=https://api.anthropic.com"], "chat", None),
    (["openai=https://api.openai.com/v1"], "responses", "https://api.openai.com/v1"),
], ids=["default", "default-for-all", "anthropic-base-gets-v1", "anthropic-v1-kept", "no-default", "openai-named"])
def test_upstreams_give_each_dialect_its_providers_base(specs, dialect, base):
    by_name = {d.name: d for d in DIALECTS}
    assert Upstreams(tuple(specs)).base_for(by_name[dialect]) == base


@pytest.mark.parametrize("spec", ["gemini", "nope=https://x", "ftp://host/v1"])
def test_a_bad_upstream_is_refused_naming_it(spec):
    with pytest.raises(ValueError, match="upstream"):
        parse_upstream(spec)


def test_a_recorded_upstream_keeps_no_credentials_path_or_query():
    assert host_of("https://user:sk-secret@api.example.com:8443/v1?key=sk-2") == "api.example.com:8443"


async def test_a_live_call_passes_each_upstream_piece_on_before_the_next_exists_and_decodes_nothing_meanwhile(
        tmp_path):
    """A live call is on the client's path: each piece goes on as it arrives (the upstream holds the
    next until the client has read it), and the recording is decoded only when the run ends."""
    pieces = [chat_chunk({"role": "assistant", "content": ""}), chat_chunk({"content": "Hel"}),
              chat_chunk({"content": "lo"}), chat_chunk({}, "stop"), b"data: [DONE]\n\n"]
    released = asyncio.Event()
    body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    async with running_upstream() as fake, \
            mockllm.AsyncServer(tmp_path, upstream=fake.base_url, record_mode="once") as server:
        fake.answers.append(Answer(pieces, before={2: released}))
        run = await server.run("case")
        async with aiohttp.ClientSession() as http, \
                http.post(run.base_url + "/chat/completions", data=body,
                          headers={"Content-Type": "application/json"}) as response:
            received = await asyncio.wait_for(response.content.readuntil(b"\n\n"), 5)
            received += await asyncio.wait_for(response.content.readuntil(b"\n\n"), 5)
            assert received == b"".join(pieces[:2]), "both pieces came before the upstream sent the third"
            released.set()
            received += await response.content.read()
        assert received == b"".join(pieces), "byte for byte"
        recording = server._server.runner.app[SERVER_KEY].live.recordings[run.id]  # type: ignore[union-attr]
        assert not recording.tree.sessions, "nothing is decoded while the run goes on"
        report = await run.end()
    assert report.recording is not None and report.recording.written
    assert [len(s.entries) for s in mockllm.load_scenario(tmp_path / "case").sessions] == [1]



def test_serve_takes_record_mode_and_upstream_flags(tmp_path):
    from mockllm.cli.main import _parser
    from mockllm.options import from_arguments

    args = _parser().parse_args(["serve", str(tmp_path), "--record-mode", "new_episodes", "--upstream",
                                 "http://127.0.0.1:1/v1", "--upstream", "anthropic=http://127.0.0.1:2"])
    options = from_arguments(args)
    assert options.record_mode == "new_episodes"
    assert options.upstream == ("http://127.0.0.1:1/v1", "anthropic=http://127.0.0.1:2")
    with pytest.raises(SystemExit):
        _parser().parse_args(["serve", "--record-mode", "sometimes"])
