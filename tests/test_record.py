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
