"""Test helper: record a real framework's agent team through `mockllm record`, then replay it many times.

A team is an async function `team(base, pauses)` that runs a coordinator and its concurrent
subagents against `base` (`http://host:port`, or a run's base without `/v1`: each framework's
client adds what its API needs) and returns what came of it: the coordinator's final output and
each subagent's output. It sends no mockllm header: every session is found by its conversation,
as a user's agent would be found. `pauses` (None while recording) makes each subagent wait a
random 0-30 ms before it starts, so that replays start them in orders the recording never saw.

`record_team` runs the team once against the scripted upstream (`tests/scripted_llm.py`, which
knows nothing of mockllm) through the recorder, in-process; `replay_team` serves the recorded
tree with the default settings and runs the team again, each time in a fresh run, asserting every
replay exact (the same outcome as recorded) and clean (`assert_consumed`: no failure, no
divergence, every recorded call served).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mockllm
from mockllm.record.command import RecordOptions, start_recorder
from mockllm.replay.report import RunReport
from mockllm.scenario.load import Scenario, load_scenario
from tests.scripted_llm import ScriptedLLM

REPLAYS = 6
MAX_PAUSE = 0.03
# Every call is plain HTTP on loopback; an SDK client that verifies TLS loads the CA bundle when it
# is made (~0.1 s of CPU), and a team makes a client per run.
NO_TLS = False


@dataclass
class Pauses:
    """Random pauses before subagents start (one generator per replay, seeded by its number)."""

    rng: random.Random

    async def before_subagent(self) -> None:
        await asyncio.sleep(self.rng.uniform(0, MAX_PAUSE))


async def pause(pauses: Pauses | None) -> None:
    if pauses is not None:
        await pauses.before_subagent()


def openai_client(base: str) -> Any:
    """An OpenAI SDK client for `base` (no retries: a refused call must fail the test at once)."""
    import openai

    return openai.AsyncOpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0,
                              http_client=openai.DefaultAsyncHttpxClient(verify=NO_TLS))


def anthropic_client(base: str) -> Any:
    """An Anthropic SDK client for `base` (its SDK adds `/v1`)."""
    import anthropic

    return anthropic.AsyncAnthropic(base_url=base, api_key="sk-ant-test", max_retries=0,
                                    http_client=anthropic.DefaultAsyncHttpxClient(verify=NO_TLS))


@dataclass
class Outcome:
    final: str
    subagents: dict[str, str] = field(default_factory=dict)  # who -> what it answered


Team = Callable[[str, Pauses | None], Awaitable[Outcome]]


@dataclass
class Recorded:
    outcome: Outcome
    scenario: Scenario
    llm: ScriptedLLM


async def record_team(team: Team, out: Path, *, seed: int = 0) -> Recorded:
    """Run `team` once through `mockllm record` against a scripted upstream; the recorded tree is `out`."""
    llm = ScriptedLLM(seed)
    async with llm.serving(), await start_recorder(RecordOptions(llm.base_url + "/v1", out, port=0)) as recorder:
        outcome = await team(recorder.base_url, None)
    return Recorded(outcome, load_scenario(out), llm)


async def replay_team(team: Team, out: Path, recorded: Outcome, replays: int = REPLAYS) -> list[RunReport]:
    """Replay `out` `replays` times with the default settings, each in a fresh run with its own pauses;
    every replay must give `recorded` and leave a clean run. Returns each run's final report."""
    reports = []
    async with mockllm.AsyncServer(out) as server:
        for number in range(replays):
            async with await server.run(out.name) as run:
                started = time.monotonic()
                outcome = await team(run.base_url.removesuffix("/v1"), Pauses(random.Random(number)))
                took = time.monotonic() - started
                report = await run.report()
                assert outcome == recorded, (f"replay {number + 1} ({took:.2f} s) differs from the recording:\n"
                                             f"{_differences(recorded, outcome)}\n{report.describe()}")
                await run.assert_consumed()
                report = await run.end()
            assert not [n for n in report.notices if n.kind == "bound_by_arrival"], report.describe()
            reports.append(report)
    # Header-less live ids are numbered in the order sessions started: the pauses must have started
    # the subagents in more than one order, or content binding was never put to the test.
    orders = {tuple(s.live_id for s in report.sessions) for report in reports}
    assert len(orders) > 1, f"every replay started the sessions in the same order: {orders}"
    return reports


def _differences(recorded: Outcome, replayed: Outcome) -> str:
    lines = [f"  final: recorded {recorded.final!r}, replayed {replayed.final!r}"] if recorded.final != replayed.final \
        else []
    for who in sorted(recorded.subagents.keys() | replayed.subagents.keys()):
        want, got = recorded.subagents.get(who), replayed.subagents.get(who)
        if want != got:
            lines.append(f"  {who}: recorded {want!r}, replayed {got!r}")
    return "\n".join(lines)
