"""Under pytest-xdist the workers share one server, started by the controller (mockllm.shared_server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

RECORDINGS = Path(__file__).resolve().parents[1] / "recordings"

TESTS = '''
import json, os
import openai
import pytest

def note(run, server):
    with open(os.environ["SEEN"], "a") as seen:
        seen.write(json.dumps({"url": server.url, "worker": os.environ.get("PYTEST_XDIST_WORKER"),
                               "run": run.id}) + "\\n")

def call(run):
    with openai.OpenAI(base_url=run.base_url, api_key="unused", max_retries=0,
                       default_headers=run.headers("agent")) as c:
        return c.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}])
''' + "".join(f'''
@pytest.mark.mockllm("tool-loop", consume=False)
def test_{n}(mockllm_run, mockllm_server):
    assert call(mockllm_run).choices[0].finish_reason == "tool_calls"
    note(mockllm_run, mockllm_server)
''' for n in range(8))


def project(pytester: pytest.Pytester, *ini: str, recordings: Path = RECORDINGS) -> None:
    pytester.makeini("\n".join(["[pytest]", "addopts = -p no:asyncio -p no:randomly",
                                f"mockllm_recordings = {recordings}", "mockllm_divergence = warn", *ini, ""]))
    pytester.makepyfile(TESTS)


def seen(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_worker_runs_its_tests_on_the_one_server_the_controller_started(pytester, monkeypatch):
    project(pytester)
    monkeypatch.setenv("SEEN", str(pytester.path / "seen.jsonl"))
    result = pytester.runpytest_subprocess("-n", "2")
    result.assert_outcomes(passed=8)
    lines = seen(pytester.path / "seen.jsonl")
    assert len({line["url"] for line in lines}) == 1, "one server for every worker"
    assert {line["worker"] for line in lines} <= {"gw0", "gw1"} and len({line["run"] for line in lines}) == 8


def test_thread_mode_keeps_a_server_per_worker(pytester, monkeypatch):
    project(pytester, "mockllm_server_mode = thread")
    monkeypatch.setenv("SEEN", str(pytester.path / "seen.jsonl"))
    result = pytester.runpytest_subprocess("-n", "2")
    result.assert_outcomes(passed=8)
    lines = seen(pytester.path / "seen.jsonl")
    by_worker = {line["worker"]: line["url"] for line in lines}
    assert len(set(by_worker.values())) == len(by_worker), "each worker its own"


def test_a_shared_server_that_cannot_start_fails_the_tests_and_the_summary_says_why(pytester, monkeypatch):
    empty = pytester.mkdir("empty-recordings")  # nothing to serve: the server process refuses to start
    project(pytester, recordings=empty)
    monkeypatch.setenv("SEEN", str(pytester.path / "seen.jsonl"))
    result = pytester.runpytest_subprocess("-n", "2")
    assert result.ret != 0
    out = result.stdout.str() + result.stderr.str()
    assert "the server shared by xdist's workers did not start" in out, out
    assert "neither a scenario nor a suite of scenarios" in out, out
    assert "shared by xdist's workers at http://127.0.0.1:" in out, out


def test_a_worker_server_that_cannot_start_fails_each_test_without_breaking_xdist(pytester, monkeypatch):
    empty = pytester.mkdir("empty-recordings")
    project(pytester, "mockllm_server_mode = thread", recordings=empty)
    monkeypatch.setenv("SEEN", str(pytester.path / "seen.jsonl"))
    result = pytester.runpytest_subprocess("-n", "2")
    out = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in out, out
    result.assert_outcomes(errors=8)
    assert "did not start" in out and "neither a scenario nor a suite of scenarios" in out, out
