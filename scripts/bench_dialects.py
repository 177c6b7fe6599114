#!/usr/bin/env python3
"""Server CPU per streamed request in each wire dialect, against chat completions in the same run.

    python3 scripts/bench_dialects.py                 3 rounds of 3,000 requests per dialect
    python3 scripts/bench_dialects.py --quick         a tiny configuration, for tests

The same scenario as the streaming benchmark (bench.py's: 64 text deltas per call, usage) is
served by one `mockllm serve` process; each round sends the same number of streamed requests in
each dialect (chat completions, Anthropic Messages, OpenAI Responses, Gemini, Ollama), dialect
order rotating per round, over 16 keep-alive connections, each run's sessions named by header.
Every reply is rendered once per dialect and cached, so a warm-up pass renders them before
anything is timed. First renders are measured apart, in this process: every entry of the scenario
rendered afresh in each dialect (`Dialect.render`), CPU per render and its ratio to chat
completions' (the server warms chat's at start-up, so a first pass over HTTP would not compare
like with like). The server's CPU time
(utime+stime from /proc) over each dialect's requests gives its CPU per request; the ratio to chat
completions' is taken within a round, and the median over rounds is reported. Target: every
dialect within 1.25x of chat completions (cached renders). Exit 0 when met, 1 when not.
Everything binds 127.0.0.1; the server is stopped at exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

import bench  # noqa: E402
from bench_client import mockllm_process, proc_cpu_seconds, root_url  # noqa: E402

from mockllm.scenario.load import load_scenario  # noqa: E402
from mockllm.wire import DIALECTS  # noqa: E402
from mockllm.wire.dialect import Envelope  # noqa: E402

TARGET = 1.25
CONNECTIONS = 16
SCENARIO = "stream"

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
}


async def _pass(http: aiohttp.ClientSession, base: str, dialect: str, requests: int) -> int:
    """`requests` streamed calls in `dialect`, spread over fresh runs; returns how many answered 200."""
    path, body = BODIES[dialect]
    data = json.dumps(body).encode()
    calls_per_session = bench.CALLS_PER_SESSION
    per_run = bench.SESSIONS * calls_per_session
    ok = 0
    slots = iter(range(requests))
    runs: dict[int, str] = {}

    async def base_of(run_number: int) -> str:
        if run_number not in runs:
            async with http.post(f"{base}/_mockllm/runs", json={"scenario": SCENARIO}) as created:
                runs[run_number] = (await created.json())["base_url"].removesuffix("/v1")
        return runs[run_number]

    async def worker() -> None:
        nonlocal ok
        for slot in slots:
            run_base = await base_of(slot // per_run)
            session = (slot % per_run) // calls_per_session
            async with http.post(run_base + path, data=data, headers={
                    "Content-Type": "application/json", "x-mockllm-session": f"live-{session}"}) as response:
                await response.read()
                ok += response.status == 200

    await asyncio.gather(*(worker() for _ in range(CONNECTIONS)))
    return ok


async def measure(base: str, pid: int, requests: int, rounds: int) -> dict[str, Any]:
    dialects = list(BODIES)
    per_round: list[dict[str, float]] = []
    answered = {d: 0 for d in dialects}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONNECTIONS)) as http:
        for dialect in dialects:  # warm-up: every reply rendered and cached in every dialect
            await _pass(http, base, dialect, bench.SESSIONS * bench.CALLS_PER_SESSION)
        for number in range(rounds):
            cpu: dict[str, float] = {}
            turn = number % len(dialects)
            for dialect in dialects[turn:] + dialects[:turn]:
                before = proc_cpu_seconds(pid)
                answered[dialect] += await _pass(http, base, dialect, requests)
                cpu[dialect] = (proc_cpu_seconds(pid) - before) / requests * 1e6
            per_round.append(cpu)
    result: dict[str, Any] = {"requests": requests, "rounds": rounds, "dialects": {}}
    for dialect in dialects:
        ratios = [r[dialect] / r["chat"] for r in per_round]
        result["dialects"][dialect] = {
            "cpu_us": statistics.median(r[dialect] for r in per_round), "ratio": statistics.median(ratios),
            "ratio_range": [min(ratios), max(ratios)], "answered": answered[dialect],
        }
    result["met"] = all(d["ratio"] <= TARGET and d["answered"] == requests * rounds
                        for d in result["dialects"].values())
    return result


# The bench's names for the dialects (their request shapes above) -> the registry's.
_REGISTERED = {"chat": "chat", "messages": "anthropic", "responses": "responses", "gemini": "gemini",
               "ollama": "ollama"}


def first_renders(folder: Path, repeats: int) -> dict[str, float]:
    """CPU microseconds per first render of an entry, per dialect: every entry rendered afresh, `repeats`
    times over, the best of the passes (the least disturbed by other work on the machine)."""
    entries = [e for s in load_scenario(folder).sessions for e in s.entries]
    registered = {d.name: d for d in DIALECTS}
    out: dict[str, float] = {}
    for name in BODIES:
        dialect = registered[_REGISTERED[name]]
        envelope = Envelope(dialect.reply_id(0, 0), 0, "deepseek-v4-flash")
        best = float("inf")
        for _ in range(repeats):
            start = time.process_time()
            for entry in entries:
                dialect.render(entry, envelope)
            best = min(best, (time.process_time() - start) / len(entries) * 1e6)
        out[name] = best
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000, help="requests per dialect per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="200 requests, 1 round")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    requests, rounds = (200, 1) if args.quick else (args.requests, args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / SCENARIO
        bench.write_stream_scenario(folder)
        renders = first_renders(folder, 3 if args.quick else 15)
        with mockllm_process(["serve", str(folder), "--port", "0"]) as (server, url):
            result = asyncio.run(measure(root_url(url), server.pid, requests, rounds))
    for name, d in result["dialects"].items():
        d["first_render_us"], d["first_render_ratio"] = renders[name], renders[name] / renders["chat"]
    print(f"== Dialects: server CPU per streamed request, {requests:,} requests per dialect per round, "
          f"median of {rounds} round(s); ratio to chat completions within each round ==")
    print(f"{'dialect':<10} {'CPU/request (us)':>17} {'ratio':>6} {'range':>12} {'target':>8}  result"
          f"  {'first render (us)':>17} {'ratio':>6}")
    for name, d in result["dialects"].items():
        low, high = d["ratio_range"]
        verdict = "PASS" if d["ratio"] <= TARGET and d["answered"] == requests * rounds else "FAIL"
        print(f"{name:<10} {d['cpu_us']:>17.1f} {d['ratio']:>6.2f} {low:>5.2f}-{high:<6.2f} {'<= 1.25':>8}  {verdict}"
              f"  {d['first_render_us']:>17.1f} {d['first_render_ratio']:>6.2f}")
    print("dialect bench: " + ("every target met" if result["met"] else "TARGET MISSED"))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
