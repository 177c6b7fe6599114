"""Where the plugin's server runs: a process beside the test process (the default), or a thread in it
(`--mockllm-server-mode thread`, ini `mockllm_server_mode`). The fixtures behave the same either way."""

from __future__ import annotations

import shutil

import openai  # noqa: F401  (imported once here: pytester drops what each inner run imports)
import pytest

import mockllm.api  # noqa: F401  (likewise)
from tests.server_children import threads_started
from tests.test_plugin import PRELUDE, RECORDINGS, make_ini

pytest_plugins = ["pytester"]

SUITE = PRELUDE + '''
import os
import threading

@pytest.mark.mockllm("tool-loop")
def test_tool_loop(mockllm_run, mockllm_server):
    reasons = [call(mockllm_run).choices[0].finish_reason for _ in range(5)]
    assert reasons == ["tool_calls", "tool_calls", "stop", "tool_calls", "stop"]
    assert mockllm_run.report().consumed
    in_thread = "mockllm-server" in {t.name for t in threading.enumerate()}
    print("SERVER", "thread" if in_thread else "process", mockllm_server.suite is None)

@pytest.mark.mockllm("text-turn")
def test_left_over(mockllm_run):
    pass  # a recorded call never requested: the teardown fails it, in either mode
'''


@pytest.mark.parametrize(("args", "ini", "where"), [
    ([], [], "process"),
    (["--mockllm-server-mode", "thread"], [], "thread"),
    ([], ["mockllm_server_mode = thread"], "thread"),
    (["--mockllm-server-mode", "process"], ["mockllm_server_mode = thread"], "process"),
], ids=["default-process", "flag-thread", "ini-thread", "flag-wins"])
def test_the_fixtures_behave_alike_in_a_process_and_in_a_thread(pytester: pytest.Pytester, args: list[str],
                                                                ini: list[str], where: str) -> None:
    make_ini(pytester, f"mockllm_recordings = {RECORDINGS}", "mockllm_divergence = warn", *ini)
    pytester.makepyfile(SUITE)
    result = pytester.runpytest("-s", *args)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines([f"*SERVER {where} {where == 'process'}*"])
    result.stdout.fnmatch_lines(["*test_left_over*the mockllm run did not go as recorded*"])


def test_the_plugin_starts_no_thread_in_the_test_process(pytester: pytest.Pytester,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Its server is a process, its spare too, and the server's logs come back with no thread: one
    would make every malloc of the tests' own code take a lock (mockllm.process._ChildLogs). Its log
    records still reach the test's captured log, by the test's teardown."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # this suite's own worker: the spare too
    started = threads_started(monkeypatch)
    make_ini(pytester, f"mockllm_recordings = {RECORDINGS}", "mockllm_divergence = warn", "mockllm_log_level = info",
             "log_level = INFO")
    pytester.makepyfile(PRELUDE + '''
@pytest.mark.mockllm("text-turn")
def test_served(mockllm_run):
    assert call(mockllm_run).choices[0].message.content == "Hello from the recorded model!"
    assert False, "to show its captured log"
''')
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    # Relayed as the failed call ends, after one admin call: the server logs a call once its answer is
    # written, which may be after the test read it (without that call, 2 runs in 6 under -n 2 missed it).
    result.stdout.fnmatch_lines(["*Captured log call*", "*call 0 (0-based): 200*"])
    assert started == []


def test_a_bad_server_mode_in_the_ini_is_a_usage_error(pytester: pytest.Pytester) -> None:
    make_ini(pytester, f"mockllm_recordings = {RECORDINGS}", "mockllm_server_mode = fork")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*mockllm_server_mode must be process or thread, not 'fork'*"])


def test_a_server_that_cannot_start_stops_the_session_in_process_mode(pytester: pytest.Pytester) -> None:
    make_ini(pytester, f"mockllm_recordings = {pytester.path / 'nowhere'}")
    pytester.makepyfile(PRELUDE + '''
@pytest.mark.mockllm("tool-loop")
def test_a(mockllm_run):
    pass
''')
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(["*mockllm: the server for *nowhere did not start*not a folder*"])


CHILDREN = '''
from pathlib import Path

from tests.server_children import server_children

def servers():
    """This process's children that are mockllm server processes, as sorted pid strings."""
    return sorted(str(pid) for pid in server_children())
'''


def test_the_server_launched_during_collection_is_the_one_tests_use(pytester: pytest.Pytester) -> None:
    make_ini(pytester, f"mockllm_recordings = {RECORDINGS}", "mockllm_divergence = warn")
    pytester.makepyfile(PRELUDE + CHILDREN + '''
@pytest.mark.mockllm("text-turn")
def test_uses_it(mockllm_run):
    assert call(mockllm_run).choices[0].message.content == "Hello from the recorded model!"
    assert len(servers()) == 1  # launched while pytest collected, and reused: not a second one
''')
    pytester.runpytest().assert_outcomes(passed=1)


def test_a_launched_server_no_test_uses_is_stopped_after_collection(pytester: pytest.Pytester) -> None:
    make_ini(pytester, f"mockllm_recordings = {RECORDINGS}")
    pytester.makepyfile(CHILDREN + '''
def test_without_mockllm():
    assert servers() == []  # collection found no test that uses it: stopped before the tests ran
''')
    pytester.runpytest().assert_outcomes(passed=1)


CONFTEST = CHILDREN + '''
def pytest_configure(config):
    Path("seen.txt").write_text(",".join(servers()))  # before the session starts: a spare, if any
'''


@pytest.mark.parametrize("folder", ["recorded", "none"])
def test_a_spare_starts_as_pytest_loads_its_plugins_and_is_the_sessions_server(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, folder: str) -> None:
    """Before any conftest is configured, when the session has recordings to serve (and not when it
    has none); the session's server is then that very process."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # this suite's own worker (likely_to_serve)
    where = RECORDINGS if folder == "recorded" else pytester.path / "nowhere"
    make_ini(pytester, f"mockllm_recordings = {where}", "mockllm_divergence = warn")
    pytester.makeconftest(CONFTEST)
    seen = 'at_configure = [pid for pid in Path("seen.txt").read_text().split(",") if pid]'
    if folder == "none":
        pytester.makepyfile(CHILDREN + f"""
def test_no_spare():
    {seen}
    assert at_configure == []
""")
    else:
        pytester.makepyfile(PRELUDE + CHILDREN + f"""
@pytest.mark.mockllm("text-turn")
def test_served_by_the_spare(mockllm_run):
    {seen}
    assert call(mockllm_run).choices[0].message.content == "Hello from the recorded model!"
    assert len(at_configure) == 1 and servers() == at_configure
""")
    pytester.runpytest().assert_outcomes(passed=1)


@pytest.mark.parametrize("given", ["flags", "ini"])
def test_the_spare_loads_ahead_what_the_session_serves(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                        given: str) -> None:
    """Read from the command line (the ini's addopts and PYTEST_ADDOPTS too) or from the ini file
    before pytest has read them itself: the orders the session's launch sends are the ones the spare
    loaded ahead (its debug line says so, which the server logs only at the level the orders set)."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # this suite's own worker (likely_to_serve)
    options = ["mockllm_divergence = warn", "mockllm_log_level = debug"]
    if given == "ini":
        make_ini(pytester, f"mockllm_recordings = {RECORDINGS}", *options)
        args = []
    else:  # as pytest orders them: the ini's addopts, then PYTEST_ADDOPTS (which wins here), then the command line
        pytester.makeini("[pytest]\naddopts = --strict-markers -p no:asyncio --mockllm-log-level=info\n")
        monkeypatch.setenv("PYTEST_ADDOPTS", "--mockllm-log-level=debug")
        # One word: pytest takes a separate path for a folder to find its rootdir from.
        args = [f"--mockllm-recordings={RECORDINGS}", "--mockllm-divergence", "warn"]
    pytester.makepyfile(PRELUDE + '''
@pytest.mark.mockllm("text-turn")
def test_served(mockllm_run):
    assert call(mockllm_run).choices[0].message.content == "Hello from the recorded model!"
''')
    pytester.runpytest(*args, "--log-file=log.txt", "--log-file-level=DEBUG").assert_outcomes(passed=1)
    assert "as loaded before the orders came" in (pytester.path / "log.txt").read_text()


def test_a_recording_a_conftest_rewrites_is_served_as_rewritten(pytester: pytest.Pytester,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The spare loads the folder while pytest starts; a conftest imported after that may write to it.
    The session is served what the folder holds when it starts."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    shutil.copytree(RECORDINGS / "text-turn", pytester.path / "recs" / "text-turn")
    make_ini(pytester, "mockllm_recordings = recs", "mockllm_divergence = warn")
    pytester.makeconftest('''
from pathlib import Path

log = Path(__file__).parent / "recs" / "text-turn" / "session.jsonl"
log.write_text(log.read_text().replace('"text":"!"', '"text":"?"'))  # its last delta
''')
    pytester.makepyfile(PRELUDE + '''
@pytest.mark.mockllm("text-turn")
def test_served_as_rewritten(mockllm_run):
    assert call(mockllm_run).choices[0].message.content == "Hello from the recorded model?"
''')
    pytester.runpytest().assert_outcomes(passed=1)
