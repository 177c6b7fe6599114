"""Record mode end to end: real dsh trees replayed by `mockllm serve`, recorded through the proxy by
the official openai SDK driving every session as its agent did, then replayed from the new tree.

Record-then-replay must be lossless: every session's streams equal the original's (fragments, tool
calls, usage, finish; errors and held calls too), `check` finds nothing, and `inspect` shows the
same sessions, lineage, kinds and entry counts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mockllm.cli.tree_view import scenario_to_json
from mockllm.cli.validate import check_suite
from mockllm.record.command import RecordOptions, start_recorder
from mockllm.scenario.load import load_scenario, load_suite
from tests.agent_drive import drive, plan
from tests.conftest import new_run
from tests.dialect_drive import SENDERS
from tests.logbuilder import CORPUS, corpus_or_skip

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


async def test_whole_replies_in_every_dialect_and_a_headerless_responses_chain_are_recorded(serve, tmp_path):
    """Non-streamed answers are read through each dialect's body_events; a header-less request that
    continues a response by id (previous_response_id) joins that response's session."""
    import anthropic
    import openai

    from tests.logbuilder import text_call, write_sessions

    tree = write_sessions(tmp_path / "tree", {"p": [text_call("ONE"), text_call("TWO"), text_call("THREE"),
                                                    text_call("FOUR")]})
    upstream = await serve(tree)
    _, upstream_base = await new_run(upstream.base_url, "tree")
    out = tmp_path / "recorded"
    async with await start_recorder(RecordOptions(upstream_base, out, port=0)) as recorder:
        base = recorder.base_url + "/v1"
        async with openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=0) as client:
            first = await client.responses.create(model="m", input="start")
            second = await client.responses.create(model="m", input="go on", previous_response_id=first.id)
            chat = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "start"}, {"role": "assistant", "content": "ONE"},
                                     {"role": "user", "content": "go on"}, {"role": "assistant", "content": "TWO"},
                                     {"role": "user", "content": "more"}])
        async with anthropic.AsyncAnthropic(base_url=recorder.base_url, api_key="x", max_retries=0) as messages:
            last = await messages.messages.create(model="m", max_tokens=10, messages=[
                {"role": "user", "content": "start"}, {"role": "assistant", "content": "ONE"},
                {"role": "user", "content": "go on"}, {"role": "assistant", "content": "TWO"},
                {"role": "user", "content": "more"}, {"role": "assistant", "content": "THREE"},
                {"role": "user", "content": "last"}])
    assert [first.output_text, second.output_text, chat.choices[0].message.content, last.content[0].text] == [
        "ONE", "TWO", "THREE", "FOUR"]
    recorded = load_scenario(out)
    # One session: the chained request followed its response's id, the others extended its conversation.
    assert [len(s.entries) for s in recorded.sessions] == [4]
    # A whole reply is recorded by its assembled blocks (Responses' done items carry no deltas).
    texts = [[c.block.text for c in e.chunks if type(c).__name__ == "BlockEnd"] for e in recorded.primary.entries]
    assert texts == [["ONE"], ["TWO"], ["THREE"], ["FOUR"]]
