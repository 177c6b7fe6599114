"""Record mode end to end: real dsh trees replayed by `mockllm serve`, recorded through the proxy by
the official openai SDK driving every session as its agent did, then replayed from the new tree.

Record-then-replay must be lossless: every session's streams equal the original's (fragments, tool
calls, usage, finish; errors and held calls too), `check` finds nothing, and `inspect` shows the
same sessions, lineage, kinds and entry counts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mockllm.check import check_suite
from mockllm.inspect import scenario_to_json
from mockllm.record import RecordOptions, start_recorder
from mockllm.scenario import load_scenario, load_suite
from tests.agent_drive import drive, plan
from tests.conftest import CORPUS, corpus_or_skip, new_run
from tests.dialect_drive import SENDERS

# Trees with model calls (the handshake-only ones record nothing: there is nothing to replay).
SCENARIOS = sorted(
    p.parent for p in CORPUS.glob("*/*/session.jsonl") if any(s.entries for s in load_scenario(p.parent).sessions)
) if CORPUS.is_dir() else []


def _ids(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def _shape(scenario_dir: Path) -> list[dict[str, object]]:
    """What `inspect --json` says of each session, less what a recorder writes its own way (event counts)."""
    sessions = scenario_to_json(load_scenario(scenario_dir))["sessions"]
    return [{k: v for k, v in s.items() if k not in ("events", "cut")} for s in sessions]


@pytest.mark.parametrize("pack", [False, True], ids=["unpacked", "packed"])
@pytest.mark.parametrize("scenario_dir", SCENARIOS or [None], ids=_ids if SCENARIOS else None)
async def test_record_then_replay_is_lossless(serve, tmp_path, scenario_dir, pack):
    corpus_or_skip()
    original = load_scenario(scenario_dir, keep_logs=True)
    calls = plan(original)
    upstream = await serve(scenario_dir)
    _, upstream_base = await new_run(upstream.base_url, original.name)
    out = tmp_path / original.name

    recorder = await start_recorder(RecordOptions(upstream_base, out, pack=pack, port=0))
    async with recorder:
        await drive(recorder.base_url + "/v1", calls)  # what the agent sees through the proxy is the original

    suite = load_suite(out, keep_logs=True)
    assert not suite.broken, suite.broken
    assert [str(d) for d in check_suite(suite)] == []
    assert _shape(out) == _shape(scenario_dir)
    for session in suite.scenarios[out.name].sessions:
        if session.kind == "fork":
            original_fork = next(s for s in original.sessions if s.id == session.id)
            assert session.cut > 0 and session.cut <= original_fork.cut + 2, "the seed is the parent's first turns"

    replay = await serve(out)
    _, replay_base = await new_run(replay.base_url, out.name)
    await drive(replay_base, calls)  # the new recording answers as the original did


DIALECT_SCENARIOS = ["v0-unpacked/acp-agent--subagent-mixed", "v0-unpacked/acp-agent--tool-call-turn",
                     "v0-packed/acp-agent--subagent-fork-in-process"]


@pytest.mark.parametrize("dialect", sorted(SENDERS))
@pytest.mark.parametrize("name", DIALECT_SCENARIOS)
async def test_every_dialect_records_through_the_same_code(serve, tmp_path, name, dialect):
    """Recorded through Responses or Anthropic Messages, replayed as chat: the same calls, fork seed included."""
    scenario_dir = corpus_or_skip() / name
    original = load_scenario(scenario_dir, keep_logs=True)
    calls = plan(original)
    upstream = await serve(scenario_dir)
    _, upstream_base = await new_run(upstream.base_url, original.name)
    out = tmp_path / original.name
    async with await start_recorder(RecordOptions(upstream_base, out, port=0)) as recorder:
        for call in calls:
            await SENDERS[dialect](recorder.base_url + "/v1", call)
    suite = load_suite(out, keep_logs=True)
    assert [str(d) for d in check_suite(suite)] == []
    assert _shape(out) == _shape(scenario_dir)
    replay = await serve(out)
    _, replay_base = await new_run(replay.base_url, out.name)
    await drive(replay_base, calls)


@pytest.mark.parametrize("name", ["v0-unpacked/acp-agent--subagent-mixed", "v0-unpacked/acp-agent--subagent-multi"])
async def test_headerless_calls_are_grouped_by_conversation(serve, tmp_path, name):
    """No session header at all: sessions are found by conversation, as the server routes them."""
    scenario_dir = corpus_or_skip() / name
    original = load_scenario(scenario_dir, keep_logs=True)
    calls = plan(original)
    for call in calls:
        call.anonymous = True
    upstream = await serve(scenario_dir)
    _, upstream_base = await new_run(upstream.base_url, original.name)
    out = tmp_path / original.name
    async with await start_recorder(RecordOptions(upstream_base, out, port=0)) as recorder:
        await drive(recorder.base_url + "/v1", calls)
    recorded = load_scenario(out, keep_logs=True)
    assert [str(d) for d in check_suite(load_suite(out, keep_logs=True))] == []
    assert [len(s.entries) for s in recorded.sessions] == [len(s.entries) for s in original.sessions]
    primary = recorded.sessions[0].id
    # With no lineage headers a child's parent is the primary, and nothing says it is a fork.
    assert len(recorded.sessions) == len(original.sessions) > 1
    assert [(s.kind, s.parent) for s in recorded.sessions[1:]] == [("spawn", primary)] * (len(recorded.sessions) - 1)
    replay = await serve(out)
    _, replay_base = await new_run(replay.base_url, out.name)
    await drive(replay_base, calls)  # header-less again: the server routes the new tree by conversation
