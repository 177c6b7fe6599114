"""Record once, replay forever, from the test suite itself: the plugin's record modes, tested in
isolation with `pytester` against a scripted upstream that knows nothing of mockllm.

A throw-away suite of three agent tests (a tool loop, an Anthropic stream, a coordinator with two
concurrent subagents, none naming its scenario) is recorded under `once`, replayed offline under
`none`, fails readably after a prompt change, is updated by `new_episodes` (only the changed
scenario), and replaced by `rewrite`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anthropic  # noqa: F401  (imported once here: pytester drops what each inner run imports)
import openai  # noqa: F401
import pytest

import mockllm.api  # (likewise: aiohttp and the server)
from tests.scripted_upstream import ScriptedUpstream

pytest_plugins = ["pytester"]

KEY = "sk-proj-never-in-a-recording-42"

SUITE = '''
import concurrent.futures
import json

import anthropic
import openai
import pytest

KEY = "%(key)s"
PROMPT = "%(prompt)s"
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}
         for name in ("add", "research", "review")]


def ask(run, messages):
    with openai.OpenAI(base_url=run.base_url, api_key=KEY, max_retries=0) as client:
        stream = client.chat.completions.create(model="gpt-test", messages=messages, tools=TOOLS, stream=True)
        text, calls = "", {}
        for chunk in stream:
            delta = chunk.choices[0].delta if chunk.choices else None
            text += (delta.content or "") if delta else ""
            for part in (delta.tool_calls or []) if delta else []:
                call = calls.setdefault(part.index, {"id": part.id, "name": "", "arguments": ""})
                call["name"] += part.function.name or ""
                call["arguments"] += part.function.arguments or ""
        return text, list(calls.values())


def answered(messages, calls, results):
    messages.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
        for c in calls]})
    messages += [{"role": "tool", "tool_call_id": c["id"], "content": r} for c, r in zip(calls, results)]


@pytest.mark.mockllm()
def test_tool_loop(mockllm_run):
    messages = [{"role": "user", "content": PROMPT}]
    _, calls = ask(mockllm_run, messages)
    assert [c["name"] for c in calls] == ["add"]
    answered(messages, calls, ["3"])
    assert ask(mockllm_run, messages)[0] == "got: 3"


@pytest.mark.mockllm()
def test_anthropic_stream(mockllm_run):
    with anthropic.Anthropic(base_url=mockllm_run.anthropic_base_url, api_key=KEY, max_retries=0) as client:
        with client.messages.stream(model="claude-test", max_tokens=64,
                                    messages=[{"role": "user", "content": "summarise the plan"}]) as stream:
            assert "".join(stream.text_stream) == "echo: summarise the plan"


@pytest.mark.mockllm()
def test_coordinator(mockllm_run):
    messages = [{"role": "user", "content": 'CALL research {"topic": "tides"}\\nCALL review {"doc": "draft"}'}]
    _, calls = ask(mockllm_run, messages)
    assert [c["name"] for c in calls] == ["research", "review"]

    def subagent(call):  # its own conversation, no session header: routed by conversation
        text, _ = ask(mockllm_run, [{"role": "user", "content": f"{call['name']}: {call['arguments']}"}])
        return text

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(subagent, calls))
    answered(messages, calls, results)
    final, _ = ask(mockllm_run, messages)
    assert final.startswith("got: echo: research")
'''


def write_suite(pytester: pytest.Pytester, prompt: str = 'CALL add {\\"a\\": 1, \\"b\\": 2}') -> None:
    pytester.makepyfile(test_agent=SUITE % {"key": KEY, "prompt": prompt})


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as up:
        yield up


@pytest.fixture
def project(pytester: pytest.Pytester, upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.delenv("CI", raising=False)
    pytester.makeini("\n".join(["[pytest]", "addopts = --strict-markers -p no:asyncio -p no:cacheprovider",
                                "mockllm_recordings = recordings", f"mockllm_upstream = {upstream.url}", ""]))
    write_suite(pytester)
    return pytester


SCENARIOS = ("test_agent/test_anthropic_stream", "test_agent/test_coordinator", "test_agent/test_tool_loop")


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def scenario_files(recordings: Path, scenario: str) -> dict[str, bytes]:
    return {k: v for k, v in snapshot(recordings).items() if k.startswith(scenario + "/")}


def test_record_once_then_replay_offline_then_update_what_changed(project: pytest.Pytester,
                                                                   upstream: ScriptedUpstream) -> None:
    recordings = project.path / "recordings"
    assert not recordings.exists()

    recorded = project.runpytest("--mockllm-record-mode", "once")
    recorded.assert_outcomes(passed=3)
    recorded.stdout.fnmatch_lines(["*mockllm recordings*", "recorded: test_agent.py::test_tool_loop: recorded 1 "
                                   "session(s) (session.jsonl), 2 call(s), in */recordings/test_agent/test_tool_loop"])
    assert sorted(mockllm.load_suite(recordings).scenarios) == list(SCENARIOS)
    coordinator = mockllm.load_scenario(recordings / "test_agent" / "test_coordinator")
    assert [(s.kind, len(s.entries)) for s in coordinator.sessions] == [("primary", 2), ("spawn", 1), ("spawn", 1)]
    assert all(s.parent == coordinator.primary.id for s in coordinator.sessions[1:]), "lineage read from the answers"
    calls = len(upstream.received)
    assert calls == 7

    upstream.stop()  # from here on the suite is offline
    first = snapshot(recordings)
    project.runpytest().assert_outcomes(passed=3)  # record mode none, the default
    project.runpytest("--mockllm-record-mode", "once").assert_outcomes(passed=3)  # recorded: replayed
    assert snapshot(recordings) == first

    write_suite(project, prompt='CALL add {\\"a\\": 1, \\"b\\": 5}')  # the prompt changed
    changed = project.runpytest()
    changed.assert_outcomes(passed=3, errors=1)
    changed.stdout.fnmatch_lines([
        "*test_agent.py::test_tool_loop: the mockllm run did not go as recorded*",
        "*diverged: session session.jsonl * call 0 (0-based), *",
        "*record this test again: pytest test_agent.py::test_tool_loop --mockllm-record-mode rewrite",
    ])

    with ScriptedUpstream() as again:
        updated = project.runpytest("--mockllm-record-mode", "new_episodes", f"--mockllm-upstream={again.url}")
        updated.assert_outcomes(passed=3)
        assert len(again.received) == 2, "only the changed test's calls went to the upstream"
    updated.stdout.fnmatch_lines(["recorded: test_agent.py::test_tool_loop: rewrote */test_tool_loop with 2 live "
                                  "call(s): continued session.jsonl from call 0 *",
                                  "not recorded: test_agent.py::test_coordinator: nothing written *"])
    after = snapshot(recordings)
    for scenario in SCENARIOS[:2]:
        assert scenario_files(recordings, scenario) == {k: v for k, v in first.items() if k.startswith(scenario)}
    assert after != first
    project.runpytest().assert_outcomes(passed=3)  # the updated suite replays offline

    with ScriptedUpstream() as again:
        rewritten = project.runpytest("--mockllm-record-mode", "rewrite", f"--mockllm-upstream={again.url}")
        rewritten.assert_outcomes(passed=3)
        assert len(again.received) == 7, "rewrite records every test anew"
    for scenario in SCENARIOS:
        stamp = json.loads((recordings / scenario / "mockllm.json").read_text())["recorded"]
        assert stamp["mode"] == "rewrite"
    assert not any(KEY.encode() in data for data in snapshot(recordings).values()), "no key in any recorded byte"
    assert not [p for p in recordings.rglob(".*")], "no staging folder is left"


def test_a_failing_test_records_nothing_and_says_why(project: pytest.Pytester) -> None:
    project.makepyfile(test_fails='''
import openai
import pytest

@pytest.mark.mockllm()
def test_breaks(mockllm_run):
    with openai.OpenAI(base_url=mockllm_run.base_url, api_key="k", max_retries=0) as client:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert False, "the agent got it wrong"
''')
    result = project.runpytest("test_fails.py", "--mockllm-record-mode", "once", "-rA")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Captured mockllm teardown*", "nothing written to */recordings/test_fails/"
                                 "test_breaks: the test did not pass",
                                 "not recorded: test_fails.py::test_breaks: *the test did not pass"])
    assert not (project.path / "recordings").exists()


def test_a_scenario_recorded_in_a_replaying_session_is_served_to_the_test_named_after_it(
        project: pytest.Pytester, upstream: ScriptedUpstream) -> None:
    # The plugin asks the server its scenarios once per session, for tests with no marker, and
    # again once a run has recorded one: here a marker records the next test's scenario.
    project.runpytest("-k", "test_tool_loop", "--mockllm-record-mode", "once").assert_outcomes(passed=1, deselected=2)
    project.makepyfile(test_later='''
import pytest

from test_agent import PROMPT, ask

@pytest.mark.mockllm("test_later/test_second", record_mode="once")
def test_first(mockllm_run):
    assert [c["name"] for c in ask(mockllm_run, [{"role": "user", "content": PROMPT}])[1]] == ["add"]

def test_second(mockllm_run):
    assert mockllm_run.scenario == "test_later/test_second"
    assert [c["name"] for c in ask(mockllm_run, [{"role": "user", "content": PROMPT}])[1]] == ["add"]
''')
    project.runpytest("test_later.py").assert_outcomes(passed=2)
    assert len(upstream.received) == 3, "the tool loop's two calls, then test_first's; test_second replayed"


def test_a_test_with_no_recording_fails_under_none_naming_the_command_that_records_it(project: pytest.Pytester) -> None:
    result = project.runpytest("-k", "test_tool_loop")
    result.assert_outcomes(deselected=2, errors=1)
    result.stdout.fnmatch_lines([
        "*no run of scenario 'test_agent/test_tool_loop': 404 unknown_run: unknown scenario*no recording*",
        "record this test again: pytest test_agent.py::test_tool_loop --mockllm-record-mode once",
    ])


@pytest.mark.parametrize(("args", "refused"), [(["--mockllm-record-mode", "once"], True),
                                               (["--mockllm-record-mode", "once", "--mockllm-record-in-ci"], False),
                                               ([], False)], ids=["refused", "allowed", "replay"])
def test_recording_in_ci_is_refused_unless_asked_for(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                     args: list[str], refused: bool) -> None:
    monkeypatch.setenv("CI", "true")
    result = project.runpytest("-k", "test_anthropic_stream", *args)
    if refused:
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(["*record mode once refused: CI is set*--mockllm-record-in-ci*"])
    elif args:
        result.assert_outcomes(passed=1, deselected=2)
    else:
        result.assert_outcomes(errors=1, deselected=2)  # nothing recorded yet, and none never records


@pytest.mark.parametrize(("nodeid", "scenario"), [
    ("tests/test_agent.py::test_x", "test_agent/test_x"),
    ("tests/test_agent.py::TestClass::test_x[param]", "test_agent/TestClass.test_x[param]"),
    ("test_a.py::test_x[a/b:c\\d]", "test_a/test_x[a_b_c_d]"),
    ("test_a.py::test_x[new\nline]", "test_a/test_x[new_line]"),
], ids=["function", "class-and-param", "separators", "control"])
def test_a_scenario_is_named_after_its_test(nodeid: str, scenario: str) -> None:
    from mockllm.plugin_names import scenario_for

    class Item:
        path = Path(nodeid.partition("::")[0])

    item = Item()
    item.nodeid = nodeid  # type: ignore[attr-defined]
    assert scenario_for(item) == scenario  # type: ignore[arg-type]

