"""Issue 25, point 13: runs a client never ends are bounded, and the inspector page stays small."""

from __future__ import annotations

import pytest

from mockllm.options import ServeOptions
from mockllm.replay import runs as runs_module
from mockllm.replay.runs import Runs, TooManyRuns
from mockllm.scenario.load import load_scenario
from tests.conftest import http, new_run
from tests.logbuilder import RECORDINGS


@pytest.fixture
def few_live(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs_module, "LIVE_KEPT", 5)


def test_live_runs_are_bounded_and_the_idle_longest_goes_first(few_live):
    scenario = load_scenario(RECORDINGS / "text-turn")
    runs = Runs({scenario.name: scenario}, ServeOptions())
    first = runs.create(scenario.name)
    made = [runs.create(scenario.name) for _ in range(4)]
    first.journal.record("chat", "s", True, (), b"{}")  # the first run took a call: now the latest used
    later = [runs.create(scenario.name) for _ in range(20)]
    assert len(runs) == 5
    assert runs.get(first.id) is None or all(runs.get(r.id) is None for r in made), "idle ones end first"
    assert all(runs.get(r.id) is not None for r in later[-4:])
    assert sum(1 for _, ended in runs.listing() if ended) <= runs_module.ENDED_KEPT


def test_runs_that_record_are_never_ended_to_make_room(few_live, tmp_path):
    scenario = load_scenario(RECORDINGS / "text-turn")
    runs = Runs({scenario.name: scenario}, ServeOptions())
    recording = [runs.create_recording(f"new{k}", tmp_path / f"new{k}") for k in range(5)]
    with pytest.raises(TooManyRuns, match="DELETE"):
        runs.create(scenario.name)
    assert all(runs.get(r.id) is r for r in recording)


async def test_many_runs_leave_the_inspector_page_small(serve):
    server = await serve(RECORDINGS / "text-turn")
    for _ in range(120):
        await new_run(server.base_url, "text-turn")
    import aiohttp

    async with aiohttp.ClientSession() as client, client.get(f"{server.base_url}/_mockllm/") as page:
        text = await page.text()
    assert page.status == 200
    assert text.count('<section class="run"') == 50
    status, listed = await http("GET", f"{server.base_url}/_mockllm/runs")
    assert status == 200 and isinstance(listed, dict) and len(listed["runs"]) == 120, "the list has them all"


async def test_too_many_recording_runs_is_a_429(serve, tmp_path, monkeypatch):
    monkeypatch.setattr(runs_module, "LIVE_KEPT", 2)
    server = await serve(tmp_path, upstream=("http://127.0.0.1:9/v1",), record_mode="once")
    for name in ("a", "b"):
        await new_run(server.base_url, name)
    status, body = await http("POST", f"{server.base_url}/_mockllm/runs", {"scenario": "c"})
    assert status == 429 and isinstance(body, dict) and body["error"]["code"] == "too_many_runs"
