"""The pytest plugin, tested in isolation with `pytester`: a throw-away test project configures
its recordings and drives real trees through the openai SDK; failures read as a user needs them."""

from __future__ import annotations

import shutil
from pathlib import Path

import openai  # noqa: F401  (imported once here: pytester drops what each inner run imports)
import pytest

import mockllm.api  # (likewise: aiohttp and the server)

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
RECORDINGS = ROOT / "recordings"

# What each throw-away test module starts with: an SDK client for the run, routed to one session.
PRELUDE = '''
import openai
import pytest

USER = [{"role": "user", "content": "go"}]

def client(run, session="agent"):
    return openai.OpenAI(base_url=run.base_url, api_key="unused", max_retries=0,
                         default_headers=run.headers(session))

def call(run, session="agent"):
    with client(run, session) as c:  # closed: an open pool would warn in the outer session
        return c.chat.completions.create(model="m", messages=USER)
'''


def make_ini(pytester: pytest.Pytester, *lines: str) -> None:
    """The throw-away project's ini: strict markers, as a careful suite has, and no asyncio plugin,
    which would only warn about its own settings."""
    pytester.makeini("\n".join(["[pytest]", "addopts = --strict-markers -p no:asyncio", *lines, ""]))


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project whose ini names the recordings. Its tests send a stand-in prompt ("go"): they check
    routing and consumption, so divergences are reported, not failed (the default, "fail", is
    tested in test_a_diverged_call_fails_the_test_with_its_diff_and_warn_relaxes_it)."""
    make_ini(pytester, f"mockllm_recordings = {RECORDINGS}", "mockllm_divergence = warn")
    return pytester


def test_complete_runs_pass_and_a_tool_loop_and_a_fork_tree_replay(project: pytest.Pytester) -> None:
    project.makepyfile(PRELUDE + '''
@pytest.mark.mockllm("tool-loop")
def test_tool_loop(mockllm_run):
    assert mockllm_run.base_url.endswith("/v1")
    reasons = [call(mockllm_run).choices[0].finish_reason for _ in range(5)]
    assert reasons == ["tool_calls", "tool_calls", "stop", "tool_calls", "stop"]
    assert mockllm_run.report().consumed

@pytest.mark.mockllm("fork-child")
def test_fork_tree(mockllm_run):
    assert call(mockllm_run, "parent").choices[0].message.content == "OK"
    call(mockllm_run, "parent")
    assert call(mockllm_run, "child").choices[0].message.content == "TANGERINE"
    assert call(mockllm_run, "parent").choices[0].message.content == "PARENT_DONE"

def test_server_is_shared(mockllm_server):
    assert mockllm_server.url.startswith("http://127.0.0.1:")
    assert "tool-loop" in mockllm_server.scenarios
''')
    project.runpytest().assert_outcomes(passed=3)


def test_calls_left_unconsumed_fail_at_teardown_naming_them(project: pytest.Pytester) -> None:
    project.makepyfile(PRELUDE + '''
@pytest.mark.mockllm("tool-loop")
def test_stops_early(mockllm_run):
    call(mockllm_run)
''')
    result = project.runpytest()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([
        "*ERROR at teardown of test_stops_early*",
        "test_calls_left_unconsumed_fail_at_teardown_naming_them.py::test_stops_early: "
        "the mockllm run did not go as recorded",
        "mockllm run run-* of scenario 'tool-loop': 1 problem(s)",
        "  unconsumed: session session.jsonl (primary, recorded id d3cfb7e5-*) served call 0 *; "
        "calls 1-4 (0-based) of 5 not requested",
        "  sessions (calls served / recorded):",
        "    session.jsonl (primary): 1/5, live id agent",
    ])
    assert "Traceback" not in result.stdout.str()  # the report is the message, not plugin internals


def test_consume_false_allows_calls_left_and_each_test_gets_call_1_of_its_own_run(project: pytest.Pytester) -> None:
    project.makepyfile(PRELUDE + '''
@pytest.mark.mockllm("tool-loop", consume=False)
def test_first(mockllm_run):
    assert call(mockllm_run).choices[0].finish_reason == "tool_calls"

@pytest.mark.mockllm("tool-loop", consume=False)
def test_second(mockllm_run):
    reply = call(mockllm_run)
    assert reply.choices[0].finish_reason == "tool_calls"
    (session,) = mockllm_run.report().sessions
    assert (session.served, session.remaining) == (1, 4)  # call 1 of a fresh run
''')
    project.runpytest().assert_outcomes(passed=2)


def test_a_call_past_the_end_is_410_and_fails_the_test_at_teardown(project: pytest.Pytester) -> None:
    project.makepyfile(PRELUDE + '''
@pytest.mark.mockllm("text-turn", consume=False)
def test_one_call_too_many(mockllm_run):
    call(mockllm_run)
    with pytest.raises(openai.APIStatusError) as caught:
        call(mockllm_run)
    assert caught.value.status_code == 410
''')
    result = project.runpytest()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([
        "*::test_one_call_too_many: the mockllm run did not go as recorded "
        "(consume=False: calls left over are allowed)",
        "mockllm run run-* of scenario 'text-turn': 1 problem(s)",
        "  failure script_exhausted in session session.jsonl (live id agent), call 1 *: run run-* session "
        "session.jsonl * made call 1 * but its script has 1 entries*",
    ])


def test_tests_with_no_marker_ask_the_server_its_scenarios_once(pytester: pytest.Pytester,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # A test with no marker replays the scenario named after it, if the server serves one: the
    # plugin asks the server its scenarios (an admin call listing every one, 24 ms at 1,000) once
    # per session, not in each such test's setup and again as the test before it prepares its run.
    for test in ("test_a", "test_b", "test_c"):
        shutil.copytree(RECORDINGS / "text-turn", pytester.path / "recordings" / "test_names" / test)
    shutil.copytree(RECORDINGS / "tool-loop", pytester.path / "recordings" / "tool-loop")
    make_ini(pytester, "mockllm_divergence = warn")
    pytester.makepyfile(test_names=PRELUDE + """
def test_a(mockllm_run):
    assert mockllm_run.scenario == "test_names/test_a"
    assert call(mockllm_run).choices[0].message.content == "Hello from the recorded model!"

def test_b(mockllm_run):
    assert mockllm_run.scenario == "test_names/test_b"
    call(mockllm_run)

def test_c(mockllm_run):
    assert mockllm_run.scenario == "test_names/test_c"
    call(mockllm_run)

def test_unrecorded(mockllm_run):
    pass
""")
    asked: list[str] = []
    listed = mockllm.api.Server.scenarios

    def counted(server: mockllm.api.Server) -> list[str]:
        asked.append(server.url)
        return listed.fget(server)  # type: ignore[misc]

    monkeypatch.setattr(mockllm.api.Server, "scenarios", property(counted))
    result = pytester.runpytest()
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(['*mockllm_run needs @pytest.mark.mockllm("scenario"); loaded: test_names/test_a, '
                                 "test_names/test_b, test_names/test_c, tool-loop. * test_names/test_unrecorded"])
    assert len(asked) == 1


def test_flag_overrides_the_ini_and_default_is_recordings_under_the_rootdir(pytester: pytest.Pytester) -> None:
    shutil.copytree(RECORDINGS / "text-turn", pytester.path / "recordings" / "text-turn")
    pytester.makepyfile(PRELUDE + '''
def test_default_folder(mockllm_server, mockllm_run):
    # No marker: with exactly one scenario loaded, that one is meant.
    assert mockllm_server.scenarios == ["text-turn"]
    assert call(mockllm_run).choices[0].message.content == "Hello from the recorded model!"
''')
    pytester.runpytest("-p", "no:asyncio", "--mockllm-divergence=warn").assert_outcomes(passed=1)
    make_ini(pytester, "mockllm_recordings = nowhere", "mockllm_divergence = warn")
    pytester.runpytest(f"--mockllm-recordings={RECORDINGS / 'text-turn'}").assert_outcomes(passed=1)


def test_collection_leaves_out_the_recorded_scenarios_folders_and_nothing_else(pytester: pytest.Pytester) -> None:
    # A scenario folder holds logs, never tests: pytest does not walk it (each was a directory node,
    # 0.3 ms of collection per recording). A folder that is not a recording, even under recordings/,
    # and a recording-like folder elsewhere are still pytest's.
    never = "def test_never():\n    raise AssertionError('collected from a recorded scenario')\n"
    shutil.copytree(RECORDINGS / "text-turn", pytester.path / "recordings" / "suite" / "text-turn")
    (pytester.path / "recordings" / "suite" / "text-turn" / "test_inside.py").write_text(never)
    (pytester.path / "recordings" / "helpers").mkdir()
    (pytester.path / "recordings" / "helpers" / "test_helpers.py").write_text("def test_helper():\n    pass\n")
    shutil.copytree(RECORDINGS / "text-turn", pytester.path / "data" / "like-a-recording")
    (pytester.path / "data" / "like-a-recording" / "test_data.py").write_text("def test_data():\n    pass\n")
    make_ini(pytester)
    result = pytester.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(["*test_data.py::test_data", "*test_helpers.py::test_helper", "2 tests collected*"])
    result.stdout.no_fnmatch_line("*test_never*")
    # With the recordings elsewhere, that folder is an ordinary one: walked.
    pytester.runpytest("--collect-only", "-q", "--mockllm-recordings=elsewhere").stdout.fnmatch_lines(
        ["*test_inside.py::test_never", "3 tests collected*"])


def test_serve_options_come_from_flags_and_ini(project: pytest.Pytester) -> None:
    project.makepyfile('''
def test_options(mockllm_server):
    assert mockllm_server.options.headerless == "anonymous"
    assert mockllm_server.options.session_headers == ("x-a", "x-b")
    assert mockllm_server.options.port == 0
''')
    project.runpytest("--mockllm-headerless=anonymous", "--mockllm-session-header=x-a",
                      "--mockllm-session-header=x-b").assert_outcomes(passed=1)
    make_ini(project, f"mockllm_recordings = {RECORDINGS}", "mockllm_headerless = anonymous",
             "mockllm_session_headers = x-a x-b")
    project.runpytest().assert_outcomes(passed=1)


def test_the_marker_is_registered(project: pytest.Pytester) -> None:
    result = project.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.mockllm(scenario, consume=True): *"])


@pytest.mark.parametrize(("ini", "expected"), [
    pytest.param("mockllm_recordings = nowhere", "*mockllm: the server for */nowhere did not start: */nowhere: "
                 "not a folder*", id="missing-folder"),
    pytest.param("mockllm_recordings = broken", "*mockllm: the server for */broken did not start: "
                 "*/broken: no valid scenario to serve:", id="only-broken"),
    pytest.param(f"mockllm_recordings = {RECORDINGS}\nmockllm_headerless = sometimes",
                 "*did not start: headerless must be 'conversation' or 'anonymous', not 'sometimes'*",
                 id="bad-option"),
])
def test_a_server_that_cannot_start_fails_the_session_with_its_reason(
        pytester: pytest.Pytester, ini: str, expected: str) -> None:
    (pytester.path / "broken").mkdir()
    (pytester.path / "broken" / "session.jsonl").write_text("not json\n")
    make_ini(pytester, ini)
    pytester.makepyfile('''
def test_needs_it(mockllm_server):
    pass

def test_never_reached(mockllm_server):
    pass
''')
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines([expected])
    assert "test_never_reached" not in result.stdout.str()
    assert "session.jsonl:1: malformed JSON" in result.stdout.str() or "only-broken" not in expected


@pytest.mark.parametrize(("marker", "expected"), [
    pytest.param('@pytest.mark.mockllm("no-such")', "*no run of scenario 'no-such': 404 unknown_run: "
                 "unknown scenario 'no-such'; loaded scenarios: *tool-loop*", id="unknown-scenario"),
    pytest.param("", '*mockllm_run needs @pytest.mark.mockllm("scenario"); loaded: *', id="no-marker"),
    pytest.param('@pytest.mark.mockllm("tool-loop", consum=False)',
                 '*expected @pytest.mark.mockllm("scenario", consume=True), got *', id="misspelt"),
])
def test_a_run_that_cannot_be_made_errors_that_test_only(project: pytest.Pytester, marker: str,
                                                         expected: str) -> None:
    project.makepyfile(f'''
import pytest

{marker}
def test_it(mockllm_run):
    pass

def test_other(mockllm_server):
    pass
''')
    result = project.runpytest()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([expected])


def test_a_broken_scenario_named_errors_with_its_load_error(pytester: pytest.Pytester) -> None:
    (pytester.path / "recordings" / "broken").mkdir(parents=True)
    (pytester.path / "recordings" / "broken" / "session.jsonl").write_text("not json\n")
    shutil.copytree(RECORDINGS / "text-turn", pytester.path / "recordings" / "text-turn")
    pytester.makepyfile('''
import pytest

@pytest.mark.mockllm("broken")
def test_it(mockllm_run):
    pass
''')
    result = pytester.runpytest("-p", "no:asyncio")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*no run of scenario 'broken': 422 scenario_invalid: *session.jsonl:1:*"])


def test_a_diverged_call_fails_the_test_with_its_diff_and_warn_relaxes_it(pytester: pytest.Pytester) -> None:
    make_ini(pytester, f"mockllm_recordings = {RECORDINGS}")
    pytester.makepyfile(PRELUDE + '''
@pytest.mark.mockllm("text-turn")
def test_changed_prompt(mockllm_run):
    call(mockllm_run)  # "go", where the recording asked something else

@pytest.mark.mockllm("text-turn", divergence="warn")
def test_changed_prompt_warned(mockllm_run):
    call(mockllm_run)
''')
    result = pytester.runpytest()
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines([
        "*::test_changed_prompt: the mockllm run did not go as recorded",
        "mockllm run run-* of scenario 'text-turn': 1 problem(s); 1 call(s) differed from the recording, first "
        "session.jsonl call 0 * at the last user message",
        "  diverged: session session.jsonl (live id agent) call 0 *, the last user message: expected *, got 'go' (*)",
    ])
    assert "test_changed_prompt_warned" not in result.stdout.str().split("short test summary")[-1]


def test_marker_keywords_set_the_tests_own_run(pytester: pytest.Pytester) -> None:
    make_ini(pytester, f"mockllm_recordings = {RECORDINGS}", "mockllm_divergence = warn")
    pytester.makepyfile(PRELUDE + '''
@pytest.mark.mockllm("text-turn", strict=True, bind="order", ignore_input=["x+"], consume=False)
def test_settings(mockllm_run):
    state = mockllm_run.report().state
    assert state["settings"]["strict"] is True and state["settings"]["bind"] == "order"
    assert state["settings"]["ignore_input"] == ["x+"]
    with pytest.raises(openai.ConflictError):
        call(mockllm_run)  # strict: "go" is not what was recorded
    assert mockllm_run.anthropic_base_url + "/v1" == mockllm_run.base_url

@pytest.mark.mockllm("text-turn", faults=[{"call": 0, "status": 503}])
def test_faults(mockllm_run):
    with pytest.raises(openai.InternalServerError):
        call(mockllm_run)
    call(mockllm_run)  # the retry gets the recorded answer

@pytest.mark.mockllm("text-turn", colour="red")
def test_unknown_keyword(mockllm_run):
    pass
''')
    result = pytester.runpytest()
    result.assert_outcomes(passed=2, errors=2)  # test_settings: its refused call is a failure of the run
    result.stdout.fnmatch_lines(["*expected @pytest.mark.mockllm(\"scenario\", consume=True), got *; unknown: colour; "
                                 "run settings it takes: cwd, pace, *"])
