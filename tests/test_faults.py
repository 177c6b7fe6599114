"""Faults on demand and retries that stay in step, through the official SDKs with their default
retry settings, and the retry rule as a state machine with no socket."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from mockllm.options import RunSettings, ServeOptions
from mockllm.replay.faults import Fault, FaultError, FaultPlan, parse_fault
from mockllm.replay.outcome import Stream, Whole
from mockllm.replay.run import Run
from mockllm.scenario.load import load_scenario
from mockllm.wire import DEFAULT
from tests.conftest import http, new_run, run_state
from tests.logbuilder import text_call, write_override, write_sessions

CALLS = ["ZERO", "ONE", "TWO", "THREE"]


@pytest.fixture
def four(tmp_path: Path) -> Path:
    """One session `p` of four text calls, each answering with its own word, several deltas each."""
    return write_sessions(tmp_path / "four", {"p": [text_call(f"{word} is the answer here") for word in CALLS]})


OPEN: list[openai.AsyncOpenAI | anthropic.AsyncAnthropic] = []


@pytest.fixture(autouse=True)
async def close_clients() -> Any:
    """Every SDK client a test makes is closed after it, on its own loop."""
    yield
    while OPEN:
        await OPEN.pop().close()


def chat_client(base: str, **options: Any) -> openai.AsyncOpenAI:
    client = openai.AsyncOpenAI(base_url=base, api_key="unused", **options)
    OPEN.append(client)
    return client


async def ask_stream(client: openai.AsyncOpenAI, n: int) -> str:
    stream = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": f"question {n}"}], stream=True,
        extra_headers={"x-mockllm-session": "p"})
    return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])


async def report(base_url: str, run: str) -> dict[str, Any]:
    status, body = await http("DELETE", f"{base_url}/_mockllm/runs/{run}")
    assert status == 200 and isinstance(body, dict)
    return body


# -- faults through the SDKs ----------------------------------------------------------------------

async def test_a_429_with_retry_after_is_retried_by_the_sdk_and_the_run_ends_clean(serve, four) -> None:
    server = await serve(four)
    run, base = await new_run(server.base_url, "four", faults=[{"call": 1, "status": 429, "retry_after": 0.01}])
    client = chat_client(base)  # the SDK's default retries
    answers = [await ask_stream(client, n) for n in range(4)]
    assert [a.split()[0] for a in answers] == CALLS
    state = await run_state(server.base_url, run)
    calls = [(r["call"], r["status"], r["fault"], r["retry"]) for r in state["journal"]]
    assert calls == [(0, 200, None, False), (1, 429, "status 429 retry-after 0.01s", False), (1, 200, None, True),
                     (2, 200, None, False), (3, 200, None, False)]
    final = await report(server.base_url, run)
    assert final["consumed"] and final["failures"] == [], final
    assert final["faults"] == [{"session": "p", "file": "session.jsonl", "call": 1,
                                "fault": "status 429 retry-after 0.01s"}]
    assert [s["retries"] for s in final["sessions"]] == [1]


async def test_a_status_fault_carries_the_providers_retry_headers(serve, four) -> None:
    server = await serve(four)
    _, base = await new_run(server.base_url, "four", faults=[{"call": 0, "status": 503, "retry_after": 2}])
    async with aiohttp.ClientSession() as session, session.post(
            f"{base}/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "q"}]}) as got:
        body = await got.json()
        assert got.status == 503 and got.headers["retry-after"] == "2" and got.headers["x-should-retry"] == "true"
    assert set(body["error"]) == {"message", "type", "param", "code"} and "fault" in body["error"]["message"]


async def test_a_529_on_an_anthropic_route_raises_overloaded_error(serve, four) -> None:
    server = await serve(four)
    _, base = await new_run(server.base_url, "four", faults=[{"call": 0, "status": 529}])
    client = anthropic.AsyncAnthropic(base_url=base.removesuffix("/v1"), api_key="x", max_retries=0)
    OPEN.append(client)
    with pytest.raises(anthropic.APIStatusError) as caught:
        await client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "q"}],
                                     extra_headers={"x-mockllm-session": "p"})
    assert type(caught.value).__name__ == "OverloadedError", type(caught.value)
    assert caught.value.status_code == 529
    # A retry after it gets the recorded answer.
    message = await client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "q"}],
                                           extra_headers={"x-mockllm-session": "p"})
    assert message.content[0].text.startswith("ZERO")  # type: ignore[union-attr]


async def test_a_cut_stream_fails_the_sdk_and_the_applications_retry_gets_it_whole(serve, four) -> None:
    server = await serve(four)
    run, base = await new_run(server.base_url, "four", faults=[{"call": 0, "cut_after": 3}])
    client = chat_client(base, max_retries=0)
    seen: list[str] = []
    with pytest.raises(openai.APIConnectionError):  # the body ended early, as on a reset
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "q"}], stream=True,
            extra_headers={"x-mockllm-session": "p"})
        async for chunk in stream:
            seen.append(chunk.choices[0].delta.content or "" if chunk.choices else "")
    assert 0 < len(seen) <= 3 and not "".join(seen).endswith("here")
    assert (await ask_stream(client, 0)) == "ZERO is the answer here"  # the application retries: whole
    assert (await ask_stream(client, 1)).startswith("ONE")
    state = await run_state(server.base_url, run)
    assert [(r["call"], r["fault"]) for r in state["journal"]] == [(0, "cut after 3 events"), (0, None), (1, None)]


async def test_a_client_that_leaves_mid_stream_and_resends_gets_the_same_entry(serve, four) -> None:
    server = await serve(four, pace="40")  # 40 ms per event: the client leaves after the first ones
    run, base = await new_run(server.base_url, "four")
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "question 0"}]}
    headers = {"x-mockllm-session": "p"}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{base}/chat/completions", json=body, headers=headers) as got:
            await got.content.readuntil(b"\n\n")  # one event, then the client gives up
        await asyncio.sleep(0.1)  # the server notices the client left
        async with session.post(f"{base}/chat/completions", json=body, headers=headers) as got:
            assert b"ZERO" in await got.read()  # the same body again: the same entry
        assert (await ask_stream(chat_client(base), 1)).startswith("ONE")  # later calls unshifted
    state = await run_state(server.base_url, run)
    assert [(r["call"], r["retry"]) for r in state["journal"]] == [(0, False), (0, True), (1, False)]


async def test_a_recorded_throw_and_its_recorded_retry_replay_as_recorded(serve, tmp_path) -> None:
    throw = {"kind": "throw", "message": "slow down", "code": "RATE_LIMIT"}
    folder = write_override(tmp_path / "t", [throw, {"kind": "chunks", "chunks": text_call("after the retry")}])
    server = await serve(folder.parent if folder.name.endswith(".json") else folder)
    client = chat_client(server.base_url + "/v1")  # default retries: the SDK retries the 429 itself
    reply = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert reply.choices[0].message.content == "after the retry"


async def test_a_seeded_fault_plan_hits_the_same_calls_on_every_run(serve, four) -> None:
    server = await serve(four)
    plans = []
    for _ in range(2):
        run, base = await new_run(server.base_url, "four", faults=[{"rate": 0.5, "seed": 7, "status": 500}])
        client = chat_client(base, max_retries=3)
        for n in range(4):
            await ask_stream(client, n)
        state = await run_state(server.base_url, run)
        plans.append([r["call"] for r in state["journal"] if r["fault"]])
    assert plans[0] == plans[1] and plans[0], plans
    expected = [c for c in range(4) if Fault(rate=0.5, seed=7, status=500).hits_seeded("session.jsonl", c)]
    assert plans[0] == expected


async def test_a_serve_fault_applies_to_the_default_runs(serve, four) -> None:
    server = await serve(four, faults=('{"call": 0, "status": 500}',))
    client = chat_client(server.base_url + "/v1", max_retries=0)
    with pytest.raises(openai.InternalServerError):
        await ask_stream(client, 0)
    assert (await ask_stream(client, 0)).startswith("ZERO")


async def test_a_bad_fault_is_refused_with_its_field_named(serve, four) -> None:
    server = await serve(four)
    status, body = await http("POST", f"{server.base_url}/_mockllm/runs",
                              {"scenario": "four", "faults": [{"call": 1, "status": 200}]})
    assert status == 400 and '"status" must be a 4xx or 5xx' in body["error"]["message"]  # type: ignore[index]
    status, body = await http("POST", f"{server.base_url}/_mockllm/runs",
                              {"scenario": "four", "faults": [{"session": "nobody", "call": 0, "status": 500}]})
    assert status == 400 and "'nobody' is no recorded session" in body["error"]["message"]  # type: ignore[index]


# -- the rules, with no socket --------------------------------------------------------------------

@pytest.mark.parametrize(("fault", "problem"), [
    ({"status": 500}, 'give "call"'),
    ({"call": 0}, "it does nothing"),
    ({"call": 0, "status": 500, "cut_after": 1}, "cannot both"),
    ({"rate": 2, "seed": 1, "status": 500}, "between 0 and 1"),
    ({"rate": 0.5, "status": 500}, '"seed"'),
    ({"call": 0, "cut_after": 2, "retry_after": 1}, '"retry_after" goes with a "status"'),
    ({"call": 0, "status": 500, "colour": "red"}, "colour"),
], ids=["no-call", "no-effect", "status-and-cut", "rate", "no-seed", "retry-after-alone", "unknown-field"])
def test_a_fault_that_cannot_be_says_why(fault: dict[str, Any], problem: str) -> None:
    with pytest.raises(FaultError, match=problem):
        parse_fault(fault)


def test_faults_parse_from_the_command_line_and_objects_alike() -> None:
    options = ServeOptions(faults=('{"call": 2, "status": 429, "times": 2}', {"call": 0, "delay_ms": 5}))
    assert options.faults == (Fault(call=2, status=429, times=2), Fault(call=0, delay_ms=5))


def test_a_targeted_fault_hits_its_times_consecutive_attempts_then_lets_through() -> None:
    plan = FaultPlan([Fault(call=1, status=500, times=2)], [("p", "session.jsonl"), ("c", "session.1.jsonl")])
    assert [plan.attempt(0, 1)[1] is not None for _ in range(3)] == [True, True, False]
    assert plan.attempt(1, 1)[1] is None  # the primary's only, by default


def ask(run: Run, text: str, retry_count: int | None = None) -> Stream | Whole:
    body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": text}]}).encode()
    headers = () if retry_count is None else ((b"X-Stainless-Retry-Count", str(retry_count).encode()),)
    outcome = run.answer("p", DEFAULT.decode_request(body), DEFAULT, headers, body)
    assert isinstance(outcome, Stream | Whole)
    return outcome


def test_the_retry_rule_after_a_client_left(four: Path) -> None:
    run = Run("r", load_scenario(four))
    first = ask(run, "q0")
    assert isinstance(first, Stream)
    run.left_early(first)
    assert ask(run, "q0").record.call == 0  # the same body: the same entry again
    run.left_early(ask(run, "q1"))  # type: ignore[arg-type]
    assert ask(run, "q1 with another body", retry_count=1).record.call == 1  # the SDK's retry marker
    run.left_early(ask(run, "q2"))  # type: ignore[arg-type]
    assert ask(run, "an application's next question").record.call == 3  # not a retry: it moves on
    assert run.bound(0).retries == 2  # type: ignore[union-attr]


def test_a_status_fault_keeps_the_cursor_and_counts_the_retry(four: Path) -> None:
    run = Run("r", load_scenario(four), RunSettings(faults=(Fault(call=0, status=429),)))
    faulted = ask(run, "q0")
    assert isinstance(faulted, Whole) and faulted.status == 429 and faulted.headers == {"x-should-retry": "true"}
    assert ask(run, "q0").record.call == 0
    assert run.bound(0).retries == 1 and [f.fault for f in run.faults_served] == ["status 429"]  # type: ignore[union-attr]


def test_a_cut_fault_on_a_whole_request_drops_it_and_keeps_the_entry(four: Path) -> None:
    run = Run("r", load_scenario(four), RunSettings(faults=(Fault(call=0, cut_after=3),)))
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "q"}]}).encode()
    cut = run.answer("p", DEFAULT.decode_request(body), DEFAULT, (), body)
    assert isinstance(cut, Stream) and cut.cut_after == 0
    again = run.answer("p", DEFAULT.decode_request(body), DEFAULT, (), body)
    assert isinstance(again, Whole) and b"ZERO" in again.body
