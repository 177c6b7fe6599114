#!/usr/bin/env python3
"""A retry storm against one run: how much a run's journal and failure list cost over time.

    python3 scripts/bench_journal.py            20,000 calls past the end of one run's script
    python3 scripts/bench_journal.py --calls 2000 --json out.json

An agent stuck retrying keeps calling past the end of its script; every such call is a 410 that
the run journals and records as a failure. Unbounded, 20,000 of them grew the server by about
100 MiB (each journal entry kept the request's header object, and every failure was kept). The
server here is `mockllm serve` in its own process, on a one-call scenario; the storm goes over
8 keep-alive connections. Measured: the server's RSS before and after the storm (VmRSS from
/proc), and the size of the run's state (`GET /_mockllm/runs/{run}`). The baseline, measured in
the same run, is the same number of calls that are each served (one fresh run each, one call
each, runs ended): what the server's RSS does under the same traffic with nothing to remember.

Target: the storm grows the server by at most 8 MiB, and by at most 4 MiB more than the baseline.
Exit status 0 when met, 1 when not. Everything binds 127.0.0.1; the server is stopped at exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from bench_client import mockllm_process, proc_rss_kb, root_url  # noqa: E402
from make_recordings import build_all  # noqa: E402

BODY = {"model": "m", "messages": [{"role": "user", "content": "retry " * 150}], "stream": False}
HEADERS = {"x-mockllm-session": "stuck-agent", "x-client-note": "storm"}
GROWTH_LIMIT_MIB = 8.0
OVER_BASELINE_LIMIT_MIB = 4.0


def write_scenario(folder: Path) -> str:
    """The project's own text-turn recording: one session, one call."""
    for name, data in build_all().items():
        if name.startswith("text-turn/"):
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    return "text-turn"


async def _storm(http: aiohttp.ClientSession, url: str, calls: int, expect: int) -> int:
    """`calls` POSTs to `url` over 8 connections; returns how many answered `expect`."""
    ok = 0
    queue = iter(range(calls))

    async def worker() -> None:
        nonlocal ok
        for _ in queue:
            async with http.post(url, json=BODY, headers=HEADERS) as response:
                await response.read()
                ok += response.status == expect

    await asyncio.gather(*(worker() for _ in range(8)))
    return ok


async def _baseline(http: aiohttp.ClientSession, base: str, scenario: str, calls: int) -> int:
    """The same number of calls, each served: a fresh run per call, ended after it."""
    ok = 0
    queue = iter(range(calls))

    async def worker() -> None:
        nonlocal ok
        for _ in queue:
            async with http.post(f"{base}/_mockllm/runs", json={"scenario": scenario}) as created:
                run = await created.json()
            async with http.post(f"{run['base_url']}/chat/completions", json=BODY, headers=HEADERS) as response:
                await response.read()
                ok += response.status == 200
            async with http.delete(f"{base}/_mockllm/runs/{run['run']}") as ended:
                await ended.read()

    await asyncio.gather(*(worker() for _ in range(8)))
    return ok


async def measure(base: str, pid: int, scenario: str, calls: int) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(limit=8)
    async with aiohttp.ClientSession(connector=connector) as http:
        # Warm up both paths so that what is measured is growth, not first-use allocations.
        await _baseline(http, base, scenario, 200)
        before = proc_rss_kb(pid)[0]
        served = await _baseline(http, base, scenario, calls)
        after_baseline = proc_rss_kb(pid)[0]
        async with http.post(f"{base}/_mockllm/runs", json={"scenario": scenario}) as created:
            run = await created.json()
        url = f"{run['base_url']}/chat/completions"
        await _storm(http, url, 1, 200)  # the one recorded call; every later one is past the end
        storm_before = proc_rss_kb(pid)[0]
        exhausted = await _storm(http, url, calls, 410)
        storm_after = proc_rss_kb(pid)[0]
        async with http.get(f"{base}/_mockllm/runs/{run['run']}") as state_response:
            state_bytes = await state_response.read()
        state = json.loads(state_bytes)
    baseline_growth = (after_baseline - before) / 1024
    growth = (storm_after - storm_before) / 1024
    return {
        "calls": calls, "served_ok": served, "exhausted_ok": exhausted,
        "rss_before_mib": before / 1024, "baseline_growth_mib": baseline_growth, "storm_growth_mib": growth,
        "state_bytes": len(state_bytes), "journal_kept": len(state["journal"]),
        "journal_dropped": state["journal_dropped"], "failures_kept": len(state["failures"]),
        "failures_counted": state["failures_more"],
        "met": served == calls and exhausted == calls and growth <= GROWTH_LIMIT_MIB
        and growth - baseline_growth <= OVER_BASELINE_LIMIT_MIB,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        scenario = write_scenario(Path(tmp))
        with mockllm_process(["serve", str(Path(tmp) / scenario), "--port", "0"]) as (server, url):
            result = asyncio.run(measure(root_url(url), server.pid, scenario, args.calls))
    print(f"retry storm: {result['calls']:,} calls past the end of one run's script "
          f"(server RSS before: {result['rss_before_mib']:.1f} MiB)")
    print(f"  storm growth      {result['storm_growth_mib']:6.2f} MiB   (limit {GROWTH_LIMIT_MIB} MiB)")
    print(f"  baseline growth   {result['baseline_growth_mib']:6.2f} MiB   "
          "(the same calls, each served in a fresh run)")
    print(f"  over the baseline {result['storm_growth_mib'] - result['baseline_growth_mib']:6.2f} MiB   "
          f"(limit {OVER_BASELINE_LIMIT_MIB} MiB)")
    print(f"  run state         {result['state_bytes'] / 1024:6.1f} KiB: journal keeps {result['journal_kept']}, "
          f"dropped {result['journal_dropped']}; failures kept {result['failures_kept']}, "
          f"counted {result['failures_counted']}")
    print(f"  every call answered as expected: {result['served_ok'] == result['exhausted_ok'] == result['calls']}")
    print("journal bench: " + ("target met" if result["met"] else "TARGET MISSED"))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
