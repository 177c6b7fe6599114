"""The recorder's lineage rules (`mockllm.record.lineage`) with no socket: Claude Code's request
fixtures observed as the proxy observes them, synthetic call facts for each rule and for where it
cannot tell, and a tree finished from calls alone (its logs renamed and rewritten, its sidecar
moved to the final primary, and what a crash before that leaves)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mockllm.cli.validate import check_suite
from mockllm.dsh.chunks import Block, BlockEnd, BlockStart, Failure, FinishChunk, FinishReason, TextDelta
from mockllm.dsh.writer import recover
from mockllm.record.call import ObservedCall, TimedChunk, observe
from mockllm.record.lineage import CallFacts, SessionFacts, facts_of, lay_out
from mockllm.record.redact import Redactor
from mockllm.record.tree import Caller, Failed, Lineage, SessionTree
from mockllm.replay.conversations import ConversationIndex
from mockllm.scenario.load import load_scenario, load_suite
from mockllm.wire.anthropic.dialect import AnthropicMessages
from mockllm.wire.request import Message
from mockllm.wire.sse_reader import SSEReader
from tests.claude_code import CWD, OSLO, REQUESTS, ROME, SUMMARY, answer, body

ANTHROPIC = AnthropicMessages()


def observed(name: str, arrival: int) -> ObservedCall:
    """Request `name` and its scripted answer, as the proxy observes them (decoded, no socket)."""
    request = ANTHROPIC.decode_request(body(name))
    call = observe(request.tail, 1000 + arrival, arrival=arrival, offers_tools=bool(request.offered_tools))
    decoder, reader = ANTHROPIC.stream_decoder(), SSEReader()
    for piece in answer(name).pieces:
        for event, data in reader.feed(piece):
            call.chunks += [TimedChunk(1000 + arrival, c) for c in decoder.feed(event, data)]
    call.chunks += [TimedChunk(1000 + arrival, c) for c in decoder.close()]
    return call


def claude_code_sessions(order: tuple[str, ...] = REQUESTS) -> dict[str, SessionFacts]:
    """Claude Code's run grouped by conversation as the recorder groups it, keyed by each session's first request."""
    index = ConversationIndex()
    sessions: dict[str, SessionFacts] = {}
    first: dict[str, str] = {}
    for arrival, name in enumerate(order, 1):
        live, new = index.route(ANTHROPIC.decode_request(body(name)).messages)
        if new:
            first[live] = name
            sessions[name] = SessionFacts(name)
        sessions[first[live]].calls.append(facts_of(observed(name, arrival)))
    return sessions


def test_claude_code_the_conversation_is_primary_and_the_subagents_its_children_in_arrival_order():
    sessions = claude_code_sessions()
    assert list(sessions) == ["title", "main-1", "agent-oslo-1", "agent-rome-1"]
    layout = lay_out(list(sessions.values()))
    assert layout.primary == "main-1", "not the title call, though it came first"
    assert layout.children == ["title", "agent-oslo-1", "agent-rome-1"]
    assert layout.parents == dict.fromkeys(layout.children, "main-1")
    assert layout.inferred == {"agent-oslo-1", "agent-rome-1"}, "read from the answers; the title by default"
    created = [layout.created[s] for s in ("title", "main-1", "agent-oslo-1", "agent-rome-1")]
    assert created == sorted(created) and len(set(created)) == 4


def test_claude_code_facts_read_the_tool_results_and_the_final_answers():
    sessions = claude_code_sessions()
    main = sessions["main-1"]
    assert main.calls[0].calls_tools and main.calls[0].tool_calls == ("toolu_01Oslo7kQv", "toolu_02Rome9xZw")
    assert [call_id for call_id, _ in main.calls[1].results] == ["toolu_02Rome9xZw", "toolu_01Oslo7kQv"]
    assert main.calls[1].results[0][1].startswith("Rome:18°Candsunny.agentId:"), "whitespace squeezed"
    assert [sessions["agent-oslo-1"].last.answer, sessions["agent-rome-1"].last.answer] == [OSLO, ROME]
    assert sessions["title"].one_off() and not main.one_off()


def test_results_in_another_order_than_the_calls_or_a_subagent_started_late_change_nothing():
    """Rome's subagent first, and its result first: still both children, numbered as they arrived."""
    order = ("title", "main-1", "agent-rome-1", "agent-oslo-1", "agent-oslo-2", "main-2")
    layout = lay_out(list(claude_code_sessions(order).values()))
    assert layout.primary == "main-1"
    assert layout.children == ["title", "agent-rome-1", "agent-oslo-1"]
    assert layout.inferred == {"agent-rome-1", "agent-oslo-1"}


def call(arrival: int, *, at: int | None = None, answer: str = "", tools: tuple[str, ...] = (),
         results: tuple[tuple[str | None, str], ...] = (), offers_tools: bool = True) -> CallFacts:
    return CallFacts(arrival, 1000 + arrival if at is None else at,
                     tuple((i, "".join(t.split())) for i, t in results), tools, bool(tools), answer, offers_tools)


def session(name: str, *calls: CallFacts, parent: str | None = None) -> SessionFacts:
    return SessionFacts(name, parent, list(calls))


def test_a_child_whose_answer_never_comes_back_cannot_be_told_and_hangs_from_the_primary():
    main = session("main", call(1, tools=("c1",)), call(4, results=(("c1", "something else entirely"),)))
    helper = session("helper", call(2, tools=("x",)), call(3, answer="the helper's answer"))
    other = session("other", call(5, tools=("c2",)))
    stray = session("stray", call(6, answer="never returned"))  # main never sends anything back after it
    layout = lay_out([main, helper, other, stray])
    assert layout.parents == {"helper": "main", "other": "main", "stray": "main"}
    assert layout.inferred == frozenset(), "all by default: nothing tied them"


def test_the_nearest_waiter_is_the_parent_when_an_answer_is_quoted_on():
    coordinator = session("coordinator", call(1, tools=("a",)), call(8, results=(("a", "worker says: 42"),)))
    worker = session("worker", call(2, tools=("b",)), call(5, results=(("b", "42"),), tools=("b2",)),
                     call(6, answer="worker says: 42"))
    leaf = session("leaf", call(3, answer="42"))
    # The leaf's "42" is in both the worker's and the coordinator's results: the worker got it first.
    layout = lay_out([coordinator, worker, leaf])
    assert layout.parents == {"worker": "coordinator", "leaf": "worker"}
    assert layout.children == ["worker", "leaf"]


def test_a_session_is_no_child_of_one_that_was_not_waiting_on_tools_or_went_on_without_it():
    talking = session("talking", call(1, answer="hello"), call(4, results=(("c", "late answer"),)))
    late = session("late", call(2, answer="late answer"))  # talking's first answer called no tool
    assert lay_out([talking, late]).inferred == frozenset()
    waiting = session("waiting", call(1, tools=("c",)), call(3, results=(("c", "done"),)))
    straggler = session("straggler", call(2, answer="x"), call(4, answer="done"))  # still calling after
    assert lay_out([waiting, straggler]).inferred == frozenset()


def test_a_result_for_a_call_the_waiting_answer_did_not_make_does_not_count():
    main = session("main", call(1, tools=("mine",)), call(3, results=(("someone-elses", "the answer"),)))
    child = session("child", call(2, answer="the answer"))
    assert lay_out([main, child]).inferred == frozenset()


def test_an_answer_is_found_json_escaped_and_re_wrapped():
    answer = 'Line one says "hi".\nLine two: café'
    main = session("main", call(1, tools=("t",)),
                   call(3, results=(("t", json.dumps({"output": answer})),)))
    child = session("child", call(2, answer=answer))
    assert lay_out([main, child]).inferred == {"child"}
    rewrapped = session("main", call(1, tools=("t",)),
                        call(3, results=(("t", 'Line one says\n  "hi". Line two:\tcafé'),)))
    assert lay_out([rewrapped, child]).inferred == {"child"}


def test_a_child_with_no_answer_to_match_cannot_be_told():
    main = session("main", call(1, tools=("t",)), call(3, results=(("t", "error: the agent failed"),)))
    child = session("child", call(2, answer=""))
    layout = lay_out([main, child])
    assert layout.parents == {"child": "main"} and layout.inferred == frozenset()


def test_a_one_off_call_never_wins_the_primary_from_a_conversation():
    title = session("title", call(1, answer="Weather", offers_tools=False))
    agent = session("agent", call(2, tools=("t",)), call(3, answer="done"))
    layout = lay_out([title, agent])
    assert (layout.primary, layout.children, layout.parents) == ("agent", ["title"], {"title": "agent"})
    # Two conversations and nothing between them: the first to arrive, as before.
    other = session("other", call(4, tools=("u",)), call(5, answer="ok"))
    assert lay_out([other, title, agent]).primary == "agent"
    # Only one-offs: the first.
    one_offs = [session("b", call(2, offers_tools=False)), session("a", call(1, offers_tools=False))]
    assert lay_out(one_offs).primary == "a"


def test_a_header_parent_is_kept_and_a_cycle_of_them_still_has_one_primary():
    main = session("main", call(1, tools=("t",)), call(3, results=(("t", "x"),)))
    named = session("named", call(2, answer="x"), parent="elsewhere")
    layout = lay_out([main, named])
    assert layout.parents == {"named": "elsewhere"} and layout.inferred == frozenset()
    a, b = session("a", call(1), parent="b"), session("b", call(2), parent="a")
    layout = lay_out([a, b])
    assert (layout.primary, layout.parents) == ("a", {"b": "a"})


def test_created_at_follows_arrival_strictly_even_within_one_millisecond():
    sessions = [session(f"s{n}", call(n, at=5000, tools=("t",))) for n in (3, 1, 2, 4)]
    layout = lay_out(sessions)
    assert [layout.created[f"s{n}"] for n in (1, 2, 3, 4)] == [5000, 5001, 5002, 5003]
    assert layout.children == ["s2", "s3", "s4"]
    later = lay_out([session("a", call(1, at=10)), session("b", call(2, at=10)), session("c", call(3, at=50))])
    assert [later.created[s] for s in "abc"] == [10, 11, 50], "raised only as much as needed"


# --- the tree, finished from calls alone ------------------------------------------------------------

TEXT = [BlockStart(0, "text"), TextDelta(0, "hi"), BlockEnd(0, Block("text", text="hi")),
        FinishChunk(FinishReason("stop"))]


def _record_claude_code(tree: SessionTree, ids: dict[str, str]) -> None:
    """Claude Code's calls recorded in the order they ended: the title first, then Rome before Oslo;
    the coordinator's second call failed upstream once (a 529) before it went through."""
    for name in ("title", "main-1", "agent-rome-1", "agent-oslo-1", "agent-oslo-2"):
        tree.record(Caller(ids[name]), observed(name, REQUESTS.index(name) + 1))
    failed = observed("main-2", 6)
    failed.chunks = []
    tree.record_failure(Caller(ids["main-2"]), failed, Failed(529, "Overloaded", "overloaded_error"))
    tree.record(Caller(ids["main-2"]), observed("main-2", 7))


IDS = {"title": "t", "main-1": "m", "main-2": "m", "agent-oslo-1": "o", "agent-oslo-2": "o", "agent-rome-1": "r"}


def test_a_finished_tree_is_renamed_and_rewritten_and_the_sidecar_follows_the_primary(tmp_path: Path):
    tree = SessionTree(tmp_path, redactor=Redactor(cwd=CWD), cwd=True)
    _record_claude_code(tree, IDS)
    # While recording, the provisional shape: the first session to end a call is the primary.
    assert [(s.id, s.file) for s in tree.sessions.values()] == [
        ("t", "session.jsonl"), ("m", "session.1.jsonl"), ("r", "session.2.jsonl"), ("o", "session.3.jsonl")]
    tree.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "replay.override.json", "session.1.jsonl", "session.2.jsonl", "session.3.jsonl", "session.jsonl"]
    scenario = load_scenario(tmp_path)
    assert [(s.id, s.file, s.parent) for s in scenario.sessions] == [
        ("m", "session.jsonl", None), ("t", "session.1.jsonl", "m"), ("o", "session.2.jsonl", "m"),
        ("r", "session.3.jsonl", "m")]
    assert [len(s.entries) for s in scenario.sessions] == [3, 1, 2, 1]
    sidecar = json.loads((tmp_path / "replay.override.json").read_text())
    assert sidecar["patches"] == [{"at": 1, "entry": {"kind": "throw", "message": "Overloaded",
                                                      "code": "overloaded_error", "status": 529}}]
    assert [str(d) for d in check_suite(load_suite(tmp_path, keep_logs=True))] == []
    assert [s.file for s in tree.sessions.values()] == ["session.jsonl", "session.1.jsonl", "session.2.jsonl",
                                                         "session.3.jsonl"]
    assert SUMMARY in (tmp_path / "session.jsonl").read_text()


def test_a_crash_before_the_tree_is_finished_leaves_the_provisional_tree_which_recover_salvages(tmp_path: Path):
    tree = SessionTree(tmp_path)
    _record_claude_code(tree, IDS)
    tree.abandon()
    for partial in sorted(tmp_path.glob("*.partial")):
        recover(partial)
    scenario = load_scenario(tmp_path)
    # Flat, and the title call primary (what recordings looked like before lineage was read), but valid.
    assert [(s.id, s.parent) for s in scenario.sessions] == [("t", None), ("m", "t"), ("o", "t"), ("r", "t")]
    assert [str(d) for d in check_suite(load_suite(tmp_path, keep_logs=True))] == []


def test_an_explicit_fork_keeps_its_seed_and_its_parent(tmp_path: Path):
    tree = SessionTree(tmp_path)
    tree.record(Caller("p"), _text_call(1))
    tree.record(Caller("p"), _text_call(2))
    tree.record(Caller("f", Lineage("p", fork=True)), _text_call(3))
    tree.close()
    scenario = load_scenario(tmp_path, keep_logs=True)
    fork = scenario.sessions[1]
    assert (fork.kind, fork.parent, len(fork.entries)) == ("fork", "p", 1) and fork.cut > 0
    assert [str(d) for d in check_suite(load_suite(tmp_path, keep_logs=True))] == []


def _text_call(arrival: int) -> ObservedCall:
    result = observe([Message("user", f"go {arrival}")], 100 + arrival, arrival=arrival)
    result.chunks = [TimedChunk(100 + arrival, c) for c in TEXT]
    return result


@pytest.mark.parametrize(("cwd", "text", "expected"), [
    ("/w/app", "see /w/app/x.py and /w/app.", "see {{cwd}}/x.py and {{cwd}}."),
    ("/w/app/", "cd /w/app", "cd {{cwd}}"),
    ("/w/app", "/w/apple /w/app-2 /w/app.txt", "/w/apple /w/app-2 /w/app.txt"),
], ids=["inside-and-at-a-sentence-end", "trailing-slash", "other-names-untouched"])
def test_cwd_is_written_as_the_placeholder_only_as_a_whole_path(cwd, text, expected):
    assert Redactor(cwd=cwd).text(text) == expected


def test_cwd_is_found_across_fragments_before_redaction():
    redactor = Redactor([r"sk-\w+"], cwd="/w/app")
    assert redactor.fragments(["cat /w/a", "pp/k sk-1", "23"]) == ["cat {{cwd}}", "/k [REDACTED]", ""]


def test_a_side_routes_failures_are_its_own_throw_entries_in_arrival_order(tmp_path: Path):
    tree = SessionTree(tmp_path, side_routes=("title-model", "unused"))
    side = Caller(side_route="title-model")
    late, cut, failed = _text_call(3), _text_call(2), _text_call(1)
    cut.chunks = [*cut.chunks[:2], TimedChunk(102, FinishChunk(FinishReason("error", failure=Failure("gone", "X"))))]
    tree.record(side, late)  # ended first, arrived last
    tree.record_cut(side, cut, Failure("the stream broke off", "STREAM_CLOSED"))
    tree.record_failure(side, failed, Failed(429, "slow down", "rate_limit_error"))
    tree.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mockllm.json", "side.title-model.json"]
    entries = json.loads((tmp_path / "side.title-model.json").read_text())
    assert [(e["kind"], e.get("status"), e.get("code")) for e in entries] == [
        ("throw", 429, "rate_limit_error"), ("throw", None, "STREAM_CLOSED"), ("chunks", None, None)]
    assert entries[1]["chunks"] == [{"type": "block-start", "index": 0, "blockType": "text"},
                                    {"type": "text-delta", "index": 0, "text": "hi"}]
