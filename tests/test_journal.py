"""A run's journal and failures are bounded, and say what each call was and how it was answered."""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import pytest

from mockllm.errors import ReplayFailure
from mockllm.replay.journal import BODY_KEPT, Failures, Journal
from tests.conftest import http, new_run, run_state
from tests.logbuilder import text_call, write_sessions


def _failure(code: str) -> ReplayFailure:
    return ReplayFailure(410, code, "m", "s", 0)


def test_the_journal_keeps_the_last_calls_and_counts_the_rest() -> None:
    journal = Journal(limit=3)
    for number in range(5):
        journal.record("chat", f"live-{number}", True, ((b"X-Request-Id", b"n"), (b"Authorization", b"k")), b"{}")
    assert [r.session for r in journal] == ["live-2", "live-3", "live-4"]
    assert (journal.total, journal.dropped) == (5, 2)
    assert next(iter(journal)).as_dict()["headers"] == {"x-request-id": "n"}  # only the client's x- headers, lowercased


def test_a_long_body_is_cut_when_it_is_recorded() -> None:
    record = Journal().record("chat", "s", False, (), b"x" * (BODY_KEPT + 10))
    assert len(record.body) == BODY_KEPT
    assert record.as_dict()["body_truncated"] is True
    short = Journal().record("chat", "s", False, (), b'{"a": 1}').as_dict()
    assert (short["body"], short["body_truncated"]) == ('{"a": 1}', False)


def test_failures_keep_the_first_whole_and_count_the_rest_per_code() -> None:
    failures = Failures(kept=2)
    for code in ["a", "b", "a", "c", "a"]:
        failures.add(_failure(code))
    assert [f.code for f in failures.first] == ["a", "b"]
    assert dict(failures.more) == {"a": 2, "c": 1}
    assert len(failures) == 5


@pytest.fixture
def one_call(tmp_path: Path) -> Path:
    return write_sessions(tmp_path / "one", {"p": [text_call("only answer")]})


async def _post(base_url: str, body: bytes, headers: dict[str, str]) -> int:
    async with aiohttp.ClientSession() as session, session.post(
        f"{base_url}/chat/completions", data=body, headers={"Content-Type": "application/json", **headers},
    ) as response:
        await response.read()
        return response.status


async def test_a_retry_storm_past_the_end_stays_bounded(serve, one_call):
    server = await serve(one_call, journal_limit=4)
    run, base = await new_run(server.base_url, "one")
    body = b'{"model": "m", "messages": [{"role": "user", "content": "again"}]}'
    statuses = [await _post(base, body, {"x-mockllm-session": "p"}) for _ in range(110)]
    assert statuses == [200] + [410] * 109
    state = await run_state(server.base_url, run)
    assert len(state["journal"]) == 4 and state["journal_dropped"] == 106
    # Past the end, each record names the call asked for; no entry was served.
    assert [(j["call"], j["kind"], j["script"]) for j in state["journal"]] == [
        (n, None, "session.jsonl") for n in range(106, 110)]
    assert {(j["status"], j["error"]) for j in state["journal"]} == {(410, "script_exhausted")}
    assert len(state["failures"]) == 100
    assert state["failures_more"] == {"script_exhausted": 9}


async def test_a_journal_record_says_what_came_and_how_it_was_answered(serve, one_call):
    server = await serve(one_call)
    run, base = await new_run(server.base_url, "one")
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hello"}], "stream": true}'
    assert await _post(base, body, {"x-mockllm-session": "live-a", "x-request-id": "t1"}) == 200
    [record] = (await run_state(server.base_url, run))["journal"]
    assert record["session"] == "live-a" and record["script"] == "session.jsonl"
    assert (record["call"], record["kind"], record["status"], record["error"]) == (0, "ChunksEntry", 200, None)
    assert (record["dialect"], record["stream"], record["body"]) == ("chat", True, body.decode())
    assert record["headers"] == {"x-mockllm-session": "live-a", "x-request-id": "t1"}
    assert isinstance(record["at"], float) and record["duration_ms"] >= 0


async def test_log_level_info_logs_one_line_per_call(serve, one_call, caplog):
    server = await serve(one_call)
    _, base = await new_run(server.base_url, "one")
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hello"}]}'
    with caplog.at_level(logging.INFO, logger="mockllm"):
        assert await _post(base, body, {"x-mockllm-session": "live-a"}) == 200
        assert await _post(base, body, {"x-mockllm-session": "live-a"}) == 410
    lines = [r.getMessage() for r in caplog.records if r.name == "mockllm"]
    assert len(lines) == 2
    assert "live-a (session.jsonl) call 0 (0-based): 200" in lines[0]
    assert "call 1 (0-based): 410 script_exhausted" in lines[1]


async def test_the_final_report_counts_failures_past_those_kept(serve, one_call):
    server = await serve(one_call)
    run, base = await new_run(server.base_url, "one")
    body = b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}'
    for _ in range(3):
        await _post(base, body, {"x-mockllm-session": "p"})
    status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
    assert status == 200 and isinstance(report, dict)
    assert [f["code"] for f in report["failures"]] == ["script_exhausted", "script_exhausted"]
    assert report["failures_more"] == {}
