"""Pacing (`--pace burst|recorded|MS`, `--speed F`, per run in `POST /_mockllm/runs`), over real sockets.

Arrival times are taken by real clients (the openai and anthropic SDKs' stream iterators, or
aiohttp) from just before the request is sent, so an event can never arrive before its offset
(less a few ms of timer rounding); the upper bound is generous so a loaded CI host passes.
Cancellation and shutdown are observed in the server's own state (its pacer, the run's journal)
rather than by waiting out the schedule.
"""

from __future__ import annotations

import asyncio
import logging
import time
from array import array
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from mockllm.dsh.writer import write_log
from mockllm.replay.catalog import Catalog
from mockllm.replay.pacing import MAX_GAP_MS, chunk_offsets, frame_offsets
from mockllm.scenario.load import load_scenario
from mockllm.script.derive import Timing
from mockllm.script.entries import ChunksEntry
from mockllm.server.app import SERVER_KEY, MockServer
from mockllm.server.running import RunningServer
from mockllm.wire import DIALECTS
from mockllm.wire.reply import AT_END, AT_START
from tests.conftest import http, new_run, run_state
from tests.logbuilder import CORPUS, corpus_or_skip, header

EARLY_MS = 5  # an event may arrive this much before its offset (timer rounding), never more
LATE_MS = 150  # ... and at most this much after it, on a loaded host
T0 = 1_700_000_000_000  # the recorded step's start, epoch ms

# The recorded call: a 60 ms wait before the first chunk, then gaps of 40 and 80 ms.
FIRST_WAIT = 60
TEXT = [("Hel", 60), ("lo", 100), (" there", 180)]  # (delta, ms after the step started)
CHAT_OFFSETS = [60, 100, 180, 180, 180]  # three deltas, the finish, the usage chunk (with the last chunk)


def chunk_events(turn: int, step: int, at: int, parts: list[tuple[str, int]], *, finish: str = "stop",
                 seq: int = 0) -> list[dict[str, Any]]:
    """A step's start at `at`, then one text call whose deltas come at `at` + each offset."""
    last = parts[-1][1]
    text = "".join(p for p, _ in parts)
    chunks: list[tuple[dict[str, Any], int]] = [({"type": "block-start", "index": 0, "blockType": "text"}, parts[0][1])]
    chunks += [({"type": "text-delta", "index": 0, "text": p}, ms) for p, ms in parts]
    chunks += [({"type": "block-end", "index": 0, "block": {"type": "text", "text": text}}, last),
               ({"type": "usage", "usage": {"inputTokens": 5, "outputTokens": 3}}, last),
               ({"type": "finish", "reason": {"kind": finish}}, last)]
    rows = [{"type": "step/start", "seq": seq, "time": at, "data": {"turn": turn, "step": step}}]
    for k, (chunk, ms) in enumerate(chunks, start=seq + 1):
        rows.append({"type": "assistant/chunk", "seq": k, "time": at + ms,
                     "data": {"turn": turn, "step": step, "chunk": chunk}})
    return rows


def timed_scenario(folder: Path, parts: list[tuple[str, int]] = TEXT, *, finish: str = "stop",
                   calls: int = 1) -> Path:
    """A one-session scenario whose `calls` calls each answer `parts` at their recorded times."""
    rows = [{"type": "turn/start", "seq": 0, "time": T0 - 10, "data": {"turn": 1}},
            {"type": "user/message", "seq": 1, "time": T0 - 5,
             "data": {"content": [{"type": "text", "text": "hi"}], "role": "user"}}]
    for step in range(1, calls + 1):
        rows += chunk_events(1, step, T0 + step * 10_000, parts, finish=finish, seq=len(rows))
    folder.mkdir(parents=True, exist_ok=True)
    write_log(folder / "session.jsonl", header("p"), rows)
    return folder


def openai_client(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)


async def chat_arrivals(base_url: str, **options: Any) -> tuple[list[float], list[Any]]:
    """One streamed chat call: each chunk's arrival in ms after the request was sent, and the chunks."""
    async with openai_client(base_url) as client:
        # A process's first chat call builds the SDK's request machinery (~50 ms, not the server's):
        # made first on a run that does not exist (a 404), so the timed call does not pay it.
        with pytest.raises(openai.NotFoundError):
            await client.with_options(base_url=base_url.split("/v1")[0] + "/runs/warm-up/v1").chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        t0 = time.perf_counter()
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True,
            stream_options={"include_usage": True}, **options)
        times, chunks = [], []
        async for chunk in stream:
            times.append((time.perf_counter() - t0) * 1000)
            chunks.append(chunk)
    return times, chunks


def assert_on_time(arrivals: list[float], offsets: list[float]) -> None:
    """Every event no earlier than its offset (less EARLY_MS); the whole stream within LATE_MS of its end."""
    assert len(arrivals) == len(offsets)
    early = [(round(a, 1), o) for a, o in zip(arrivals, offsets, strict=True) if a < o - EARLY_MS]
    assert not early, f"events before their recorded offset: {early} (all: {arrivals})"
    assert arrivals[-1] <= offsets[-1] + LATE_MS, (arrivals, offsets)


def mock_server(server: RunningServer) -> MockServer:
    return server.runner.app[SERVER_KEY]  # type: ignore[union-attr]


async def until(condition: Any, timeout: float = 2.0) -> float:
    """Poll `condition()` (cheap, in-process) until true; returns the seconds it took."""
    t0 = time.perf_counter()
    while not condition():
        assert time.perf_counter() - t0 < timeout, "condition not met in time"
        await asyncio.sleep(0.005)
    return time.perf_counter() - t0


# -- the schedule, without a socket ---------------------------------------------------------


def test_chunk_offsets_keep_recorded_gaps_and_never_go_back() -> None:
    timing = Timing(1000.0, array("d", [1060, 1100, 1090, 1180]))  # the clock steps back 10 ms once
    assert chunk_offsets(timing) == ([60, 100, 100, 190], 0)
    assert chunk_offsets(timing, 2.0) == ([30, 50, 50, 95], 0)


def test_a_clock_jump_is_no_wait_and_is_counted() -> None:
    jump = MAX_GAP_MS * 100
    timing = Timing(1000.0, array("d", [1050, 1050 + jump, 1080 + jump, 1090]))
    assert chunk_offsets(timing) == ([50, 50, 80, 80], 2)  # forward and back again: two jumps


def test_frames_take_their_source_chunks_offset() -> None:
    assert frame_offsets([AT_START, 0, 2, 2, AT_END], [10.0, 20.0, 30.0]) == [0, 10, 30, 30, 30]
    assert frame_offsets([AT_START, AT_END], []) == [0, 0]


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_every_rendered_frame_names_the_chunk_it_came_from(dialect: Any) -> None:
    corpus_or_skip()
    checked = 0
    for folder in sorted(CORPUS.glob("*/*/")):
        scenario = load_scenario(folder)
        catalog = Catalog(scenario)
        for script, session in enumerate(scenario.sessions):
            for call, entry in enumerate(session.entries):
                reply = catalog.reply(dialect, script, call, None, None)
                if reply.status != 200:
                    continue
                sources = list(reply.sources)
                assert len(sources) == len(reply.frames), (folder.name, session.file, call)
                chunks = len(entry.chunks) if isinstance(entry, ChunksEntry) else 2
                assert all(AT_START <= s < chunks for s in sources)
                assert sources == sorted(sources), "frames follow the chunks' order"
                checked += 1
    assert checked > 20


# -- recorded pace --------------------------------------------------------------------------


@pytest.mark.parametrize("speed", [1.0, 2.0])
async def test_recorded_pace_keeps_the_recorded_wait_and_gaps(serve, tmp_path: Path, speed: float) -> None:
    server = await serve(timed_scenario(tmp_path / "timed"), pace="recorded", speed=speed)
    times, chunks = await chat_arrivals(f"{server.base_url}/v1")
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello there"
    assert_on_time(times, [ms / speed for ms in CHAT_OFFSETS])
    if speed == 2.0:
        assert times[-1] < 180 - EARLY_MS  # twice as fast: sooner than the recorded span


async def test_fixed_pace_sends_one_event_per_gap(serve, tmp_path: Path) -> None:
    server = await serve(timed_scenario(tmp_path / "timed"), pace="20")
    times, _ = await chat_arrivals(f"{server.base_url}/v1")
    assert_on_time(times, [20.0 * k for k in range(len(times))])  # frame k at k * 20 ms; [DONE] after


async def test_a_run_sets_its_own_pace_and_the_default_stays_burst(serve, tmp_path: Path) -> None:
    folder = timed_scenario(tmp_path / "timed", [("a", 100), ("b", 300)])
    server = await serve(folder)
    _, base = await new_run(server.base_url, "timed", pace="recorded", speed=4)
    times, _ = await chat_arrivals(base)
    assert_on_time(times, [25, 75, 75, 75])
    burst, _ = await chat_arrivals(f"{server.base_url}/v1")
    assert burst[-1] < 75 - EARLY_MS  # the default run is not paced
    state = await run_state(server.base_url, base.split("/")[-2])
    assert state["settings"]["pace"] == "recorded" and state["settings"]["speed"] == 4
    assert state["pacing"] == []


# The dialects under /v1 that take these bodies; Gemini's and Ollama's pacing is tested with their SDKs.
@pytest.mark.parametrize("dialect", [d for d in DIALECTS if d.name in ("chat", "anthropic", "responses")],
                         ids=lambda d: d.name)
async def test_a_paced_stream_has_the_burst_streams_bytes(serve, tmp_path: Path, dialect: Any) -> None:
    folder = timed_scenario(tmp_path / "timed", [("a", 5), ("b", 10), ("c", 15)], calls=2)
    server = await serve(folder)
    bodies = []
    async with aiohttp.ClientSession() as session:
        for pace in ("burst", "recorded"):
            _, base = await new_run(server.base_url, "timed", pace=pace)
            request: dict[str, Any] = {"model": "m", "stream": True, "max_tokens": 9}
            request |= ({"input": "hi"} if dialect.name == "responses" else
                        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]} if dialect.name == "gemini" else
                        {"messages": [{"role": "user", "content": "hi"}], "stream_options": {"include_usage": True}})
            # A dialect's first route, under the run's base root (Gemini's names the model and the verb).
            route = dialect.routes[0].format(model="m", verb="streamGenerateContent")
            async with session.post(base.removesuffix("/v1") + route, json=request) as response:
                assert response.status == 200
                bodies.append(await response.read())
    assert bodies[0] == bodies[1]


async def test_anthropic_envelope_goes_out_at_once_and_deltas_when_recorded(serve, tmp_path: Path) -> None:
    server = await serve(timed_scenario(tmp_path / "timed", calls=2), pace="recorded")
    client = anthropic.AsyncAnthropic(base_url=server.base_url, api_key="x", max_retries=0)
    async with client:
        for _ in range(2):  # the first call warms the SDK (its first parse of each event type is slow)
            arrivals: dict[str, list[float]] = {}
            t0 = time.perf_counter()
            stream = await client.messages.create(model="m", max_tokens=9, stream=True,
                                                  messages=[{"role": "user", "content": "hi"}])
            async for event in stream:
                arrivals.setdefault(event.type, []).append((time.perf_counter() - t0) * 1000)
    assert_on_time(arrivals["content_block_delta"], [60, 100, 180])
    assert arrivals["message_start"][0] < arrivals["content_block_delta"][0] - 30  # before the model's first token
    assert_on_time(arrivals["message_stop"], [180])


async def test_responses_deltas_come_when_recorded(serve, tmp_path: Path) -> None:
    server = await serve(timed_scenario(tmp_path / "timed", calls=2), pace="recorded")
    async with openai_client(f"{server.base_url}/v1") as client:
        for _ in range(2):  # the first call warms the SDK (its first parse of each event type is slow)
            arrivals: dict[str, list[float]] = {}
            t0 = time.perf_counter()
            stream = await client.responses.create(model="m", input="hi", stream=True)
            async for event in stream:
                arrivals.setdefault(event.type, []).append((time.perf_counter() - t0) * 1000)
    assert_on_time(arrivals["response.output_text.delta"], [60, 100, 180])
    assert arrivals["response.created"][0] < arrivals["response.output_text.delta"][0] - 30
    assert_on_time(arrivals["response.completed"], [180])


# -- real trees -----------------------------------------------------------------------------


async def _replay_tree(base: str, scenario_dir: Path) -> float:
    """Every call of every session through the openai SDK, one after another: the seconds it took."""
    scenario = load_scenario(scenario_dir)
    t0 = time.perf_counter()
    for number, session in enumerate(scenario.sessions):
        client = openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=0,
                                    default_headers={"x-mockllm-session": f"live-{number}"})
        async with client:
            for _ in session.entries:
                stream = await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "q"}], stream=True)
                async for _chunk in stream:
                    pass
    return time.perf_counter() - t0


async def test_a_real_tree_takes_its_recorded_span_paced_and_a_fraction_of_it_in_burst(serve) -> None:
    corpus_or_skip()
    folder = CORPUS / "v0-unpacked" / "acp-agent--tool-call-turn"
    timings = [t for s in load_scenario(folder).sessions for t in s.timings]
    assert timings and all(t is not None for t in timings)
    span = sum(t.times[-1] - t.started for t in timings if t is not None) / 1000  # ~1.9 s in two calls
    server = await serve(folder)
    took: dict[str, float] = {}
    for pace, speed in (("recorded", 1), ("recorded", 2), ("burst", 1)):
        run, base = await new_run(server.base_url, folder.name, pace=pace, speed=speed)
        took[f"{pace} x{speed}"] = await _replay_tree(base, folder)
        _, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
        assert isinstance(report, dict) and report["consumed"] and report["pacing"] == [], report
    assert span - 0.01 <= took["recorded x1"] <= span + 0.5, (span, took)
    assert span / 2 - 0.01 <= took["recorded x2"] <= span / 2 + 0.5, (span, took)
    assert took["burst x1"] < span / 4, (span, took)


async def test_clock_jumps_in_a_real_tree_are_not_waited_for(serve) -> None:
    corpus_or_skip()
    folder = CORPUS / "v0-packed" / "acp-agent--packed-chunks"  # its clocks differ by weeks
    server = await serve(folder, pace="recorded", speed=4)
    run, base = await new_run(server.base_url, folder.name)
    took = await _replay_tree(base, folder)
    assert took < 2.0  # a sane span (~1.8 s recorded, / 4), not weeks
    state = await run_state(server.base_url, run)
    assert [(n["file"], n["call"], n["served"]) for n in state["pacing"]] == [
        ("session.jsonl", 0, "recorded"), ("session.jsonl", 1, "recorded")]
    assert "clock jump" in state["pacing"][0]["note"]


async def test_a_projected_fixture_is_served_burst_and_the_report_says_why(serve, caplog) -> None:
    corpus_or_skip()
    folder = CORPUS / "v0-projected" / "acp-agent--text-turn"
    server = await serve(folder, pace="recorded")
    run, base = await new_run(server.base_url, folder.name)
    with caplog.at_level(logging.WARNING, logger="mockllm"):
        took = await _replay_tree(base, folder)
        await _replay_tree(f"{server.base_url}/v1", folder)  # the default run: noted in its own report
    assert took < 1.0
    _, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
    assert isinstance(report, dict) and report["consumed"]
    assert [(n["file"], n["call"], n["served"]) for n in report["pacing"]] == [("session.jsonl", 0, "burst")]
    assert "projected" in report["pacing"][0]["note"] and "recorded" in report["pacing"][0]["note"]
    warnings = [r.getMessage() for r in caplog.records if "projected" in r.getMessage()]
    assert len(warnings) == 2 and run in warnings[0]  # once per run and file


# -- leaving, holding, shutting down --------------------------------------------------------


@pytest.fixture
async def long_wait(serve, tmp_path: Path) -> AsyncIterator[tuple[RunningServer, str]]:
    """A server whose only call sends its first delta at once and its second after 30 s."""
    server = await serve(timed_scenario(tmp_path / "slow", [("first", 0), ("second", 30_000)]), pace="recorded")
    yield server, f"{server.base_url}/v1/chat/completions"


async def _first_event(response: aiohttp.ClientResponse) -> bytes:
    line = await response.content.readuntil(b"\n\n")
    assert b'"first"' in line, line
    return line


async def test_a_client_that_leaves_mid_wait_frees_its_handler_at_once(long_wait) -> None:
    server, url = long_wait
    mock = mock_server(server)
    async with aiohttp.ClientSession() as session:
        response = await session.post(url, json={"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                                 "stream": True})
        await _first_event(response)
        await until(lambda: mock.pacer.sleeping == 1)
        response.close()  # the client leaves during the 30 s wait
        took = await until(lambda: mock.pacer.sleeping == 0)
    assert took < 1.0
    run = mock.runs.default("slow")
    await until(lambda: all(r.duration_ms is not None for r in run.journal))  # the handler has ended
    record = next(iter(run.journal))
    assert record.duration_ms is not None and record.duration_ms < 5_000


async def test_shutdown_sends_a_paced_streams_rest_at_once(long_wait) -> None:
    server, url = long_wait
    mock = mock_server(server)
    async with aiohttp.ClientSession() as session:
        response = await session.post(url, json={"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                                 "stream": True, "stream_options": {"include_usage": True}})
        await _first_event(response)
        await until(lambda: mock.pacer.sleeping == 1)
        t0 = time.perf_counter()
        await server.close()
        took = time.perf_counter() - t0
        rest = await response.content.read()
    assert took < 0.8  # not the 30 s schedule, nor the 1 s shutdown grace period
    assert b'"second"' in rest and rest.endswith(b"data: [DONE]\n\n")  # the whole answer, sooner


async def test_an_aborted_call_is_paced_then_held(serve, tmp_path: Path) -> None:
    server = await serve(timed_scenario(tmp_path / "aborted", [("a", 40), ("b", 80)], finish="aborted"),
                         pace="recorded")
    mock = mock_server(server)
    async with aiohttp.ClientSession() as session:
        t0 = time.perf_counter()
        response = await session.post(f"{server.base_url}/v1/chat/completions", json={
            "model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True})
        arrivals = []
        for _ in range(3):  # two deltas and the aborted finish
            await response.content.readuntil(b"\n\n")
            arrivals.append((time.perf_counter() - t0) * 1000)
        assert_on_time(arrivals, [40, 80, 80])
        run = mock.runs.default("aborted")
        await until(lambda: run.holding == 1)
        response.close()
        await until(lambda: run.holding == 0)


async def test_a_hangs_prefix_is_paced_then_it_holds(serve, tmp_path: Path) -> None:
    folder = tmp_path / "hang"
    folder.mkdir()
    (folder / "replay.override.json").write_text('[{"kind": "hang"}]')
    server = await serve(folder, pace="50")
    mock = mock_server(server)
    async with aiohttp.ClientSession() as session:
        response = await session.post(f"{server.base_url}/v1/messages", json={
            "model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}], "stream": True})
        events = []
        t0 = time.perf_counter()
        for _ in range(3):  # message_start, content_block_start, the `partial` delta
            events.append(await response.content.readuntil(b"\n\n"))
        took = (time.perf_counter() - t0) * 1000
        assert b"partial" in events[2]
        assert took >= 100 - EARLY_MS  # three events 50 ms apart
        run = mock.runs.default("hang")
        await until(lambda: run.holding == 1)
        response.close()
        await until(lambda: run.holding == 0)
    state = await run_state(server.base_url, run.id)
    assert state["pacing"] == []  # a fixed pace needs no recorded times
