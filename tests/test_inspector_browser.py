"""The inspector in a real browser: headless Chromium (tests/browser.py) watches the live page while
an SDK client replays a fork tree, and opens a failing plugin test's saved report from disk.

Never skipped: without a browser these tests fail and say how to install one. Each keeps a
screenshot beside its tmp_path (under pytest's --basetemp) as the artifact to look at.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest

from mockllm.scenario.load import load_scenario
from mockllm.scenario.summary import summarize
from tests.browser import Browser
from tests.conftest import StartServer, new_run
from tests.logbuilder import fork_tree

pytest_plugins = ["pytester"]

HELLO = {"role": "user", "content": "hello"}
PARENT = {"role": "assistant", "content": "parent answer"}
DIVERGED = "fork that, please"  # recorded: "fork it"


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[Browser]:
    async with Browser.launch(tmp_path / "chromium-profile") as started:
        yield started


def fork_suite(folder: Path) -> tuple[Path, int]:
    """A suite with the fork tree and a broken scenario; and the fork child's cut."""
    fork_tree(folder / "fork")
    broken = folder / "broken"
    broken.mkdir()
    (broken / "session.jsonl").write_text('{"type":"session","version":0,"id":"x","createdAt":1,"cwd":"/w"}\n{oops\n')
    cut = summarize(load_scenario(folder / "fork")).sessions[1].cut
    return folder, cut


async def chat(base_url: str, session: str, messages: list[dict[str, object]]) -> str:
    """One streamed call of live session `session`, as an agent makes it; the text it got."""
    async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-not-shown", max_retries=0,
                                  default_headers={"x-mockllm-session": session}) as client:
        stream = await client.chat.completions.create(model="m", messages=messages, stream=True)  # type: ignore[arg-type]
        return "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])


def cursor(run: str, lane: str) -> str:
    """A lane's cursor text on the page ("served 2 / 3"), as one expression: parenthesized, so that
    `cursor(...).includes(...)` tests the text, not only its `''` fallback."""
    return (f"((document.querySelector('#run-{run} [data-lane=\"{lane}\"] .cursor') || {{}}).innerText || '')")


async def test_the_live_page_shows_the_fork_tree_replaying_and_a_divergence(
        serve: StartServer, browser: Browser, tmp_path: Path) -> None:
    suite, cut = fork_suite(tmp_path / "suite")
    server = await serve(suite)
    await browser.goto(f"{server.base_url}/_mockllm/")
    await browser.wait_for("document.getElementById('status').innerText === 'live'")  # the event stream is open
    tree = await browser.text('[data-scenario="fork"] .tree')
    assert "session.1.jsonl" in tree and f"cut {cut}" in tree, tree
    broken = await browser.text('[data-scenario="broken"]')
    assert "session.jsonl:2" in broken, broken  # a broken scenario with its file:line

    run, base = await new_run(server.base_url, "fork")
    await browser.wait_for(f"!!document.getElementById('run-{run}')")  # created: the page heard of it
    assert await chat(base, "lead", [HELLO]) == "parent answer"
    await browser.wait_for(f"{cursor(run, 'session.jsonl')}.includes('1 / 3')")
    await chat(base, "lead", [HELLO, PARENT, {"role": "user", "content": DIVERGED}])
    assert await chat(base, "forked", [HELLO, PARENT, {"role": "user", "content": "child task"}]) == "child answer"
    await chat(base, "lead", [{"role": "user", "content": "go on"}])
    await browser.wait_for(f"{cursor(run, 'session.jsonl')}.includes('3 / 3')")
    await browser.wait_for(f"{cursor(run, 'session.1.jsonl')}.includes('1 / 1')")
    lane = await browser.text(f'#run-{run} [data-lane="session.1.jsonl"] .lane-head')
    assert f"cut {cut}" in lane and "forked" in lane, lane

    # A click on the diverged call's mark opens its details: expected, got and the diff.
    await browser.evaluate(f"document.querySelector('#run-{run} a.mark.o-diverged').click()")
    details = await browser.wait_for(
        f"(document.querySelector('#run-{run} details.call.o-diverged[open]') || {{}}).innerText")
    assert "expected\nfork it" in details and f"got\n{DIVERGED}" in details, details
    assert "[-it][+that, please]" in details, details
    body = await browser.wait_for(f"(document.querySelector('#run-{run} details.call.o-diverged pre.body') "
                                  "|| {}).innerText.includes('fork that')")  # fetched when opened
    assert body
    page = await browser.evaluate("document.body.innerText")
    assert "sk-not-shown" not in page  # the client's key never reaches the page
    shot = await browser.screenshot(tmp_path / "inspector-live.png")
    print(f"screenshot: {shot}")

    # Ending the run from the page: the server's run is gone, the page shows it ended, failed by its divergence.
    await browser.evaluate(f"document.querySelector('#run-{run} button[data-action=end]').click()")
    await browser.wait_for(f"document.querySelector('#run-{run}').dataset.ended === 'true'")
    await browser.wait_for(f"document.querySelector('#run-{run} .verdict').innerText === '1 problem'")
    assert "diverged: session session.jsonl" in await browser.text(f"#run-{run} .problems")


async def test_reset_from_the_page_starts_the_run_over_at_the_same_address(
        serve: StartServer, browser: Browser, tmp_path: Path) -> None:
    server = await serve(fork_tree(tmp_path / "fork"))
    run, base = await new_run(server.base_url, "fork")
    await chat(base, "lead", [HELLO])
    await browser.goto(f"{server.base_url}/_mockllm/")
    await browser.wait_for(f"{cursor(run, 'session.jsonl')}.includes('1 / 3')")  # rendered by the server
    await browser.evaluate(f"document.querySelector('#run-{run} button[data-action=reset]').click()")
    await browser.wait_for(f"{cursor(run, 'session.jsonl')}.includes('0 / 3')")
    assert await chat(base, "lead", [HELLO]) == "parent answer"  # call 1 again, at the same base URL
    await browser.wait_for(f"{cursor(run, 'session.jsonl')}.includes('1 / 3')")


FAILING_TEST = '''
import openai
import pytest

HELLO = {"role": "user", "content": "hello"}
PARENT = {"role": "assistant", "content": "parent answer"}

def call(run, session, messages):
    with openai.OpenAI(base_url=run.base_url, api_key="unused", max_retries=0,
                       default_headers=run.headers(session)) as client:
        return client.chat.completions.create(model="m", messages=messages).choices[0].message.content

@pytest.mark.mockllm("fork")
def test_agent_stops_early(mockllm_run):
    call(mockllm_run, "lead", [HELLO])
    call(mockllm_run, "lead", [HELLO, PARENT, {"role": "user", "content": "fork that, please"}])
    call(mockllm_run, "forked", [HELLO, PARENT, {"role": "user", "content": "child task"}])
    # the primary's last recorded call is never made: the run fails at teardown
'''


async def test_a_failing_plugin_tests_report_opens_from_disk_and_shows_the_same(
        pytester: pytest.Pytester, browser: Browser, tmp_path: Path) -> None:
    suite, cut = fork_suite(tmp_path / "suite")
    pytester.makeini(f"[pytest]\naddopts = --strict-markers -p no:asyncio\nmockllm_recordings = {suite}\n")
    pytester.makepyfile(FAILING_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", f"--mockllm-report-dir={tmp_path / 'reports'}")
    result.assert_outcomes(passed=1, errors=1)
    (report,) = (tmp_path / "reports").glob("*.html")
    result.stdout.fnmatch_lines([f"*mockllm report: {report}*"])  # the failure names the file

    # With scripts off, the essentials are all there: the cut, the cursors, the divergence, the problem.
    await browser.send("Emulation.setScriptExecutionDisabled", value=True)
    await browser.goto(report.as_uri())
    text = await browser.evaluate("document.body.innerText")
    assert f"cut {cut}" in text and "served 2 / 3" in text and "served 1 / 1" in text, text
    divergence = await browser.text(".divergences")
    assert "expected\nfork it" in divergence and "got\nfork that, please" in divergence, divergence
    assert "[-it][+that, please]" in divergence
    assert "unconsumed: session session.jsonl" in await browser.text(".problems")
    assert await browser.evaluate("typeof window.mockllmInspector") == "undefined"  # really no script ran
    # With them on, a click on the diverged call's mark opens its details.
    await browser.send("Emulation.setScriptExecutionDisabled", value=False)
    await browser.send("Page.reload")
    await browser.wait_for("typeof window.mockllmInspector === 'object'")
    await browser.evaluate("document.querySelector('details.call.o-diverged').open = false")
    await browser.evaluate("document.querySelector('a.mark.o-diverged').click()")
    details = await browser.wait_for("(document.querySelector('details.call.o-diverged[open]') || {}).innerText")
    assert "fork that, please" in details  # the request body, inline in the file
    data = json.loads(await browser.evaluate("document.getElementById('mockllm-report').textContent"))
    assert data["divergences"][0]["expected"] == "fork it"
    shot = await browser.screenshot(tmp_path / "inspector-report.png")
    print(f"screenshot: {shot}")
