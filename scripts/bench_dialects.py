#!/usr/bin/env python3
"""Server CPU per streamed request in each wire dialect, for calls the server has not rendered before.

    python3 scripts/bench_dialects.py                 3 rounds of 1,024 requests per dialect
    python3 scripts/bench_dialects.py --quick         a tiny configuration, for tests

What a test suite costs: each test replays its scenario once, so every call is answered once, in
the one dialect its agent speaks. One `mockllm serve` process serves a suite of copies of the
streaming benchmark's scenario (bench.py's: 64 text deltas per call, usage); every timed request
asks for a call of a copy no other request has touched, each copy taken by one fresh run (its
sessions named by header), so each dialect pays for everything a scenario's first replay costs.
Every request matches its recorded call, as in a suite that passes. Two servers in turn, one per
configuration (`serve --warm`):
- cold (`--warm none`): every call rendered on its first request, in whatever dialect asks, chat
  completions included: each dialect pays its own first render, and the 1.15x target is judged here.
  (By default a server renders chat completions at start-up; comparing other dialects' first
  renders with chat's rendered before timing would hide chat's render, not measure the others'.)
- warm (`--warm all`): every call rendered at start-up, as a suite recorded by mockllm is in the
  dialect it was recorded in, and as chat completions is by default: what serving costs once
  rendered, where the floor target is judged; its ratios to chat completions are information.
A warm-up pass in each dialect, on a copy no timed request reads, opens the connections and runs
every code path once.
The floor (issue 28): scripts/bench_baseline.py --writes one, a bare aiohttp handler on uvloop
writing the whole pre-encoded chat completions answer in one write, gets the same number of
requests per round, interleaved with the dialects' passes on the same connections' pattern; each
dialect's CPU per request over the floor's must stay within 2x (FLOOR_TARGET) warm: the issue
measures a rendered call's serving (bench.py's burst, its 0.14 ms against 0.057), and the floor
renders nothing. Cold, the ratio is information: it adds each call's first render in the running
server (35-55 us, where the floor's whole request costs 55-85), which a server recorded in the
client's dialect, or warmed (`serve --warm`), pays at start-up instead.
Each round sends the same number of streamed requests in each dialect (chat completions, Anthropic
Messages, OpenAI Responses, Gemini, Ollama, Bedrock Converse), and as many OpenAI embeddings requests (`embeddings`:
not a dialect, but served beside them: each request a distinct recorded input of its copy's
`embeddings.json`, 1,536 dimensions, base64 asked and recorded as the openai SDK does; its first
request on a copy pays for that copy's comparison index, as a dialect's first request pays for its
first render), one scenario copy per dialect in turn, the order
rotating, over 32 keep-alive connections. The server's CPU time (/proc schedstat, every thread's)
over each dialect's requests gives its CPU per request, over all rounds; the ratio is to chat
completions' over the same rounds (each round's own ratio is shown as a range). Target: every
dialect within 1.15x of chat completions, Bedrock and embeddings included, cold. Exit 0 when met,
1 when not (the floor is reported, and does not set the exit status).

First renders are also timed apart, in this process, with nothing else in the measure: every entry
of the scenario read once (`render.read`, what the catalog keeps for every dialect), then rendered
afresh from its reading in each dialect (`Dialect.render`), CPU per render and its ratio to chat
completions'; the reading's own cost is shown beside them (a start-up warm pays it, and every
dialect's first render where no other dialect rendered the call before), and the ratio of reading
plus rendering (the entry rendered afresh, as the column measured before the reading existed).
Passes of the dialects alternate, the order rotating: the best pass of each is kept.
Everything binds 127.0.0.1; the server is stopped at exit.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

import bench  # noqa: E402
from bench_client import mockllm_process, proc_cpu_seconds, root_url  # noqa: E402

from mockllm.scenario.embeddings import OPENAI, RecordedEmbedding, write_embeddings  # noqa: E402
from mockllm.scenario.load import load_scenario  # noqa: E402
from mockllm.wire import DIALECTS  # noqa: E402
from mockllm.wire.envelope import Envelope  # noqa: E402
from mockllm.wire.render import read  # noqa: E402

TARGET = 1.15  # issue 26: every dialect's first serve within 1.15x chat completions'
TARGETS: dict[str, float] = {}  # a dialect's own target, where it has another than TARGET
EMBEDDING_DIM = 1536  # text-embedding-3-small's
FLOOR_TARGET = 2.0
CONNECTIONS = 32
WARM = "warm"  # the scenario the warm-up passes read: no timed request does
CALLS_PER_COPY = bench.SESSIONS * bench.CALLS_PER_SESSION


def copy_name(number: int) -> str:
    return f"stream-{number:03d}"


def copies_for(requests: int) -> int:
    """Scenario copies one dialect's round takes: each call is asked for once."""
    return -(-requests // CALLS_PER_COPY)


def copies_of(dialect: str, number: int, requests: int) -> list[str]:
    """The copies `dialect` reads in round `number`: its own, so no work one dialect's first
    requests do on a scenario (a render, a reading, anything cached per call) is found done by
    another's."""
    per_pass = copies_for(requests)
    first = (number * len(BODIES) + list(BODIES).index(dialect)) * per_pass
    return [copy_name(first + k) for k in range(per_pass)]


def write_suite(folder: Path, copies: int) -> None:
    """The warm-up scenario and `copies` copies of the streaming scenario, each its own scenario:
    renders are kept per scenario, so no copy's replies are ever served from another's."""
    bench.write_stream_scenario(folder / WARM)
    for number in range(copies):
        shutil.copytree(folder / WARM, folder / copy_name(number))


def passage(slot: int) -> str:
    """The text of recorded embeddings input `slot` (a retrieval chunk's size)."""
    return f"Passage {slot}: " + " ".join(f"the harbour of city {slot} trades in figs and salt, item {k}."
                                          for k in range(4))


def embeddings_body(slot: int) -> dict[str, Any]:
    return {"model": "text-embedding-3-small", "input": [passage(slot)], "encoding_format": "base64"}


def write_embeddings_file(folder: Path) -> None:
    """A scenario's embeddings.json: one recorded call per slot of a copy, as OpenAI answers it."""
    pairs = []
    for slot in range(CALLS_PER_COPY):
        vector = bytes((slot * 31 + k) % 251 for k in range(EMBEDDING_DIM * 4))
        response = {"object": "list", "model": "text-embedding-3-small", "usage": {"prompt_tokens": 60,
                                                                                   "total_tokens": 60},
                    "data": [{"object": "embedding", "index": 0, "embedding": base64.b64encode(vector).decode()}]}
        pairs.append(RecordedEmbedding(OPENAI, "text-embedding-3-small", embeddings_body(slot), response))
    write_embeddings(folder, pairs)


# How each dialect asks for the same call: (path under the run's base root, without /v1, request body).
_ASK = bench.chat_body()["messages"][1]["content"]
_SYSTEM = bench.chat_body()["messages"][0]["content"]
BODIES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", bench.chat_body()),
    "messages": ("/v1/messages", {"model": "deepseek-v4-flash", "max_tokens": 1024, "system": _SYSTEM,
                                  "messages": [{"role": "user", "content": _ASK}], "stream": True}),
    "responses": ("/v1/responses", {"model": "deepseek-v4-flash", "instructions": _SYSTEM, "input": _ASK,
                                    "stream": True}),
    "gemini": ("/v1beta/models/deepseek-v4-flash:streamGenerateContent?alt=sse",
               {"systemInstruction": {"parts": [{"text": _SYSTEM}]},
                "contents": [{"role": "user", "parts": [{"text": _ASK}]}]}),
    "ollama": ("/api/chat", {"model": "deepseek-v4-flash", "stream": True, "tools": [],
                             "messages": [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": _ASK}]}),
    "embeddings": ("/v1/embeddings", {}),  # a body per request: embeddings_body
    # As botocore sends it: the model id in the path, percent-encoded.
    "bedrock": ("/model/us.deepseek.v4-flash-v1%3A0/converse-stream",
                {"system": [{"text": _SYSTEM}], "messages": [{"role": "user", "content": [{"text": _ASK}]}]}),
}


def target(dialect: str) -> float:
    return TARGETS.get(dialect, TARGET)


async def _pass(http: aiohttp.ClientSession, base: str, pid: int, dialect: str, requests: int,
                scenario: str) -> tuple[int, float]:
    """`requests` streamed calls in `dialect`, each a distinct call of `scenario` (a fresh run of it,
    made before timing); returns how many answered 200 and the server's CPU seconds."""
    path, body = BODIES[dialect]
    data = json.dumps(body).encode()
    # Embeddings: each request asks a distinct recorded input (encoded before timing).
    bodies = [msgspec.json.encode(embeddings_body(slot % CALLS_PER_COPY)) for slot in range(requests)] \
        if dialect == "embeddings" else None
    async with http.post(f"{base}/_mockllm/runs", json={"scenario": scenario}) as created:
        run = (await created.json())["base_url"].removesuffix("/v1") + path
    calls_per_session = bench.CALLS_PER_SESSION
    ok = 0
    slots = iter(range(requests))

    async def worker() -> None:
        nonlocal ok
        for slot in slots:
            async with http.post(run, data=data if bodies is None else bodies[slot], headers={
                    "Content-Type": "application/json",
                    "x-mockllm-session": f"live-{slot // calls_per_session}"}) as response:
                await response.read()
                ok += response.status == 200

    before = proc_cpu_seconds(pid)
    await asyncio.gather(*(worker() for _ in range(CONNECTIONS)))
    return ok, proc_cpu_seconds(pid) - before


async def _floor_pass(http: aiohttp.ClientSession, floor: str, pid: int, requests: int) -> tuple[int, float]:
    """`requests` streamed chat completions calls to the floor server; (answered 200, its CPU seconds)."""
    path, body = BODIES["chat"]
    data = json.dumps(body).encode()
    ok = 0
    slots = iter(range(requests))

    async def worker() -> None:
        nonlocal ok
        for _ in slots:
            async with http.post(floor + path, data=data, headers={"Content-Type": "application/json"}) as response:
                await response.read()
                ok += response.status == 200

    before = proc_cpu_seconds(pid)
    await asyncio.gather(*(worker() for _ in range(CONNECTIONS)))
    return ok, proc_cpu_seconds(pid) - before


async def measure(base: str, pid: int, requests: int, rounds: int,
                  floor: tuple[str, int] | None = None) -> dict[str, Any]:
    dialects = list(BODIES)
    per_round: list[dict[str, float]] = []
    answered = {d: 0 for d in dialects}
    floor_answered = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONNECTIONS)) as http:
        for dialect in dialects:  # warm-up: connections and code paths, on replies no timed request reads
            await _pass(http, base, pid, dialect, CALLS_PER_COPY, WARM)
        if floor:
            await _floor_pass(http, *floor, CALLS_PER_COPY)
        for number in range(rounds):
            # One copy per dialect at a time, the order rotating, so every dialect meets the same
            # background load (the machine may be shared) over the round.
            cpu = {dialect: 0.0 for dialect in dialects}
            cpu["floor"] = 0.0
            copies = {dialect: copies_of(dialect, number, requests) for dialect in dialects}
            for k in range(copies_for(requests)):
                size = min(CALLS_PER_COPY, requests - k * CALLS_PER_COPY)
                turn = (number + k) % len(dialects)
                for dialect in dialects[turn:] + dialects[:turn]:
                    ok, seconds = await _pass(http, base, pid, dialect, size, copies[dialect][k])
                    answered[dialect] += ok
                    cpu[dialect] += seconds
                if floor:
                    ok, seconds = await _floor_pass(http, *floor, size)
                    floor_answered += ok
                    cpu["floor"] += seconds
            per_round.append({dialect: seconds / requests * 1e6 for dialect, seconds in cpu.items()})
    result: dict[str, Any] = {"requests": requests, "rounds": rounds, "first_renders": True, "dialects": {}}
    floor_us = statistics.mean(r["floor"] for r in per_round) if floor else float("nan")
    result["floor"] = {"cpu_us": floor_us, "answered": floor_answered} if floor else None
    for dialect in dialects:
        ratios = [r[dialect] / r["chat"] for r in per_round]
        cpu_us = statistics.mean(r[dialect] for r in per_round)
        floor_ratios = [r[dialect] / r["floor"] for r in per_round if r["floor"] > 0]
        result["dialects"][dialect] = {
            "cpu_us": cpu_us, "ratio": cpu_us / statistics.mean(r["chat"] for r in per_round),
            "ratio_range": [min(ratios), max(ratios)], "answered": answered[dialect],
            "floor_ratio": cpu_us / floor_us if floor else float("nan"),
            "floor_ratio_range": [min(floor_ratios), max(floor_ratios)] if floor_ratios else [],
        }
    result["met"] = all(d["ratio"] <= target(name) and d["answered"] == requests * rounds
                        for name, d in result["dialects"].items())
    result["floor_met"] = bool(floor) and floor_answered == requests * rounds and all(  # judged warm only
        d["floor_ratio"] <= FLOOR_TARGET for d in result["dialects"].values() if "floor_ratio" in d)
    return result


# The bench's names for the dialects (their request shapes above) -> the registry's.
_REGISTERED = {"chat": "chat", "messages": "anthropic", "responses": "responses", "gemini": "gemini",
               "ollama": "ollama", "bedrock": "bedrock"}


def first_renders(folder: Path, repeats: int) -> tuple[float, dict[str, float]]:
    """CPU microseconds per entry to read it, and per first render of it in each dialect from its
    reading: every entry rendered afresh, `repeats` passes, the best of each (the least disturbed by
    other work on the machine). A pass renders every entry in every dialect, the dialects' order
    rotating from pass to pass, so load on a shared machine falls on all of them alike."""
    entries = [e for s in load_scenario(folder).sessions for e in s.entries]
    registered = {d.name: d for d in DIALECTS}
    dialects = [(name, registered[_REGISTERED[name]]) for name in BODIES if name in _REGISTERED]
    envelopes = {name: Envelope(dialect.reply_id(0, 0), 0, "deepseek-v4-flash") for name, dialect in dialects}
    reading_us = float("inf")
    best = {name: float("inf") for name, _ in dialects}
    for number in range(repeats):
        start = time.process_time()
        readings = [read(entry) for entry in entries]
        reading_us = min(reading_us, (time.process_time() - start) / len(entries) * 1e6)
        turn = number % len(dialects)
        for name, dialect in dialects[turn:] + dialects[:turn]:
            envelope = envelopes[name]
            start = time.process_time()
            for reading in readings:
                dialect.render(reading, envelope)
            best[name] = min(best[name], (time.process_time() - start) / len(entries) * 1e6)
    return reading_us, best


# The two ways a server meets a suite's calls (serve --warm): `none`, every call rendered on its
# first request in whatever dialect asks (the issue 26 comparison: every dialect pays its render,
# chat completions included); `all`, every call rendered at start-up, as a suite recorded by mockllm
# is in the dialect it was recorded in, and chat completions is by default.
CONFIGURATIONS = {"cold": "none", "warm": "all"}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1024, help="requests per dialect per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="200 requests, 1 round")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    requests, rounds = (200, 1) if args.quick else (args.requests, args.rounds)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "suite"
        write_suite(folder, copies_for(requests) * rounds * len(BODIES))
        write_embeddings_file(folder / WARM)  # only the copies embeddings requests read need one
        for number in range(rounds):
            for copy in copies_of("embeddings", number, requests):
                shutil.copy(folder / WARM / "embeddings.json", folder / copy / "embeddings.json")
        reading_us, renders = first_renders(folder / WARM, 3 if args.quick else 100)
        procs = bench.Processes()
        try:
            floor, match = procs.start([sys.executable, str(ROOT / "scripts" / "bench_baseline.py"), str(folder / WARM),
                                        "--writes", "one"], Path(tmp) / "floor.stderr", r"listening on (http://\S+)")
            for name, warm in CONFIGURATIONS.items():
                with mockllm_process(["serve", str(folder), "--port", "0", "--warm", warm]) as (server, url):
                    results[name] = asyncio.run(measure(root_url(url), server.pid, requests, rounds,
                                                        (match.group(1), floor.pid)))
        finally:
            procs.stop_all()
    cold = results["cold"]
    cold["reading_us"] = reading_us
    for name, d in cold["dialects"].items():
        if name not in renders:  # embeddings: nothing rendered
            continue
        d["first_render_us"], d["first_render_ratio"] = renders[name], renders[name] / renders["chat"]
        # With its reading: what rendering the entry afresh costs where no dialect has read it yet.
        d["from_entry_ratio"] = (reading_us + renders[name]) / (reading_us + renders["chat"])
    for name, result in results.items():
        show(name, result, requests, rounds, reading_us if name == "cold" else None)
    met, floor_met = cold["met"], results["warm"]["floor_met"]
    print("dialect bench (cold): " + ("every target met" if met else "TARGET MISSED")
          + "; floor (warm): " + (f"every dialect within {FLOOR_TARGET}x" if floor_met else "TARGET MISSED"))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0 if met else 1


def show(name: str, result: dict[str, Any], requests: int, rounds: int, reading_us: float | None) -> None:
    """One configuration's table."""
    how = ("serve --warm none: every call rendered on its first request, chat completions too"
           if name == "cold" else "serve --warm all: every call rendered at start-up, as in its own dialect")
    print(f"== Dialects, {name} ({how}): server CPU per streamed request, each call's first, {requests:,} requests "
          f"per dialect per round over {CONNECTIONS} connections, {rounds} round(s); ratio to chat completions over "
          f"all (range: per round)"
          + (f"; first render in-process, from the entry's reading (reading it: {reading_us:.1f} us) =="
             if reading_us is not None else " =="))
    print(f"{'dialect':<10} {'CPU/request (us)':>17} {'ratio':>6} {'range':>12} {'target':>8}  result"
          f"  {'/ floor':>7} {'range':>12} {'target':>7}  result"
          + (f"  {'first render (us)':>17} {'ratio':>6} {'read+render':>11}" if reading_us is not None else ""))
    for dialect, d in result["dialects"].items():
        low, high = d["ratio_range"]
        target_ratio = target(dialect)
        verdict = "PASS" if d["ratio"] <= target_ratio and d["answered"] == requests * rounds else "FAIL"
        if name != "cold":
            verdict = "info"  # the target is the cold comparison's: here every render is done before timing
        floor_shown = f"  {'':>7} {'':>11} {'':>7}  {'':>4}"
        if "floor_ratio" in d:
            flow, fhigh = d["floor_ratio_range"] or [float("nan")] * 2
            floor_verdict = "PASS" if d["floor_ratio"] <= FLOOR_TARGET else "FAIL"
            if name == "cold":
                floor_verdict = "info"  # judged warm: cold adds each call's first render, which the floor never pays
            floor_shown = (f"  {d['floor_ratio']:>7.2f} {flow:>5.2f}-{fhigh:<6.2f} {f'<= {FLOOR_TARGET}':>7}  "
                           f"{floor_verdict}")
        renders_shown = ""
        if reading_us is not None:
            renders_shown = f"  {'(no render)':>17}"
            if "first_render_us" in d:
                renders_shown = (f"  {d['first_render_us']:>17.1f} {d['first_render_ratio']:>6.2f} "
                                 f"{d['from_entry_ratio']:>11.2f}")
        print(f"{dialect:<10} {d['cpu_us']:>17.1f} {d['ratio']:>6.2f} {low:>5.2f}-{high:<6.2f} "
              f"{f'<= {target_ratio}':>8}  {verdict}{floor_shown}{renders_shown}")
    floor_info = result["floor"]
    print(f"floor: a bare aiohttp handler writing the whole pre-encoded chat completions answer in one write: "
          f"{floor_info['cpu_us']:.1f} us CPU per request ({floor_info['answered']:,} answered)")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
