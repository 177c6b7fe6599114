"""The pytest plugin leaves a failing test's run as one HTML file and names it (tested with pytester,
as tests/test_plugin.py does); passing tests leave nothing."""

from __future__ import annotations

import openai  # noqa: F401  (imported once here: pytester drops what each inner run imports)
import pytest

import mockllm.api  # noqa: F401  (likewise: aiohttp and the server)
from mockllm.plugin_names import report_name
from tests.test_plugin import PRELUDE, RECORDINGS, make_ini

pytest_plugins = ["pytester"]

TESTS = PRELUDE + '''
@pytest.mark.mockllm("tool-loop")
def test_stops_early(mockllm_run):
    call(mockllm_run)

@pytest.mark.mockllm("text-turn")
def test_wrong_answer(mockllm_run):
    assert call(mockllm_run).choices[0].message.content == "something else"

@pytest.mark.mockllm("text-turn")
def test_passes(mockllm_run):
    call(mockllm_run)
'''


def test_a_failing_run_leaves_its_report_under_the_cache_folder_and_the_failure_names_it(
        pytester: pytest.Pytester) -> None:
    make_ini(pytester, f"mockllm_recordings = {RECORDINGS}", "mockllm_divergence = warn")  # a stand-in prompt
    pytester.makepyfile(TESTS)
    result = pytester.runpytest()
    result.assert_outcomes(passed=2, failed=1, errors=1)
    folder = pytester.path / ".pytest_cache" / "mockllm"
    early = folder / "test_a_failing_run_leaves_its_report_under_the_cache_folder_and_the_failure_names_it.py__" \
                     "test_stops_early.html"
    result.stdout.fnmatch_lines([f"mockllm report: {early}"])
    assert "unconsumed: session session.jsonl" in early.read_text()
    # A test that fails on its own assertion leaves its run's report too, named in a section of its failure.
    (wrong,) = folder.glob("*test_wrong_answer.html")
    result.stdout.fnmatch_lines(["*- mockllm -*", f"mockllm report: {wrong}"])
    assert sorted(p.name for p in folder.iterdir()) == sorted([early.name, wrong.name])  # none for a pass


def test_the_flag_and_the_ini_option_choose_the_folder(pytester: pytest.Pytester) -> None:
    make_ini(pytester, f"mockllm_recordings = {RECORDINGS}", "mockllm_report_dir = out/reports",
             "mockllm_divergence = warn")
    pytester.makepyfile(TESTS)
    pytester.runpytest("-p", "no:cacheprovider", "-k", "stops_early")
    assert len(list((pytester.path / "out" / "reports").glob("*.html"))) == 1
    pytester.runpytest("--mockllm-report-dir=elsewhere", "-k", "stops_early")
    assert len(list((pytester.path / "elsewhere").glob("*.html"))) == 1


@pytest.mark.parametrize(("nodeid", "name"), [
    ("tests/test_a.py::test_b", "tests_test_a.py__test_b.html"),
    ("t.py::TestX::test_y[a/b-c:d]", "t.py__TestX__test_y[a_b-c_d].html"),
    ("t.py::test[\x01]", "t.py__test[_].html"),
], ids=["module", "class-and-param", "control-character"])
def test_a_report_is_named_after_its_test(nodeid: str, name: str) -> None:
    assert report_name(nodeid) == name


def test_a_long_node_id_is_cut_and_stays_unique() -> None:
    one, other = report_name("t.py::test[" + "x" * 300 + "1]"), report_name("t.py::test[" + "x" * 300 + "2]")
    assert len(one) < 200 and one != other
