"""`mockllm record` as a user runs it: a process on a free port that finishes the tree on SIGINT."""

from __future__ import annotations

import asyncio
import signal
import sys

import openai

from mockllm.cli.main import main
from mockllm.cli.validate import check_suite
from mockllm.record.command import RecordOptions
from mockllm.scenario.load import load_suite
from tests.conftest import new_run
from tests.logbuilder import ROOT, corpus_or_skip


async def test_record_verb_prints_its_base_url_and_finishes_the_tree_on_sigint(serve, tmp_path):
    scenario_dir = corpus_or_skip() / "v0-unpacked" / "acp-agent--text-turn"
    upstream = await serve(scenario_dir)
    _, upstream_base = await new_run(upstream.base_url, scenario_dir.name)
    out = tmp_path / "mine"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mockllm.cli", "record", "--upstream", upstream_base, "--out", str(out),
        "--port", "0", "--pack", cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        assert process.stdout is not None
        banner = (await asyncio.wait_for(process.stdout.readline(), 20)).decode()
        assert "forwarding to " + upstream_base in banner
        base_url = (await process.stdout.readline()).decode().strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        async with openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0) as client:
            stream = await client.chat.completions.create(model="m", stream=True,
                                                          messages=[{"role": "user", "content": "hello"}])
            assert [c async for c in stream]
        process.send_signal(signal.SIGINT)
        rest, errors = await asyncio.wait_for(process.communicate(), 20)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, errors
    assert "recorded session.jsonl" in rest.decode()
    suite = load_suite(out, keep_logs=True)
    assert [len(s.entries) for s in suite.scenarios["mine"].sessions] == [1]
    assert check_suite(suite) == []


async def test_record_refuses_a_folder_that_already_holds_a_recording(tmp_path):
    (tmp_path / "session.jsonl").write_text("")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mockllm.cli", "record", "--upstream", "http://127.0.0.1:9/v1", "--out", str(tmp_path),
        "--port", "0", cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, errors = await asyncio.wait_for(process.communicate(), 20)
    assert process.returncode == 2
    assert "already holds a recording" in errors.decode()



def test_record_takes_session_header_as_serve_does(monkeypatch):
    """`--session-header NAME` (repeatable) reaches the recorder, which reads it as replay does
    (test_record_proxy: a configured header names the session)."""
    given: list[RecordOptions] = []
    monkeypatch.setattr("mockllm.record.command.record_forever", lambda options: given.append(options) or 0)
    assert main(["record", "--upstream", "http://127.0.0.1:9/v1", "--out", "out", "--session-header", "X-Agent-Id",
                 "--session-header", "x-team"]) == 0
    assert given[0].session_headers == ("X-Agent-Id", "x-team")


def test_record_takes_side_routes_and_the_agents_folder(monkeypatch):
    """`--side-route MODEL` (repeatable; a model, not serve's MODEL=FILE: record writes the file) and
    `--cwd DIR` (written as {{cwd}}) reach the recorder (test_record_lineage: what it does with them)."""
    given: list[RecordOptions] = []
    monkeypatch.setattr("mockllm.record.command.record_forever", lambda options: given.append(options) or 0)
    assert main(["record", "--upstream", "http://127.0.0.1:9/v1", "--out", "out", "--side-route", "claude-haiku-4-5",
                 "--side-route", "warmup", "--cwd", "/home/dev/app"]) == 0
    assert (given[0].side_routes, given[0].cwd) == (("claude-haiku-4-5", "warmup"), "/home/dev/app")
