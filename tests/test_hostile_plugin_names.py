"""Issue 25, point 8: two test files with the same stem in different folders get recordings of their
own (`a/test_agent.py::test_x` and `b/test_agent.py::test_x`), with or without pytest-xdist; a test
whose file stem is unique keeps `{file stem}/{test}` (DESIGN.md §6)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import mockllm
from tests.scripted_upstream import ScriptedUpstream

pytest_plugins = ["pytester"]

TEST = '''
import openai
import pytest


@pytest.mark.mockllm()
def test_x(mockllm_run):
    with openai.OpenAI(base_url=mockllm_run.base_url, api_key="x", max_retries=0) as client:
        answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "%s"}])
    assert answer.choices[0].message.content == "echo: %s"
'''


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as up:
        yield up


@pytest.fixture
def project(pytester: pytest.Pytester, upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.delenv("CI", raising=False)
    pytester.makeini("\n".join(["[pytest]", "addopts = --strict-markers -p no:asyncio -p no:cacheprovider",
                                "mockllm_recordings = recordings", f"mockllm_upstream = {upstream.url}", ""]))
    for folder in ("a", "b"):
        (pytester.path / folder).mkdir()
        (pytester.path / folder / "__init__.py").write_text("")  # two modules named test_agent: packages
        (pytester.path / folder / "test_agent.py").write_text(TEST % (f"from {folder}", f"from {folder}"))
    (pytester.path / "test_alone.py").write_text(TEST % ("alone", "alone"))
    return pytester


def test_same_stem_in_two_folders_records_and_replays_apart(project: pytest.Pytester, upstream) -> None:
    # Recorded on two pytest-xdist workers: each names a test as the other would.
    project.runpytest("-n", "2", "-p", "no:benchmark", "--mockllm-record-mode", "once").assert_outcomes(passed=3)
    recordings = project.path / "recordings"
    assert sorted(mockllm.load_suite(recordings).scenarios) == ["a.test_agent/test_x", "b.test_agent/test_x",
                                                                 "test_alone/test_x"]
    upstream.stop()
    # Each replays its own recording (b given a's would answer "echo: from a"), b alone as well: the name
    # does not depend on which tests are selected.
    project.runpytest("-p", "no:xdist", "b/test_agent.py", "a/test_agent.py").assert_outcomes(passed=2)


def test_the_name_of_a_test_whose_stem_is_shared(project: pytest.Pytester) -> None:
    from mockllm.plugin_names import scenario_for

    items, _ = project.inline_genitems("-p", "no:xdist")
    assert sorted(scenario_for(i) for i in items) == ["a.test_agent/test_x", "b.test_agent/test_x",
                                                      "test_alone/test_x"]


def test_files_found_for_the_rule_are_under_the_test_paths_only(tmp_path: Path) -> None:
    from mockllm.plugin_names import shared_stems

    for folder in ("a", "b", ".venv/lib", "node_modules/x"):
        (tmp_path / folder).mkdir(parents=True)
    for path in ("a/test_one.py", "b/test_one.py", "a/test_two.py", ".venv/lib/test_two.py",
                 "node_modules/x/test_two.py", "b/helper.py", "a/helper.py"):
        (tmp_path / path).write_text("")
    assert shared_stems([tmp_path], ("test_*.py", "*_test.py")) == {"test_one"}


def test_a_long_test_id_is_cut_to_a_folder_name_that_stays_unique() -> None:
    from mockllm.plugin_names import scenario_for
    from mockllm.scenario.load import name_problem

    class Item:
        path = Path("tests/test_long.py")

    names = set()
    for param in ("a" * 300, "a" * 299 + "b"):
        item = Item()
        item.nodeid = f"tests/test_long.py::test_x[{param}]"  # type: ignore[attr-defined]
        name = scenario_for(item)  # type: ignore[arg-type]
        assert name_problem(name) is None, name
        names.add(name)
    assert len(names) == 2
