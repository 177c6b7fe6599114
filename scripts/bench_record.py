#!/usr/bin/env python3
"""Record-mode overhead: the same calls direct to an upstream and through `mockllm record`.

    python3 scripts/bench_record.py [--calls 200] [--deltas 200] [--quick] [--json FILE]

The upstream is `mockllm serve` (its own process) replaying a synthetic one-session tree: each
call streams `--deltas` text deltas, then usage and `[DONE]`. The recorder is `mockllm record`
(its own process) in front of it, writing to a temporary folder (one fsync'd batch per call, as
in real use). A plain aiohttp client makes the calls one after another, first `--calls` direct,
then as many through the proxy, each phase on a fresh run; a warm-up precedes each phase.

Reported per call: time to first byte (p50, p90) and to the last byte, direct and proxied, and
the CPU time (user + system, from /proc) the upstream and the recorder each spent. Ratios are
against the direct baseline measured in the same run: added TTFB, and the recorder's CPU per call
over the upstream's (what proxying costs next to serving the answer at all).
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
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

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


async def new_run(http: aiohttp.ClientSession, server: str) -> str:
    async with http.post(f"{server}/_mockllm/runs", json={"scenario": "tree"}) as response:
        return str((await response.json())["base_url"])


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


async def phase(http: aiohttp.ClientSession, url: str, calls: int, headers: dict[str, str],
                pids: list[int]) -> dict[str, Any]:
    await one_call(http, url, 0, headers)  # warm-up: connections, first-call paths
    cpu0 = [proc_cpu_seconds(p) for p in pids]
    results = [await one_call(http, url, n, headers) for n in range(1, calls)]
    cpu1 = [proc_cpu_seconds(p) for p in pids]
    ttfb = sorted(r[0] * 1000 for r in results)
    return {"calls": len(results), "ttfb_p50_ms": statistics.median(ttfb), "ttfb_p90_ms": ttfb[int(len(ttfb) * 0.9)],
            "total_p50_ms": statistics.median(r[1] * 1000 for r in results),
            "cpu_ms_per_call": [(b - a) * 1000 / len(results) for a, b in zip(cpu0, cpu1, strict=True)]}


async def measure(calls: int, deltas: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        tree = make_tree(Path(tmp) / "tree", calls + 1, deltas)
        with mockllm_process(["serve", str(tree), "--port", "0"]) as (upstream, upstream_v1):
            upstream_url = root_url(upstream_v1)
            async with aiohttp.ClientSession() as http:
                direct_base = await new_run(http, upstream_url)
                proxied_base = await new_run(http, upstream_url)
                with mockllm_process(["record", "--upstream", proxied_base, "--out", str(Path(tmp) / "recorded"),
                                      "--port", "0"]) as (recorder, recorder_url):
                    headers = {"x-mockllm-session": SESSION}
                    direct = await phase(http, direct_base + "/chat/completions", calls, headers, [upstream.pid])
                    proxied = await phase(http, recorder_url + "/chat/completions", calls, headers,
                                          [upstream.pid, recorder.pid])
        recorded = (Path(tmp) / "recorded" / "session.jsonl").stat().st_size
    upstream_cpu = direct["cpu_ms_per_call"][0]
    recorder_cpu = proxied["cpu_ms_per_call"][1]
    return {
        "calls": calls, "deltas": deltas, "direct": direct, "proxied": proxied, "recorded_bytes": recorded,
        "added_ttfb_p50_ms": proxied["ttfb_p50_ms"] - direct["ttfb_p50_ms"],
        "ttfb_ratio": proxied["ttfb_p50_ms"] / direct["ttfb_p50_ms"],
        "total_ratio": proxied["total_p50_ms"] / direct["total_p50_ms"],
        "recorder_cpu_ratio": recorder_cpu / upstream_cpu if upstream_cpu else float("nan"),
    }


def report(result: dict[str, Any]) -> str:
    d, p = result["direct"], result["proxied"]
    return "\n".join([
        f"record-mode overhead: {result['calls']} sequential calls of {result['deltas']} text deltas each",
        f"{'':10} {'TTFB p50':>10} {'TTFB p90':>10} {'total p50':>10} {'CPU/call':>22}",
        f"{'direct':10} {d['ttfb_p50_ms']:>8.2f}ms {d['ttfb_p90_ms']:>8.2f}ms {d['total_p50_ms']:>8.2f}ms "
        f"{'upstream ' + format(d['cpu_ms_per_call'][0], '.2f') + 'ms':>22}",
        f"{'proxied':10} {p['ttfb_p50_ms']:>8.2f}ms {p['ttfb_p90_ms']:>8.2f}ms {p['total_p50_ms']:>8.2f}ms "
        f"{'recorder ' + format(p['cpu_ms_per_call'][1], '.2f') + 'ms':>22}",
        f"added TTFB p50 {result['added_ttfb_p50_ms']:+.2f} ms (x{result['ttfb_ratio']:.2f}); "
        f"total x{result['total_ratio']:.2f}; recorder CPU per call x{result['recorder_cpu_ratio']:.2f} "
        f"the upstream's; {result['recorded_bytes']} bytes recorded",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--deltas", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="a few small calls: proves it runs, measures nothing")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    calls, deltas = (5, 20) if args.quick else (args.calls, args.deltas)
    result = asyncio.run(measure(calls, deltas))
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
