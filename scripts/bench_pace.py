#!/usr/bin/env python3
"""How closely paced streams keep their schedule with many streams open at once.

    python3 scripts/bench_pace.py            1, 100 and 1,000 paced streams, fixed and recorded pace
    python3 scripts/bench_pace.py --quick    a tiny configuration (seconds): checks that it all works
    python3 scripts/bench_pace.py --levels 1000 --modes fixed --events 50 --gap-ms 20 --json out.json

Also run by scripts/bench.py as its `pace` phase. Exit status: 0 every target met, 1 some missed,
2 the benchmark itself broke. Everything binds 127.0.0.1; the server is stopped before it exits.

Processes: `mockllm serve DIR --port 0` in its own process (uvloop, the shipped command) at its
default pace (burst); this process is the client, on uvloop. The scenario is one session of 100
recorded calls, each `events - 3` text deltas then the finish, the usage chunk and `[DONE]`
(`events` SSE events in all), recorded `gap` ms apart (the first delta `gap` ms after the step's
start). A level of N streams makes ceil(N / 100) runs with POST /_mockllm/runs, each with its own
pace: `"pace": "<gap>"` (fixed: event k at k * gap) or `"pace": "recorded"` (each delta at its
recorded time; the last three events with the last delta). Then N connections are opened (100
at a time, untimed), and the N requests are written back to back, all streams open at once.

Measured per event, by a minimal HTTP/1.1 client on raw asyncio protocols that stamps each event
when its closing blank line arrives: lateness = (arrival - the stream's first event's arrival) -
(intended offset - the first event's intended offset), i.e. how far each event drifts from its
schedule counted from the stream's first byte; p50, p99 and max over every event (after the
first) of every stream. A negative lateness is an event that came sooner after the first byte
than scheduled: the first event itself was late (the server was still taking the other
requests), the rest on time. Also: the first event's lateness from when its request was written
(the request's latency plus any recorded wait before the first delta), the server's CPU time per
event, its and this client's CPU busy over the level (from /proc and getrusage), and every body is
verified (every event, the text joined, the finish, the usage chunk, `[DONE]` last). A `burst`
row, unpaced, shows what the request storm alone costs.

Targets: every stream verified, at every level; p99 lateness per event <= one gap up to
JUDGED_STREAMS streams. Past that the rows are information: every paced event is one socket write
(~17 us of the server's ~25 us per event on this 2-core host, measured with cProfile), so 1,000
streams of an event per 20 ms (50,000 writes a second) take about one core, which the server
shares with this client and the host's other work; lateness then shows that saturation.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))  # this checkout's mockllm, even without an install

import bench  # noqa: E402  (a sibling script: its process handling and tables)
from bench_client import chunk_decoder, percentile, proc_cpu_seconds, self_cpu_seconds  # noqa: E402

from mockllm.dsh.header import SessionHeader  # noqa: E402
from mockllm.dsh.writer import encode_log  # noqa: E402

SCENARIO = "paced"
CALLS = 100  # recorded calls in the scenario's one session: one run serves this many streams
STEP_START = 1_790_000_000_000
MODES = ("fixed", "recorded", "burst")
JUDGED_STREAMS = 100  # lateness is judged up to this many streams; past it, information


@dataclass
class Config:
    levels: list[int]
    events: int
    gap_ms: float
    modes: list[str]
    timeout: float
    json: Path | None = None
    keep: Path | None = None


FULL = dict(levels=[1, 100, 1000], events=50, gap_ms=20.0, modes=list(MODES), timeout=120.0)
QUICK = dict(levels=[1, 20], events=10, gap_ms=20.0, modes=list(MODES), timeout=60.0)


def deltas(config: Config) -> list[str]:
    words = bench.make_synthetic.WORDS
    return [(" " if i else "") + words[i % len(words)] for i in range(config.events - 3)]


def write_scenario(folder: Path, config: Config) -> None:
    """One session of CALLS calls, each `events - 3` deltas recorded `gap_ms` apart."""
    parts = deltas(config)
    text = "".join(parts)
    gap = config.gap_ms
    events: list[dict[str, Any]] = []

    def emit(type_: str, time_ms: float, data: dict[str, Any]) -> None:
        events.append({"type": type_, "seq": len(events), "time": time_ms, "data": data})

    for call in range(CALLS):
        turn, at = call + 1, STEP_START + call * 60_000
        emit("turn/start", at - 2, {"turn": turn})
        emit("user/message", at - 1, {"content": [{"type": "text", "text": f"ask {turn}"}], "role": "user"})
        emit("step/start", at, {"turn": turn, "step": 1})
        chunks: list[tuple[float, dict[str, Any]]] = [(at + gap, {"type": "block-start", "index": 0,
                                                                  "blockType": "text"})]
        chunks += [(at + gap * (k + 1), {"type": "text-delta", "index": 0, "text": p}) for k, p in enumerate(parts)]
        last = at + gap * len(parts)
        chunks += [(last, {"type": "block-end", "index": 0, "block": {"type": "text", "text": text}}),
                   (last, {"type": "usage", "usage": {"inputTokens": 100, "outputTokens": len(parts)}}),
                   (last, {"type": "finish", "reason": {"kind": "stop"}})]
        for time_ms, chunk in chunks:
            emit("assistant/chunk", time_ms, {"turn": turn, "step": 1, "chunk": chunk})
        emit("step/end", last, {"turn": turn, "step": 1})
        emit("turn/end", last, {"turn": turn, "reason": {"kind": "completed"}})
    folder.mkdir(parents=True, exist_ok=True)
    header = SessionHeader(id="00000000-0000-4000-8000-00000000pace", created_at=STEP_START, cwd="/w")
    (folder / "session.jsonl").write_bytes(encode_log(header, events))


def intended(mode: str, config: Config) -> list[float]:
    """Each event's intended offset in ms after the handler starts (see mockllm/pacing.py)."""
    n, gap = config.events, config.gap_ms
    if mode == "burst":
        return [0.0] * n
    if mode == "fixed":
        return [k * gap for k in range(n)]
    offsets = [gap * (k + 1) for k in range(n - 3)]  # each delta at its recorded time
    return offsets + [offsets[-1]] * 3  # the finish, the usage chunk and [DONE] with the last delta


# ---------------------------------------------------------------------------------------------
# The client


class Stream(asyncio.Protocol):
    """One connection, one streamed response: each event's arrival time, and the body."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.body_at = -1  # where the body starts in buf, once the head is in
        self.length = -1
        self.scanned = 0  # body bytes already searched for event ends
        self.arrivals: list[float] = []
        self.sent = 0.0
        self.done: asyncio.Future[None] = loop.create_future()
        self.status = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError(f"connection lost with the stream unfinished ({exc})"))

    def send(self, request: bytes) -> None:
        assert self.transport is not None
        self.sent = time.perf_counter()
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        buf = self.buf
        buf += data
        if self.body_at < 0:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = bytes(buf[:end]).split(b"\r\n")
            self.status = int(lines[0][9:12])
            fields = dict(line.lower().partition(b":")[::2] for line in lines[1:])
            if b"content-length" not in fields:  # a paced stream carries one, as a burst one does
                self.done.set_exception(ValueError(f"no Content-Length: {lines!r}"))
                return
            self.length = int(fields[b"content-length"])
            self.body_at = self.scanned = end + 4
        while True:  # every event whose closing blank line is in: it arrived now
            end = buf.find(b"\n\n", self.scanned)
            if end < 0:
                break
            self.arrivals.append(now)
            self.scanned = end + 2
        if len(buf) - self.body_at >= self.length and not self.done.done():
            self.done.set_result(None)

    @property
    def body(self) -> bytes:
        return bytes(self.buf[self.body_at:])

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def verify(stream: Stream, config: Config, text: str) -> str | None:
    """What is wrong with one stream, or None."""
    if stream.status != 200:
        return f"status {stream.status}: {stream.body[:200]!r}"
    events = stream.body.split(b"\n\n")
    if events.pop() != b"" or len(events) != config.events or len(stream.arrivals) != config.events:
        return f"{len(events)} events ({len(stream.arrivals)} stamped), expected {config.events}"
    if events[-1] != b"data: [DONE]":
        return f"does not end with [DONE]: {events[-1][:80]!r}"
    chunks = [chunk_decoder.decode(e[6:]) for e in events[:-1]]
    got = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    if got != text or finishes != ["stop"] or sum(c.usage is not None for c in chunks) != 1:
        return f"text, finish {finishes} or usage differ"
    return None


class Client:
    def __init__(self, base_url: str, pid: int, config: Config) -> None:
        url = urlsplit(base_url)
        assert url.hostname and url.port
        self.host, self.port, self.authority = url.hostname, url.port, url.netloc
        self.pid = pid
        self.config = config
        self.text = "".join(deltas(config))
        self.body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "go"}], "stream": True,
                                "stream_options": {"include_usage": True}}).encode()

    async def admin(self, method: str, path: str, body: Any = None) -> Any:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        data = b"" if body is None else json.dumps(body).encode()
        writer.write(f"{method} {path} HTTP/1.1\r\nHost: {self.authority}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
        raw = await reader.read()
        writer.close()
        head, _, payload = raw.partition(b"\r\n\r\n")
        if b" 20" not in head[:13]:
            raise RuntimeError(f"{method} {path}: {head[:100]!r} {payload[:300]!r}")
        return json.loads(payload)

    def request(self, run: str, stream: int) -> bytes:
        return (f"POST /runs/{run}/v1/chat/completions HTTP/1.1\r\nHost: {self.authority}\r\n"
                "Content-Type: application/json\r\nx-mockllm-session: bench\r\n"
                f"Content-Length: {len(self.body)}\r\n\r\n").encode() + self.body

    async def level(self, mode: str, streams: int) -> dict[str, Any]:
        config = self.config
        pace = mode if mode in ("recorded", "burst") else f"{config.gap_ms:g}"
        runs = [(await self.admin("POST", "/_mockllm/runs", {"scenario": SCENARIO, "pace": pace}))["run"]
                for _ in range(-(-streams // CALLS))]
        loop = asyncio.get_running_loop()
        conns: list[Stream] = []
        while len(conns) < streams:  # a burst of SYNs past the listen backlog stalls: 100 at a time
            batch = min(100, streams - len(conns))
            made = await asyncio.gather(*(loop.create_connection(lambda: Stream(loop), self.host, self.port)
                                          for _ in range(batch)))
            conns += [protocol for _, protocol in made]
        requests = [self.request(runs[i // CALLS], i) for i in range(streams)]
        cpu0, mine0, t0 = proc_cpu_seconds(self.pid), self_cpu_seconds(), time.perf_counter()
        for conn, request in zip(conns, requests, strict=True):
            conn.send(request)
        results = await asyncio.wait_for(asyncio.gather(*(c.done for c in conns), return_exceptions=True),
                                         config.timeout)
        wall = time.perf_counter() - t0
        cpu, mine = proc_cpu_seconds(self.pid) - cpu0, self_cpu_seconds() - mine0
        for conn in conns:
            conn.close()
        for run in runs:
            await self.admin("DELETE", f"/_mockllm/runs/{run}")
        plan = intended(mode, config)
        lateness: list[float] = []
        first: list[float] = []
        spans: list[float] = []
        errors: list[str] = []
        for conn, result in zip(conns, results, strict=True):
            problem = repr(result) if isinstance(result, BaseException) else verify(conn, config, self.text)
            if problem is not None:
                errors.append(problem)
                continue
            a0 = conn.arrivals[0]
            first.append((a0 - conn.sent) * 1000 - plan[0])
            lateness += [((a - a0) * 1000 - (p - plan[0])) for a, p in zip(conn.arrivals[1:], plan[1:], strict=True)]
            spans.append((conn.arrivals[-1] - a0) * 1000)
        lateness.sort()
        first.sort()
        spans.sort()
        return {"mode": mode, "pace": pace, "streams": streams, "events": config.events, "gap_ms": config.gap_ms,
                "verified": streams - len(errors), "errors": errors[:5], "wall_s": wall,
                "late_p50_ms": percentile(lateness, 0.5), "late_p99_ms": percentile(lateness, 0.99),
                "late_max_ms": lateness[-1] if lateness else float("nan"),
                "first_p50_ms": percentile(first, 0.5), "first_p99_ms": percentile(first, 0.99),
                "span_intended_ms": plan[-1] - plan[0], "span_p50_ms": percentile(spans, 0.5),
                "server_cpu_util": cpu / wall, "client_cpu_util": mine / wall,
                # /proc counts CPU time in 10 ms ticks: too few of them say nothing per event.
                "server_cpu_us_per_event": cpu / (streams * config.events) * 1e6 if cpu >= 0.05 else float("nan")}


async def measure(base_url: str, pid: int, config: Config) -> list[dict[str, Any]]:
    client = Client(base_url, pid, config)
    out = []
    for mode in config.modes:
        for streams in config.levels:
            out.append(await client.level(mode, streams))
    return out


# ---------------------------------------------------------------------------------------------


def table(results: list[dict[str, Any]], config: Config) -> bench.Table:
    out = bench.Table(
        f"4. Pacing: paced streams open at once, {config.events} events each, {config.gap_ms:g} ms apart; "
        "lateness per event = its drift from the schedule, counted from the stream's first byte (p50/p99/max "
        "over every event of every stream); first event: from the request's write, past its intended offset",
        ["pace", "streams", "verified", "lateness p50 (ms)", "p99 (ms)", "max (ms)", "first event p50/p99 (ms)",
         "span intended/p50 (ms)", "server CPU/event (us)", "server CPU busy", "client CPU busy", "target"])
    for r in results:
        verified = r["verified"] == r["streams"]
        judged = r["streams"] <= JUDGED_STREAMS and r["mode"] != "burst"
        target = f"all; p99 <= {r['gap_ms']:g} ms" if judged else "all; lateness info"
        out.add(r["pace"], r["streams"], f"{r['verified']}/{r['streams']}", r["late_p50_ms"], r["late_p99_ms"],
                r["late_max_ms"], f"{r['first_p50_ms']:.2f}/{r['first_p99_ms']:.2f}",
                f"{r['span_intended_ms']:.0f}/{r['span_p50_ms']:.0f}", r["server_cpu_us_per_event"],
                f"{r['server_cpu_util']:.0%}", f"{r['client_cpu_util']:.0%}", target,
                passed=verified and (not judged or r["late_p99_ms"] <= r["gap_ms"]))
    return out


def parse_args(argv: list[str]) -> Config:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tiny configuration (seconds), for tests")
    parser.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",") if x],
                        help="comma-separated numbers of streams open at once")
    parser.add_argument("--events", type=int, help="SSE events per stream (>= 4)")
    parser.add_argument("--gap-ms", type=float, help="ms between events (fixed) and between recorded deltas")
    parser.add_argument("--modes", type=lambda s: [x for x in s.split(",") if x], help="fixed,recorded")
    parser.add_argument("--json", type=Path, help="also write every measurement here as JSON")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temp folder)")
    args = parser.parse_args(argv)
    base = dict(QUICK if args.quick else FULL)
    for key in ("levels", "events", "gap_ms", "modes"):
        if getattr(args, key) is not None:
            base[key] = getattr(args, key)
    if not set(base["modes"]) <= set(MODES) or int(base["events"]) < 4:  # type: ignore[call-overload]
        parser.error(f"--modes: some of {', '.join(MODES)}; --events: at least 4")
    return Config(json=args.json, keep=args.keep, **base)  # type: ignore[arg-type]


def main(argv: list[str]) -> int:
    config = parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, min(hard, 65536)) if hard != resource.RLIM_INFINITY else max(soft, 65536)
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # inherited by the server: 1,000 streams
    workdir = config.keep or Path(tempfile.mkdtemp(prefix="mockllm-bench-pace-"))
    workdir.mkdir(parents=True, exist_ok=True)
    procs = bench.Processes()
    started = time.perf_counter()
    try:
        write_scenario(workdir / "suite" / SCENARIO, config)
        proc, match = procs.start([sys.executable, "-m", "mockllm.cli", "serve", str(workdir / "suite"),
                                   "--port", "0"], workdir / "mockllm-pace.stderr", r"serving .* on (http://\S+)")
        try:
            import uvloop

            results = uvloop.run(measure(match.group(1), proc.pid, config))
        except ImportError:  # pragma: no cover - uvloop is a test dependency
            results = asyncio.run(measure(match.group(1), proc.pid, config))
    except Exception as exc:
        print(f"bench_pace: failed: {exc!r}", file=sys.stderr)
        return 2
    finally:
        procs.stop_all()
        if config.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    out = table(results, config)
    print(out.render(), end="\n\n")
    for r in results:
        if r["errors"]:
            print(f"{r['pace']} x{r['streams']}: first errors:", *r["errors"], sep="\n  ")
    print(f"bench_pace: {time.perf_counter() - started:.0f} s; "
          + ("targets missed" if out.failed else "every target met"))
    if config.json is not None:
        config.json.write_text(json.dumps({"results": results, "failed": out.failed, "table": out.render()},
                                          indent=1))
    return 1 if out.failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(sys.argv[1:]))
