"""The inspector's endpoints over real HTTP: the page, its event stream, run views, one call, reset,
the report of a live or lately ended run; the run registry behind them; and the Python API's
`report_html()`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import mockllm
from mockllm.options import ServeOptions
from mockllm.replay.runs import ENDED_KEPT, Runs
from mockllm.scenario.load import load_scenario
from tests.conftest import StartServer, http, new_run, run_state
from tests.logbuilder import fork_tree

HELLO = [{"role": "user", "content": "hello"}]


async def call(base_url: str, session: str, messages: list[dict[str, Any]] = HELLO,
               headers: dict[str, str] | None = None) -> int:
    async with aiohttp.ClientSession() as client, client.post(
            f"{base_url}/chat/completions", json={"model": "m", "messages": messages},
            headers={"x-mockllm-session": session, **(headers or {})}) as answer:
        await answer.read()
        return answer.status


async def get_text(url: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as client, client.get(url, allow_redirects=False) as answer:
        return answer.status, answer.headers.get("Content-Type", ""), await answer.text()


@pytest.fixture
def fork(tmp_path: Path) -> Path:
    return fork_tree(tmp_path / "fork")


class Events:
    """The inspector's event stream, read as a page reads it."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response

    async def next(self, timeout: float = 5.0) -> dict[str, Any]:
        """The next `run` event's data."""
        async with asyncio.timeout(timeout):
            kind = None
            async for raw in self.response.content:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    kind = line.removeprefix("event: ")
                elif line.startswith("data: ") and kind == "run":
                    data: dict[str, Any] = json.loads(line.removeprefix("data: "))
                    return data
        raise AssertionError("the event stream ended")


@pytest.fixture
async def events(serve: StartServer, fork: Path) -> AsyncIterator[tuple[str, Events]]:
    server = await serve(fork)
    async with aiohttp.ClientSession() as client, client.get(f"{server.base_url}/_mockllm/events") as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        assert response.headers["Cache-Control"] == "no-cache"
        assert await response.content.readline() == b"retry: 1000\n"
        yield server.base_url, Events(response)


async def test_a_page_hears_a_run_created_called_reset_and_ended(events: tuple[str, Events]) -> None:
    base_url, stream = events
    run, base = await new_run(base_url, "fork")
    assert await stream.next() == {"run": run, "change": "created"}
    assert await call(base, "lead") == 200
    assert await stream.next() == {"run": run, "change": "call"}  # arrival and end, coalesced
    assert (await http("POST", f"{base_url}/_mockllm/runs/{run}/reset"))[0] == 200
    assert await stream.next() == {"run": run, "change": "reset"}
    assert (await http("DELETE", f"{base_url}/_mockllm/runs/{run}"))[0] == 200
    assert await stream.next() == {"run": run, "change": "ended"}
    await call(f"{base_url}/v1", "lead")  # a default run is made on first use: the page hears of it too
    assert (await stream.next())["change"] == "created"


async def test_the_page_is_one_html_document_with_the_scenarios_and_runs(serve: StartServer, fork: Path) -> None:
    server = await serve(fork)
    run, base = await new_run(server.base_url, "fork")
    await call(base, "lead")
    status, kind, page = await get_text(f"{server.base_url}/_mockllm/")
    assert status == 200 and kind.startswith("text/html")
    assert 'data-scenario="fork"' in page and f'id="run-{run}"' in page and "served <b>1 / 3</b>" in page
    assert "<script>" in page and "<style>" in page and " src=" not in page  # every asset inline
    status, _, _ = await get_text(f"{server.base_url}/_mockllm")
    assert status == 308


async def test_a_runs_view_and_one_call_of_its_journal(serve: StartServer, fork: Path) -> None:
    server = await serve(fork)
    run, base = await new_run(server.base_url, "fork")
    await call(base, "lead", headers={"x-api-key": "sk-live-key", "x-request-id": "t1"})
    status, kind, view = await get_text(f"{server.base_url}/_mockllm/runs/{run}/view")
    assert status == 200 and kind.startswith("text/html") and view.startswith(f'<section class="run" id="run-{run}"')
    assert f'data-src="/_mockllm/runs/{run}/calls/0"' in view and "hello" not in view  # bodies on demand
    status, record = await http("GET", f"{server.base_url}/_mockllm/runs/{run}/calls/0")
    assert status == 200 and isinstance(record, dict)
    assert json.loads(record["body"])["messages"] == HELLO
    assert record["headers"]["x-request-id"] == "t1" and record["headers"]["x-api-key"] == "[redacted]"
    status, error = await http("GET", f"{server.base_url}/_mockllm/runs/{run}/calls/5")
    assert status == 404 and "keeps no call 5" in error["error"]["message"]  # type: ignore[index]


async def test_reset_starts_a_run_over_at_the_same_address(serve: StartServer, fork: Path) -> None:
    server = await serve(fork)
    run, base = await new_run(server.base_url, "fork", bind="content")
    await call(base, "lead")
    status, body = await http("POST", f"{server.base_url}/_mockllm/runs/{run}/reset")
    assert status == 200 and body == {"run": run, "base_url": base}
    state = await run_state(server.base_url, run)
    assert state["journal"] == [] and state["cursors"] == {} and state["settings"]["bind"] == "content"
    assert await call(base, "lead") == 200
    assert (await http("POST", f"{server.base_url}/_mockllm/runs/nope/reset"))[0] == 404


async def test_an_ended_runs_report_is_kept_a_while_and_listed(serve: StartServer, fork: Path) -> None:
    server = await serve(fork)
    run, base = await new_run(server.base_url, "fork")
    await call(base, "lead")
    await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
    assert (await http("GET", f"{server.base_url}/_mockllm/runs/{run}"))[0] == 404  # the admin API forgets it
    status, kind, report = await get_text(f"{server.base_url}/_mockllm/runs/{run}/report.html")
    assert status == 200 and kind.startswith("text/html") and report.startswith("<!doctype html>")
    assert "2 problems" in report and "served <b>1 / 3</b>" in report  # calls left in both sessions
    _, listed = await http("GET", f"{server.base_url}/_mockllm/runs")
    assert listed == {"runs": [{"run": run, "scenario": "fork", "ended": True, "default": False}]}
    for _ in range(ENDED_KEPT):
        await http("DELETE", f"{server.base_url}/_mockllm/runs/{(await new_run(server.base_url, 'fork'))[0]}")
    status, _, gone = await get_text(f"{server.base_url}/_mockllm/runs/{run}/report.html")
    assert status == 404 and "ended too long ago" in gone


async def test_shutdown_ends_a_watching_pages_stream(serve: StartServer, fork: Path) -> None:
    server = await serve(fork)
    async with aiohttp.ClientSession() as client, client.get(f"{server.base_url}/_mockllm/events") as response:
        await response.content.readline()
        async with asyncio.timeout(5):
            await server.close()  # not held up by the open stream
            assert await response.content.read() == b"\n"  # the rest of the retry line, then the end


def test_the_registry_tells_its_listener_and_keeps_the_latest_ended_runs(fork: Path) -> None:
    scenario = load_scenario(fork)
    runs = Runs({"fork": scenario}, ServeOptions())
    heard: list[tuple[str, str]] = []
    runs.listener = lambda change, run: heard.append((change, run.id))
    first = runs.create("fork", {"strict": True})
    fresh = runs.reset(first.id)
    assert fresh is not None and fresh is not first and fresh.id == first.id and fresh.settings.strict
    assert runs.end(first.id) is fresh and runs.find(first.id) == (fresh, True)
    default = runs.default("fork")
    assert heard == [("created", first.id), ("reset", first.id), ("ended", first.id), ("created", default.id)]
    for _ in range(ENDED_KEPT):
        runs.end(runs.create("fork").id)
    assert runs.find(first.id) is None and len(list(runs.listing())) == ENDED_KEPT + 1  # the default is live
    assert runs.reset("nope") is None


def test_the_api_gives_a_runs_report_as_html_live_and_once_ended(fork: Path) -> None:
    with mockllm.Server(fork) as server:
        run = server.run("fork")
        assert "in progress" in run.report_html()  # a report of the run as it stands
        run.end()
        assert "replayed as recorded" not in run.report_html() and "never called" in run.report_html()


async def test_the_async_api_gives_it_too(fork: Path) -> None:
    async with mockllm.AsyncServer(fork) as server:
        run = await server.run("fork")
        await run.end()
        assert "<!doctype html>" in await run.report_html()
        with pytest.raises(mockllm.AdminError, match="404 unknown_run"):
            await server.fetch_text(f"{server.url}/_mockllm/runs/nope/report.html")
