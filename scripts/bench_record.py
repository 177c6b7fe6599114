#!/usr/bin/env python3
"""Record-mode overhead: the same calls direct to an upstream, through a naive forwarder, through
`mockllm record`, and as live calls of a `mockllm serve --record-mode` run.

    python3 scripts/bench_record.py [--calls 200] [--deltas 200] [--rounds 4] [--quick] [--json FILE]

The upstream is `mockllm serve` (its own process) replaying a synthetic one-session tree: each
call streams `--deltas` text deltas, then usage and `[DONE]`. In front of it, each its own
process: a naive aiohttp forwarder (the floor any proxy pays: it forwards and keeps nothing),
`mockllm record` writing to a temporary folder (one fsync'd batch per call, as in real use), and
`mockllm serve --upstream` whose run records in record mode `rewrite` (its recording is written
when the run ends, timed separately). A plain aiohttp client makes the calls one after another;
the phases take turns in `--rounds` rounds (so a machine whose load drifts treats them alike),
each on a run of its own; a warm-up precedes each phase, and each ends when its processes are idle
again (`mockllm record` records a call after answering it: that work is its phase's, not the next).

Reported per call: time to first byte (p50, p90) and to the last byte, and the CPU time (user +
system, from /proc) the upstream and each proxy spent. Ratios and added milliseconds are against
the direct calls measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from aiohttp import web  # noqa: E402
from bench_client import mockllm_process, proc_cpu_seconds, root_url  # noqa: E402

from mockllm.dsh.chunks import Block, BlockEnd, BlockStart, FinishChunk, FinishReason, TextDelta, TokenUsage, UsageChunk  # noqa: E402
from mockllm.dsh.header import SessionHeader  # noqa: E402
from mockllm.dsh.names import CHUNK_EVENT  # noqa: E402
from mockllm.dsh.reader import CallChunk, Event  # noqa: E402
from mockllm.dsh.writer import write_log  # noqa: E402

SESSION = "bench"


def make_tree(folder: Path, calls: int, deltas: int) -> Path:
    """One session of `calls` turns, each a text answer of `deltas` deltas."""
    events: list[Any] = []
    seq = 0

    def add(kind: str, data: Any) -> None:
        nonlocal seq
        events.append(Event(kind, seq, seq, 0, data) if kind == CHUNK_EVENT else
                      {"type": kind, "seq": seq, "time": seq, "data": data})
        seq += 1

    for turn in range(1, calls + 1):
        add("turn/start", {"turn": turn})
        add("user/message", {"content": [{"type": "text", "text": f"question {turn}"}]})
        add("step/start", {"turn": turn, "step": 1})
        chunks: list[Any] = [BlockStart(0, "text")]
        chunks += [TextDelta(0, f"word{k} ") for k in range(deltas)]
        chunks += [BlockEnd(0, Block("text", text="".join(f"word{k} " for k in range(deltas)))),
                   UsageChunk(TokenUsage(100, deltas)), FinishChunk(FinishReason("stop"))]
        for chunk in chunks:
            add(CHUNK_EVENT, CallChunk(turn, 1, chunk))
        add("step/end", {"turn": turn, "step": 1})
        add("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    folder.mkdir(parents=True, exist_ok=True)
    write_log(folder / "session.jsonl", SessionHeader(SESSION, 1), events)
    return folder


async def new_run(http: aiohttp.ClientSession, server: str, **fields: Any) -> tuple[str, str]:
    async with http.post(f"{server}/_mockllm/runs", json={"scenario": "tree", **fields}) as response:
        body = await response.json()
        if response.status != 201:
            raise SystemExit(f"{server}: cannot create a run: {body}")
        return str(body["run"]), str(body["base_url"])


async def one_call(http: aiohttp.ClientSession, url: str, n: int, headers: dict[str, str]) -> tuple[float, float]:
    body = {"model": "m", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": f"question {n}"}]}
    t0 = time.perf_counter()
    async with http.post(url, json=body, headers=headers) as response:
        if response.status != 200:
            raise SystemExit(f"{url}: HTTP {response.status}: {(await response.read()).decode()[:500]}")
        first = None
        async for _ in response.content.iter_any():
            if first is None:
                first = time.perf_counter()
    end = time.perf_counter()
    return (first or end) - t0, end - t0


async def idle(pids: list[int], quiet_ms: float = 2.0, every: float = 0.05) -> None:
    """Wait until the processes `pids` spend under `quiet_ms` of CPU in `every` seconds (10 s at most)."""
    last = sum(proc_cpu_seconds(p) for p in pids)
    for _ in range(int(10 / every)):
        await asyncio.sleep(every)
        now = sum(proc_cpu_seconds(p) for p in pids)
        if (now - last) * 1000 < quiet_ms:
            return
        last = now


class Phase:
    """One way of making the calls: its URL, the processes whose CPU it costs, what it measured."""

    def __init__(self, name: str, url: str, pids: list[int]) -> None:
        self.name, self.url, self.pids = name, url, pids
        self.results: list[tuple[float, float]] = []
        self.cpu = [0.0] * len(pids)
        self.calls = 0  # the next call's number on its upstream run

    async def run(self, http: aiohttp.ClientSession, calls: int, headers: dict[str, str]) -> None:
        if not self.calls:  # warm-up: connections, first-call paths
            await one_call(http, self.url, 0, headers)
            self.calls = 1
        cpu0 = [proc_cpu_seconds(p) for p in self.pids]
        for _ in range(calls):
            self.results.append(await one_call(http, self.url, self.calls, headers))
            self.calls += 1
        # `mockllm record` records each call after answering it: its work goes on after the last
        # answer. Wait for it, so that it is counted here and does not slow the next phase's calls.
        await idle(self.pids)
        for k, (a, b) in enumerate(zip(cpu0, [proc_cpu_seconds(p) for p in self.pids], strict=True)):
            self.cpu[k] += b - a

    def summary(self) -> dict[str, Any]:
        ttfb = sorted(r[0] * 1000 for r in self.results)
        return {"calls": len(self.results), "ttfb_p50_ms": statistics.median(ttfb),
                "ttfb_p90_ms": ttfb[int(len(ttfb) * 0.9)],
                "total_p50_ms": statistics.median(r[1] * 1000 for r in self.results),
                "cpu_ms_per_call": [c * 1000 / max(1, len(self.results)) for c in self.cpu]}


@contextlib.contextmanager
def naive_forwarder(upstream: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """This script's own minimal forwarder, in a process of its own: yields it and its `/v1` base."""
    process = subprocess.Popen([sys.executable, __file__, "--naive-forwarder", upstream], text=True,
                               stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        yield process, process.stdout.readline().strip()
    finally:
        process.terminate()
        process.wait(timeout=10)


def serve_naive(upstream: str) -> None:
    """A forwarder that does nothing else: each upstream piece written as it arrives, nothing kept."""

    async def main() -> None:
        client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))

        async def forward(request: web.Request) -> web.StreamResponse:
            headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
            async with client.request(request.method, upstream + request.path_qs[len("/v1"):],
                                      data=await request.read(), headers=headers) as answer:
                response = web.StreamResponse(status=answer.status, headers={"Content-Type": answer.content_type})
                await response.prepare(request)
                async for piece in answer.content.iter_any():
                    await response.write(piece)
                await response.write_eof()
                return response

        app = web.Application()
        app.router.add_route("*", "/v1/{tail:.*}", forward)
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True)  # as mockllm runs
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        print(f"http://127.0.0.1:{runner.addresses[0][1]}/v1", flush=True)
        await asyncio.Event().wait()

    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.run(main())
        return
    asyncio.run(main())


async def measure(calls: int, deltas: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        tree = make_tree(Path(tmp) / "tree", rounds * calls + 8, deltas)
        suite = Path(tmp) / "suite"  # where the live server's run records (a copy, so it lists a URL)
        shutil.copytree(tree, suite / "tree")
        headers = {"x-mockllm-session": SESSION}
        with mockllm_process(["serve", str(tree), "--port", "0"]) as (upstream, upstream_v1):
            upstream_url = root_url(upstream_v1)
            async with aiohttp.ClientSession() as http:
                bases = [(await new_run(http, upstream_url))[1] for _ in range(4)]
                with naive_forwarder(bases[1]) as (naive, naive_url), \
                        mockllm_process(["record", "--upstream", bases[2], "--out", str(Path(tmp) / "recorded"),
                                         "--port", "0"]) as (recorder, recorder_url), \
                        mockllm_process(["serve", str(suite), "--port", "0", "--upstream", bases[3]]) \
                        as (live, live_v1):
                    live_url = root_url(live_v1)
                    live_run, live_base = await new_run(http, live_url, record_mode="rewrite")
                    phases = [Phase("direct", bases[0] + "/chat/completions", [upstream.pid]),
                              Phase("naive", naive_url + "/chat/completions", [upstream.pid, naive.pid]),
                              Phase("record", recorder_url + "/chat/completions", [upstream.pid, recorder.pid]),
                              Phase("live", live_base + "/chat/completions", [upstream.pid, live.pid])]
                    for _ in range(rounds):
                        for phase in phases:
                            await phase.run(http, calls, headers)
                    t0 = time.perf_counter()
                    async with http.delete(f"{live_url}/_mockllm/runs/{live_run}") as response:
                        recording = (await response.json())["recording"]
                    write_ms = (time.perf_counter() - t0) * 1000
        recorded_file = Path(tmp) / "recorded" / "session.jsonl"
        recorded = recorded_file.stat().st_size if recorded_file.exists() else 0
    result: dict[str, Any] = {"calls": rounds * calls, "deltas": deltas, "rounds": rounds,
                              "recorded_bytes": recorded, "live_recording": recording, "live_write_ms": write_ms}
    summaries = {p.name: p.summary() for p in phases}
    direct = summaries["direct"]
    for name in ("naive", "record", "live"):
        s = summaries[name]
        s["added_ttfb_p50_ms"] = s["ttfb_p50_ms"] - direct["ttfb_p50_ms"]
        s["ttfb_ratio"] = s["ttfb_p50_ms"] / direct["ttfb_p50_ms"]
        s["total_ratio"] = s["total_p50_ms"] / direct["total_p50_ms"]
        upstream_cpu = direct["cpu_ms_per_call"][0]
        s["cpu_ratio"] = s["cpu_ms_per_call"][1] / upstream_cpu if upstream_cpu else float("nan")
    result.update(summaries)
    result["proxied"] = summaries["record"]  # the name earlier versions used
    result["added_ttfb_p50_ms"] = summaries["record"]["added_ttfb_p50_ms"]
    result["ttfb_ratio"] = summaries["record"]["ttfb_ratio"]
    result["total_ratio"] = summaries["record"]["total_ratio"]
    return result


LABELS = {"direct": "direct", "naive": "naive fwd", "record": "mockllm record", "live": "serve, live"}


def report(result: dict[str, Any]) -> str:
    lines = [f"record-mode overhead: {result['calls']} sequential calls of {result['deltas']} text deltas each, "
             f"phases taking turns in {result['rounds']} rounds",
             f"{'':15} {'TTFB p50':>10} {'TTFB p90':>10} {'total p50':>10} {'CPU/call':>9} {'added TTFB p50':>15}"]
    for name, label in LABELS.items():
        s = result[name]
        added = "" if name == "direct" else f"{s['added_ttfb_p50_ms']:+.2f}ms x{s['ttfb_ratio']:.2f}"
        lines.append(f"{label:15} {s['ttfb_p50_ms']:>8.2f}ms {s['ttfb_p90_ms']:>8.2f}ms {s['total_p50_ms']:>8.2f}ms "
                     f"{s['cpu_ms_per_call'][-1]:>7.2f}ms {added:>15}")
    live = result["live_recording"] or {}
    lines.append(f"mockllm record: total x{result['record']['total_ratio']:.2f}, recorder CPU per call "
                 f"x{result['record']['cpu_ratio']:.2f} the upstream's, {result['recorded_bytes']} bytes recorded")
    lines.append(f"serve, live: total x{result['live']['total_ratio']:.2f}, server CPU per call "
                 f"x{result['live']['cpu_ratio']:.2f} the upstream's; recording written at the run's end in "
                 f"{result['live_write_ms']:.0f} ms: {live.get('message', 'none')}")
    lines.append(f"added TTFB p50: naive forwarder {result['naive']['added_ttfb_p50_ms']:+.2f} ms, mockllm record "
                 f"{result['record']['added_ttfb_p50_ms']:+.2f} ms, a live call in a record mode "
                 f"{result['live']['added_ttfb_p50_ms']:+.2f} ms")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per phase, all rounds together")
    parser.add_argument("--deltas", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="a few small calls: proves it runs, measures nothing")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    parser.add_argument("--naive-forwarder", metavar="UPSTREAM", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.naive_forwarder:
        serve_naive(args.naive_forwarder)
        return 0
    calls, deltas, rounds = (2, 20, 2) if args.quick else (max(1, args.calls // args.rounds), args.deltas, args.rounds)
    result = asyncio.run(measure(calls, deltas, rounds))
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
