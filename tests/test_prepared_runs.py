"""Runs created ahead (`Server.prepare`): the plugin creates the next test's run as the test before
it ends, so a test's setup finds its run's answer waiting. What a test gets never changes: the same
run a direct `run()` would create, no run left behind, and the same errors."""

from __future__ import annotations

from pathlib import Path

import openai  # noqa: F401  (imported once here: pytester drops what each inner run imports)
import pytest

from mockllm.api import AdminError, Server

pytest_plugins = ["pytester"]

RECORDINGS = Path(__file__).resolve().parents[1] / "recordings"


def listed(server: Server) -> list[dict[str, object]]:
    runs = server.admin("GET", f"{server.url}/_mockllm/runs")["runs"]
    return [r for r in runs if not r["default"]]


def test_a_prepared_run_is_the_run_asked_for_next_and_no_other_is_made() -> None:
    with Server(RECORDINGS) as server:
        server.prepare("tool-loop", divergence="warn")
        run = server.run("tool-loop", divergence="warn")
        assert [(r["run"], r["scenario"], r["ended"]) for r in listed(server)] == [(run.id, "tool-loop", False)]
        assert run.report().scenario == "tool-loop"


def test_a_prepared_run_asked_for_with_other_settings_is_ended_and_a_new_one_made() -> None:
    with Server(RECORDINGS) as server:
        server.prepare("tool-loop")
        run = server.run("tool-loop", divergence="warn")
        runs = listed(server)
        assert len(runs) == 2
        assert [r["ended"] for r in runs if r["run"] != run.id] == [True]
        assert [r["ended"] for r in runs if r["run"] == run.id] == [False]


def test_a_prepared_run_of_an_unknown_scenario_raises_as_run_does() -> None:
    with Server(RECORDINGS) as server:
        with pytest.raises(AdminError) as direct:
            server.run("no-such-scenario")
        server.prepare("no-such-scenario")
        with pytest.raises(AdminError) as prepared:
            server.run("no-such-scenario")
        assert str(prepared.value) == str(direct.value)
        assert server.run("tool-loop").scenario == "tool-loop"  # the connection still serves


def test_other_admin_calls_between_prepare_and_run_keep_its_answer() -> None:
    with Server(RECORDINGS) as server:
        server.prepare("fork-child")
        before = listed(server)  # an admin call while the answer is owed: the run exists already
        run = server.run("fork-child")
        assert [r["run"] for r in before] == [r["run"] for r in listed(server)] == [run.id]


def test_a_run_prepared_behind_the_next_call_is_made_by_it_or_by_run() -> None:
    with Server(RECORDINGS) as server:
        server.prepare("fork-child", behind_next_call=True)
        assert listed(server) == [], "the listing went first, the run's creation behind it"
        run = server.run("fork-child")
        assert [r["run"] for r in listed(server)] == [run.id]
        run.end()
        server.prepare("tool-loop", behind_next_call=True, divergence="warn")
        taken = server.run("tool-loop", divergence="warn")  # no call came between: it goes alone
        assert [r["run"] for r in listed(server) if not r["ended"]] == [taken.id]
        assert taken.report().scenario == "tool-loop"


def test_a_run_prepared_and_never_taken_is_ended_by_stop() -> None:
    ended: list[str] = []
    with Server(RECORDINGS) as server:
        server.prepare("tool-loop")
        admin = server.admin

        def noting(method: str, url: str, body: dict[str, object] | None = None) -> dict[str, object]:
            answer = admin(method, url, body)
            if method == "DELETE":
                ended.append(str(answer["run"]))
            return answer

        server.admin = noting  # type: ignore[method-assign]
    assert len(ended) == 1


def test_the_plugin_creates_each_next_tests_run_ahead_and_leaves_none(pytester: pytest.Pytester) -> None:
    pytester.makeini("\n".join(["[pytest]", "addopts = --strict-markers -p no:asyncio",
                                f"mockllm_recordings = {RECORDINGS}", "mockllm_divergence = warn", ""]))
    pytester.makepyfile('''
import json
import openai
import pytest

USER = [{"role": "user", "content": "go"}]
RUNS = []

def call(run):
    with openai.OpenAI(base_url=run.base_url, api_key="unused", max_retries=0,
                       default_headers=run.headers("agent")) as c:
        return c.chat.completions.create(model="m", messages=USER)

@pytest.mark.mockllm("tool-loop", consume=False)
def test_a(mockllm_run):
    call(mockllm_run); RUNS.append(mockllm_run.id)

@pytest.mark.mockllm("fork-child", consume=False)
def test_b(mockllm_run):
    RUNS.append(mockllm_run.id)

@pytest.mark.mockllm("tool-loop", consume=False, divergence="warn")
def test_c(mockllm_run):
    call(mockllm_run); RUNS.append(mockllm_run.id)

def test_d_without_mockllm():
    pass

@pytest.mark.mockllm("tool-loop", consume=False)
def test_e(mockllm_run, mockllm_server):
    RUNS.append(mockllm_run.id)
    runs = [r for r in mockllm_server.admin("GET", mockllm_server.url + "/_mockllm/runs")["runs"] if not r["default"]]
    # every run made so far is one a test asked for: test_d's neighbour made none ahead for it
    assert sorted(r["run"] for r in runs) == sorted(RUNS)
    assert [r["run"] for r in runs if not r["ended"]] == [mockllm_run.id]
    assert len(set(RUNS)) == 4
''')
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=5)
