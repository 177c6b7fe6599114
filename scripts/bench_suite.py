#!/usr/bin/env python3
"""A replayed pytest suite's cost per test: mockllm's plugin against pytest-recording (vcrpy cassettes).

    python3 scripts/bench_suite.py                 the four cells of issue 28, 5 repetitions (~22 minutes)
    python3 scripts/bench_suite.py --quick         a tiny configuration (seconds): checks that it all works
    python3 scripts/bench_suite.py --reps 2 --cells 1:200:1,2:200:5

What a team choosing a tool would measure. For each cell (workers, N tests, K calls per test) the
script generates two pytest suites of N tests that differ only in how they reach the model: each
test makes K streamed chat completion calls through the official `openai` SDK (K=1: one call;
K>1: a small tool loop, K-1 calls answered with a tool call whose result the test sends back, then
a text answer). One suite uses mockllm's plugin (`mockllm_run`, `@pytest.mark.mockllm()`, the
recording named after the test), the other pytest-recording (`@pytest.mark.vcr`, one cassette per
test). Both are recorded once against a scripted provider (a streaming OpenAI-compatible aiohttp
app in this process: `--mockllm-record-mode once --mockllm-upstream URL`, and `--record-mode once`),
then the provider is stopped and every timed run replays offline (`--mockllm-record-mode none`,
`--record-mode none`). Each tool's suite runs with only its own plugin (`-p no:` the other's).

Timed: the whole `python -m pytest` process, wall time and CPU time (its own and every process it
waited for: xdist's workers, mockllm's server process). An empty suite (N tests that do nothing,
same flags) is timed beside each, and per-test overhead is (suite - empty) / N: what the tool and
the SDK's calls add to each test. `--before DIR` also replays the mockllm suites with another
checkout's mockllm, interleaved: a before/after comparison in the same run. Every process imports
from cached bytecode kept in a folder of the benchmark's own (see child_env). An untimed pass of
each tool comes first. Repetitions are interleaved (mockllm, vcrpy, their empty suites,
the order flipped on every repetition), so the host's drift hits both alike; the table shows the
median over repetitions and, for the ratio, the median and the range of the per-repetition ratios
(mockllm / vcrpy, each from the same repetition).

The floor (unless --no-floor): the mockllm suite's tests again, with neither tool's plugin, their
fixture handing the SDK the address of a bare asyncio server (uvloop's loop when installed, as
mockllm's) that writes the scripted provider's bytes at once: no admin call, no run, no binding. It
is what any tool that answers over a real socket costs at least (the SDK's connection and HTTP
parsing per call), and shows how much of mockllm's per-test cost is its own.

Also measured, in the same repetitions:
- the plugin's import: `import <plugin module>` in a fresh interpreter that has already imported
  pytest (pytest imports every installed plugin at start, whether a suite uses it or not);
- the first test's start-up: the first test's setup phase (mockllm: starting the server and
  creating the run; vcrpy: loading the cassette), from a conftest hook, one worker.

Exit status: 0 mockllm at or below vcrpy per test in every cell (median ratio <= 1), 1 not, 2 the
benchmark broke. Everything runs on 127.0.0.1, and every process it starts ends before it exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TOOLS = ("mockllm", "vcrpy")
DELTAS = 16  # text deltas in each answer: a short streamed reply
PYCACHE = os.path.join(tempfile.gettempdir(), "mockllm-bench-suite-pycache")
FULL_CELLS = "1:200:1,1:200:5,1:1000:1,2:200:5"
QUICK_CELLS = "1:3:2"


@dataclass(frozen=True)
class Cell:
    workers: int
    tests: int
    calls: int

    @property
    def label(self) -> str:
        return f"{self.workers}:{self.tests}:{self.calls}"


@dataclass
class Timings:
    """Wall times (s) of every timed process, by what was run, in repetition order."""

    runs: dict[str, list[float]] = field(default_factory=dict)

    def add(self, key: str, seconds: float) -> None:
        self.runs.setdefault(key, []).append(seconds)


# ---------------------------------------------------------------------------------------------
# The scripted provider: an OpenAI-compatible streaming chat completions endpoint


def _chunk(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def provider_stream(request: dict[str, Any], serial: int) -> list[bytes]:
    """The SSE events the scripted provider answers `request` with: a tool call while the test's
    tool loop wants more steps (`steps=K` in the first user message), else DELTAS text deltas."""
    messages = request.get("messages", [])
    first = str(messages[0].get("content", "")) if messages else ""
    steps = int(first.split("steps=", 1)[1].split()[0]) if "steps=" in first else 1
    done = sum(1 for m in messages if m.get("role") == "tool")
    head = {"id": f"chatcmpl-bench{serial}", "object": "chat.completion.chunk", "created": 1_700_000_000,
            "model": request.get("model", "gpt-bench")}

    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _chunk({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    events = [event({"role": "assistant", "content": ""})]
    if done < steps - 1:
        call = {"index": 0, "id": f"call_{serial}", "type": "function",
                "function": {"name": "lookup", "arguments": ""}}
        events.append(event({"tool_calls": [call]}))
        for piece in ('{"query": ', f'"step {done}"', "}"):
            events.append(event({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
        events.append(event({}, "tool_calls"))
    else:
        events += [event({"content": f"word{i} "}) for i in range(DELTAS)]
        events.append(event({}, "stop"))
    if (request.get("stream_options") or {}).get("include_usage"):
        events.append(_chunk({**head, "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": DELTAS,
                                                                  "total_tokens": 20 + DELTAS}}))
    events.append(b"data: [DONE]\n\n")
    return events


@contextmanager
def scripted_provider() -> Iterator[str]:
    """Serve the scripted provider on a free loopback port in a thread; yields its `/v1` base URL."""
    from aiohttp import web

    serial = 0

    async def chat(request: web.Request) -> web.StreamResponse:
        nonlocal serial
        serial += 1
        body = await request.json()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in provider_stream(body, serial):
            await response.write(event)
        await response.write_eof()
        return response

    started: list[str] = []
    ready = threading.Event()
    stop = threading.Event()

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        started.append(f"http://127.0.0.1:{runner.addresses[0][1]}/v1")
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.05)
        await runner.cleanup()

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="scripted-provider", daemon=True)
    thread.start()
    if not ready.wait(30):
        raise RuntimeError("the scripted provider did not start")
    try:
        yield started[0]
    finally:
        stop.set()
        thread.join()


class _FloorProtocol(asyncio.Protocol):
    """The floor's connection: each whole request answered at once with the provider's bytes."""

    serial = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].lower()
            found = head.find(b"content-length:")
            length = int(head[found + 15:].split(b"\r\n", 1)[0]) if found >= 0 else 0
            if len(self.buffer) < end + 4 + length:
                return
            body, self.buffer = self.buffer[end + 4:end + 4 + length], self.buffer[end + 4 + length:]
            _FloorProtocol.serial += 1
            answer = b"".join(provider_stream(json.loads(body), _FloorProtocol.serial))
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"  # type: ignore[attr-defined]
                                 b"Content-Length: %d\r\n\r\n%s" % (len(answer), answer))


def serve_floor() -> None:
    """`--serve-floor`: serve the floor on a free loopback port, print it, and stop when stdin closes."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_FloorProtocol, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        await loop.run_in_executor(None, sys.stdin.read)  # until the benchmark closes it (or dies)
        server.close()

    try:
        import uvloop
        uvloop.run(main())
    except ImportError:
        asyncio.run(main())


@contextmanager
def floor_server() -> Iterator[str]:
    """The floor in a process of its own (as mockllm's server is); yields its `/v1` base URL."""
    process = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve-floor"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, env=child_env())
    try:
        port = process.stdout.readline().strip()  # type: ignore[union-attr]
        if not port.isdigit():
            raise RuntimeError("the floor server did not start")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.stdin.close()  # type: ignore[union-attr]
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# ---------------------------------------------------------------------------------------------
# The generated suites

AGENT = '''\
"""The agent under test: K streamed chat completion calls, a tool loop when K > 1."""

from openai import OpenAI

TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Look a query up.",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]


def agent(client: OpenAI, name: str, steps: int) -> str:
    messages = [{"role": "user", "content": f"steps={steps} test={name}"}]
    for _ in range(steps):
        stream = client.chat.completions.create(model="gpt-bench", messages=messages, tools=TOOLS, stream=True,
                                                stream_options={"include_usage": True})
        text, calls = [], {}
        for chunk in stream:
            for choice in chunk.choices:
                if choice.delta.content:
                    text.append(choice.delta.content)
                for call in choice.delta.tool_calls or []:
                    slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                    slot["id"] = call.id or slot["id"]
                    slot["name"] = (call.function and call.function.name) or slot["name"]
                    slot["arguments"] += (call.function and call.function.arguments) or ""
        if not calls:
            return "".join(text)
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls.values()]})
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": "found"} for c in calls.values()]
    raise AssertionError("the tool loop did not end")
'''

# The first test's setup phase, one line per worker, for the start-up row.
CONFTEST = '''\
import json
import os
import time

_first = []


def pytest_runtest_logreport(report):
    out = os.environ.get("BENCH_FIRST_SETUP")
    if out and report.when == "setup" and not _first and not hasattr(report, "node"):
        _first.append(report.duration)
        with open(out, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "setup": report.duration}) + "\\n")
'''

# The floor's suite: mockllm's tests, their fixture and marker provided here, the server's address given.
FLOOR_CONFTEST = CONFTEST + '''

import types

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "mockllm: the floor ignores it")


@pytest.fixture
def mockllm_run():
    return types.SimpleNamespace(base_url=os.environ["BENCH_FLOOR_URL"])
'''

INI = {
    "mockllm": "[pytest]\nmockllm_recordings = recordings\n",
    "vcrpy": "[pytest]\n",
    "empty": "[pytest]\n",
    "floor": "[pytest]\n",
}

TEST = {
    "mockllm": '''
@pytest.mark.mockllm()
def test_{i}(mockllm_run):
    client = OpenAI(base_url=mockllm_run.base_url, api_key="x", max_retries=0)
    assert agent(client, "{i}", STEPS).startswith("word0")
''',
    "vcrpy": '''
@pytest.mark.vcr
def test_{i}():
    client = OpenAI(base_url=PROVIDER, api_key="x", max_retries=0)
    assert agent(client, "{i}", STEPS).startswith("word0")
''',
    "empty": '''
def test_{i}():
    pass
''',
}
TEST["floor"] = TEST["mockllm"]


def write_suite(folder: Path, kind: str, cell: Cell, provider: str) -> None:
    """A suite of `cell.tests` tests for `kind` (mockllm, vcrpy, floor or empty) in `folder`."""
    folder.mkdir(parents=True)
    (folder / "pytest.ini").write_text(INI[kind])
    (folder / "conftest.py").write_text(FLOOR_CONFTEST if kind == "floor" else CONFTEST)
    (folder / "agent.py").write_text(AGENT)
    head = ("import pytest\nfrom openai import OpenAI\n\nfrom agent import agent\n\n"
            f"STEPS = {cell.calls}\nPROVIDER = {provider!r}\n")
    body = "".join(TEST[kind].format(i=i) for i in range(cell.tests))
    (folder / "test_suite.py").write_text(head + body)


def plugin_flags(kind: str) -> list[str]:
    """Only the tool's own plugin (the empty suites run once per tool's flags)."""
    return {"mockllm": ["-p", "no:recording"], "vcrpy": ["-p", "no:mockllm"],
            "floor": ["-p", "no:recording", "-p", "no:mockllm"]}[kind]


def pytest_command(folder: Path, kind: str, workers: int, mode: str, provider: str | None = None) -> list[str]:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:benchmark",
               "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning"]
    command += ["-n", str(workers)] if workers > 1 else ["-p", "no:xdist"]
    tool = kind.removeprefix("empty-")
    command += plugin_flags(tool)
    if kind == "mockllm":
        command += ["--mockllm-record-mode", mode]
        if provider:
            command += ["--mockllm-upstream", provider]
    elif kind == "vcrpy":
        command += ["--record-mode", mode]
    return [*command, str(folder)]


def child_env(extra: dict[str, str] | None = None, root: Path = ROOT) -> dict[str, str]:
    """The environment of a pytest process: `root`'s mockllm first on the path, nothing from CI."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    for name in ("CI", "PYTHONSTARTUP", "PYTEST_ADDOPTS", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        env.pop(name, None)
    # Imports as on any installed system: from cached bytecode. A machine that sets
    # PYTHONDONTWRITEBYTECODE would have every process compile every module it imports (tens of
    # milliseconds per package, for both tools); the cache goes to a folder of the benchmark's own,
    # never beside shared site-packages.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = PYCACHE
    env.update(extra or {})
    return env


def run_pytest(command: list[str], folder: Path, timeout: float, extra: dict[str, str] | None = None,
               root: Path = ROOT) -> tuple[float, float]:
    """Run one pytest process to completion: its wall time and its CPU time (user + system, its
    own and every process it waited for: xdist's workers, a server process). A failing suite
    breaks the benchmark."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=child_env(extra, root), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-4000:]}\n"
                           f"{done.stderr[-2000:]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


IMPORT_PROBE = '''\
import sys, time
import pytest
t = time.perf_counter()
import {module}
print(time.perf_counter() - t)
'''
PLUGIN_MODULE = {"mockllm": "mockllm.pytest_plugin", "vcrpy": "pytest_recording.plugin"}


def import_time(tool: str, root: Path = ROOT) -> float:
    done = subprocess.run([sys.executable, "-c", IMPORT_PROBE.format(module=PLUGIN_MODULE[tool])],
                          env=child_env(root=root),
                          capture_output=True, text=True, timeout=60, check=True, cwd=root)
    return float(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# The benchmark


class Bench:
    def __init__(self, cells: list[Cell], reps: int, workdir: Path, timeout: float, before: Path | None,
                 floor: bool = True) -> None:
        # "before": the mockllm suites replayed by another checkout's mockllm (--before), interleaved too;
        # "floor": mockllm's tests answered by a bare server, no plugin (see the module's docstring).
        self.tools = [*TOOLS, *(["before"] if before else []), *(["floor"] if floor else [])]
        self.plugins = [tool for tool in self.tools if tool != "floor"]  # the floor has no plugin to import
        self.floor = floor
        self.before = before
        self.cells = cells
        self.reps = reps
        self.workdir = workdir
        self.timeout = timeout
        self.timings = Timings()
        self.first_setup: dict[str, list[float]] = {t: [] for t in self.tools}
        self.imports: dict[str, list[float]] = {t: [] for t in self.tools}

    def suite(self, kind: str, cell: Cell) -> Path:
        # One suite per (N, K): the workers only change how it runs.
        return self.workdir / f"{kind}-{cell.tests}-{cell.calls}"

    def prepare(self) -> None:
        """Generate and record every suite against the scripted provider, then stop it."""
        with scripted_provider() as provider:
            for cell in self.cells:
                for kind in ("mockllm", "vcrpy", "empty", *(["floor"] if self.floor else [])):
                    folder = self.suite(kind, cell)
                    if folder.exists():
                        continue
                    write_suite(folder, kind, cell, provider)
                    if kind in TOOLS:
                        run_pytest(pytest_command(folder, kind, 1, "once", provider), folder, self.timeout * 4)
                self.check_recorded(cell)

    def check_recorded(self, cell: Cell) -> None:
        mock = sorted(p.name for p in (self.suite("mockllm", cell) / "recordings" / "test_suite").iterdir())
        tapes = sorted((self.suite("vcrpy", cell) / "cassettes" / "test_suite").glob("*.yaml"))
        if len(mock) != cell.tests or len(tapes) != cell.tests:
            raise RuntimeError(f"cell {cell.label}: recorded {len(mock)} mockllm scenarios and {len(tapes)} "
                               f"cassettes for {cell.tests} tests")

    def root(self, tool: str) -> Path:
        return self.before if tool == "before" and self.before else ROOT

    def replay(self, kind: str, cell: Cell, rep: int, timed: bool = True) -> None:
        tool = kind.removeprefix("empty-")
        suite = "mockllm" if tool == "before" else tool
        folder = self.suite(suite if kind == tool else "empty", cell)
        first = self.workdir / f"first-{kind}-{cell.label}-{rep}.jsonl"
        first.unlink(missing_ok=True)  # a kept folder's earlier run must not count
        # The provider is gone (its port closed): a replay that tried the network would fail.
        extra = {"BENCH_FIRST_SETUP": str(first)}
        command = pytest_command(folder, suite if kind == tool else f"empty-{suite}", cell.workers, "none")
        with floor_server() if kind == "floor" else contextlib.nullcontext("") as floor:
            seconds, cpu = run_pytest(command, folder, self.timeout, {**extra, "BENCH_FLOOR_URL": floor},
                                      self.root(tool))
        if not timed:
            return
        self.timings.add(f"{kind}@{cell.label}", seconds)
        self.timings.add(f"cpu {kind}@{cell.label}", cpu)
        if kind == tool and cell.workers == 1 and first.exists():
            lines = [json.loads(line) for line in first.read_text().splitlines()]
            self.first_setup[kind].append(statistics.mean(line["setup"] for line in lines))

    def run(self) -> None:
        self.prepare()
        # One untimed pass of every tool and its empty suite: bytecode cached, files in the page cache.
        for tool in self.tools:
            self.replay(tool, self.cells[0], -1, timed=False)
            self.replay(f"empty-{tool}", self.cells[0], -1, timed=False)
        for rep in range(self.reps):
            order = self.tools if rep % 2 == 0 else self.tools[::-1]
            for tool in (t for t in order if t in self.plugins):
                self.imports[tool].append(import_time("mockllm" if tool == "before" else tool, self.root(tool)))
            for cell in self.cells:
                for tool in order:
                    self.replay(tool, cell, rep)
                    self.replay(f"empty-{tool}", cell, rep)
            # The table so far after each repetition: a long run on a busy machine shows where it is.
            print(f"repetition {rep + 1}/{self.reps} done\n{self.table()[0]}", file=sys.stderr, flush=True)

    def per_test(self, tool: str, cell: Cell, measure: str = "") -> list[float]:
        """Per-test overhead (ms) in each repetition: (suite - its empty suite) / N; `measure`
        "cpu " for CPU time instead of wall time."""
        suite = self.timings.runs[f"{measure}{tool}@{cell.label}"]
        empty = self.timings.runs[f"{measure}empty-{tool}@{cell.label}"]
        return [(s - e) / cell.tests * 1000 for s, e in zip(suite, empty, strict=True)]

    def table(self) -> tuple[str, bool, dict[str, Any]]:
        rows = []
        met = True
        results: dict[str, Any] = {"cells": []}
        for cell in self.cells:
            mock, vcr = self.per_test("mockllm", cell), self.per_test("vcrpy", cell)
            ratios = [m / v if v > 0 else float("nan") for m, v in zip(mock, vcr, strict=True)]
            ratio = statistics.median(ratios)
            ok = ratio <= 1.0
            met &= ok
            cpu_mock, cpu_vcr = self.per_test("mockllm", cell, "cpu "), self.per_test("vcrpy", cell, "cpu ")
            cpu_ratios = [m / v if v > 0 else float("nan") for m, v in zip(cpu_mock, cpu_vcr, strict=True)]
            row = [str(cell.workers), f"{cell.tests:,}", str(cell.calls), _spread(mock), _spread(vcr),
                   _ratio(ratios), _spread(cpu_mock), _spread(cpu_vcr), _ratio(cpu_ratios)]
            if self.before:
                old = self.per_test("before", cell)
                row += [_spread(old), _ratio([m / b for m, b in zip(mock, old, strict=True) if b > 0])]
                results.setdefault("before_ms", []).append(old)
            if self.floor:
                floor = self.per_test("floor", cell)
                row += [_spread(floor), _ratio([f / v for f, v in zip(floor, vcr, strict=True) if v > 0])]
                results.setdefault("floor_ms", []).append(floor)
            rows.append([*row, "PASS" if ok else "FAIL"])
            results["cells"].append({"workers": cell.workers, "tests": cell.tests, "calls": cell.calls,
                                     "mockllm_ms": mock, "vcrpy_ms": vcr, "ratios": ratios,
                                     "mockllm_cpu_ms": cpu_mock, "vcrpy_cpu_ms": cpu_vcr,
                                     "suite_s": {k: v for k, v in self.timings.runs.items()
                                                 if k.endswith("@" + cell.label)}})
        imports = {t: [x * 1000 for x in self.imports[t]] for t in self.plugins}
        first = {t: [x * 1000 for x in self.first_setup[t]] for t in self.plugins}
        for label, values in (("plugin import (ms)", imports), ("first test's setup (ms)", first)):
            if all(values[t] for t in self.plugins):
                ratios = [m / v for m, v in zip(values["mockllm"], values["vcrpy"], strict=False) if v > 0]
                row = [label, "", "", _spread(values["mockllm"]), _spread(values["vcrpy"]), _ratio(ratios), "", "", ""]
                if self.before:
                    row += [_spread(values["before"]), _ratio([m / b for m, b in zip(
                        values["mockllm"], values["before"], strict=False) if b > 0])]
                row += ["", ""] if self.floor else []
                rows.append([*row, "info"])
        results["imports_ms"] = imports
        results["first_setup_ms"] = first
        header = ["workers", "N", "K", "mockllm ms/test", "vcrpy ms/test", "ratio (range)", "mockllm CPU ms/test",
                  "vcrpy CPU ms/test", "CPU ratio (range)"]
        header += ["before ms/test", "mockllm / before"] if self.before else []
        header += ["floor ms/test", "floor / vcrpy"] if self.floor else []
        header.append("result")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
                 for r in [header, ["-" * w for w in widths], *rows]]
        title = (f"== Replayed suite, per-test overhead ((suite - empty suite) / N, wall and CPU time), median "
                 f"(min-max) of {self.reps} interleaved repetition(s); ratios per repetition"
                 + (f"; before: the mockllm of {self.before}" if self.before else "")
                 + ("; floor: the same tests answered at once by a bare server, no plugin" if self.floor else "")
                 + " ==")
        return "\n".join([title, *lines]), met, results


def _ratio(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else "-"


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    median = statistics.median(values)
    return f"{median:.1f} ({min(values):.1f}-{max(values):.1f})" if len(values) > 1 else f"{median:.1f}"


def parse_cells(text: str) -> list[Cell]:
    cells = []
    for part in text.split(","):
        workers, tests, calls = (int(x) for x in part.split(":"))
        cells.append(Cell(workers, tests, calls))
    return cells


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tiny configuration (seconds), for tests")
    parser.add_argument("--cells", help=f"workers:N:K,… (default {FULL_CELLS}; --quick {QUICK_CELLS})")
    parser.add_argument("--reps", type=int, help="interleaved repetitions (default 5; --quick 1)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one pytest process may take")
    parser.add_argument("--json", type=Path, help="also write every measurement here as JSON")
    parser.add_argument("--before", type=Path, help="also replay the mockllm suites with the mockllm of this "
                        "checkout (a folder holding mockllm/), interleaved: a before/after comparison")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (suites recorded there are reused)")
    parser.add_argument("--no-floor", action="store_true", help="leave out the floor (a bare server, no plugin)")
    parser.add_argument("--serve-floor", action="store_true", help=argparse.SUPPRESS)  # the floor's own process
    args = parser.parse_args(argv)
    if args.serve_floor:
        serve_floor()
        return 0
    cells = parse_cells(args.cells or (QUICK_CELLS if args.quick else FULL_CELLS))
    reps = args.reps or (1 if args.quick else 5)
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="mockllm-bench-suite-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        bench = Bench(cells, reps, workdir, args.timeout, args.before and args.before.resolve(), not args.no_floor)
        bench.run()
        text, met, results = bench.table()
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
        print(f"bench_suite: the benchmark broke: {exc}", file=sys.stderr)
        return 2
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"results": results}, indent=1))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
