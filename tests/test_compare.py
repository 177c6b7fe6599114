"""How a request's new inputs are compared with the recording, with no socket: tool results by the
call they answer, framework-made ids by position, built-in normalisations, diffs on masked texts,
and a divergence that fails the run's checks unless its policy is "warn"."""

from __future__ import annotations

import re

import pytest

from mockllm.replay.divergence import Comparison, compare, describe
from mockllm.replay.normalize import BUILTIN, IGNORED, masked, masks_for
from mockllm.replay.report import DivergenceReport, RunReport, SessionReport
from mockllm.script.inputs import Input

OURS = frozenset({"toolu_oslo", "toolu_rome"})


def tool(call_id: str, text: str) -> Input:
    return Input("tool", text, call_id)


def test_parallel_tool_results_match_by_the_call_they_answer_in_any_order() -> None:
    recorded = [tool("toolu_oslo", "Oslo: 4C"), tool("toolu_rome", "Rome: 18C")]
    live = [tool("toolu_rome", "Rome: 18C"), tool("toolu_oslo", "Oslo: 4C")]
    assert compare(recorded, live, Comparison(model_ids=OURS)) is None
    changed = [tool("toolu_rome", "Rome: 19C"), tool("toolu_oslo", "Oslo: 4C")]
    mismatch = compare(recorded, changed, Comparison(model_ids=OURS))
    assert mismatch is not None and mismatch.what == "the tool result for toolu_rome"
    assert describe(mismatch, Comparison(model_ids=OURS))[1:] == (
        "tool result for toolu_rome: Rome: 18C", "tool result for toolu_rome: Rome: 19C", "…Rome: [-18C][+19C]…")


def test_a_missing_or_extra_result_for_a_model_call_is_a_divergence() -> None:
    recorded = [tool("toolu_oslo", "Oslo: 4C"), tool("toolu_rome", "Rome: 18C")]
    missing = compare(recorded, [tool("toolu_oslo", "Oslo: 4C")], Comparison(model_ids=OURS))
    assert missing is not None and missing.have is None and "toolu_rome" in missing.what
    extra = compare(recorded[:1], recorded, Comparison(model_ids=OURS))
    assert extra is not None and extra.want is None


def test_framework_made_ids_are_ignored_and_matched_by_position() -> None:
    recorded = [tool("call_4f1b", "Transferred back to supervisor"), Input("user", "go on")]
    live = [Input("user", "go on"), tool("call_99aa", "Transferred back to supervisor")]
    assert compare(recorded, live, Comparison(model_ids=OURS)) is None
    other = [Input("user", "go on"), tool("call_99aa", "Transferred to the billing agent")]
    mismatch = compare(recorded, other, Comparison(model_ids=OURS))
    assert mismatch is not None and mismatch.what == "framework-made tool result 1 (ids ignored)"


def test_user_messages_are_compared_in_order() -> None:
    recorded = [Input("user", "first"), Input("user", "second")]
    mismatch = compare(recorded, [Input("user", "second"), Input("user", "first")], Comparison())
    assert mismatch is not None and mismatch.what == "user message 1 of 2"


@pytest.mark.parametrize(("recorded", "live"), [
    ("run 3f2b8c1e-5d4a-4b6f-9e7d-0a1b2c3d4e5f started", "run 0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9 started"),
    ("at 2026-11-30T10:00:00Z today", "at 2026-12-01T08:15:42.123+01:00 today"),
    ("on 2026-11-30", "on 2026-12-01"),
    ("commit 9fceb02d0ae598e95dc970b74767f19372d61af8 ok", "commit 1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b ok"),
    ("took 1532 ms", "took 87ms"),
    ("wrote /tmp/tmpa81xk2/out.txt now", "wrote /tmp/pytest-of-ci/pytest-7/out.txt now"),
    ("at 10:00:01.5", "at 23:59:59"),
    # Claude Code's Task result: a fresh agentId (7 or 17 hex digits) and the subagent's measured time.
    ("agentId: a6538a2 (for resuming)\n<usage>total_tokens: 21568\ntool_uses: 11\nduration_ms: 24737</usage>",
     "agentId: ad95d26 (for resuming)\n<usage>total_tokens: 21568\ntool_uses: 11\nduration_ms: 3310</usage>"),
    ("agentId: a063aa6b3b2398874 (for resuming)", "agentId: a4ed1027e53e6a289 (for resuming)"),
    # Codex's shell results, structured and freeform.
    ('{"output": "ok", "metadata": {"exit_code": 0, "duration_seconds": 0.1}}',
     '{"output": "ok", "metadata": {"exit_code": 0, "duration_seconds": 2}}'),
    ("Exit code: 0\nWall time: 0 seconds\nOutput:\nok", "Exit code: 0\nWall time: 1.3 seconds\nOutput:\nok"),
    ("tests passed in 4.21s", "tests passed in 12s"),
], ids=["uuid", "iso-datetime", "iso-date", "hex-id", "duration-ms", "temp-folder", "time", "claude-code-agent-result",
        "long-agent-id", "codex-structured", "codex-freeform", "seconds"])
def test_built_in_normalisations_mask_what_agents_vary(recorded: str, live: str) -> None:
    how = Comparison(masks_for((), normalize=True))
    assert compare([Input("user", recorded)], [Input("user", live)], how) is None
    assert compare([Input("user", recorded)], [Input("user", live)], Comparison(masks_for((), False))) is not None


def test_normalisations_leave_ordinary_words_and_numbers_alone() -> None:
    text = "add 1234567890123 to the deadbeef cafe total of 42, then run make"
    assert masked(text, BUILTIN) == text
    ids = "call_abc1234def and toolu_01Oslo7kQv are ids the replay serves back; #1a2b3c is a colour; 2 sons"
    assert masked(ids, BUILTIN) == ids
    assert compare([Input("user", "exit code: 0")], [Input("user", "exit code: 1")], Comparison(BUILTIN)) is not None


def test_a_diff_is_computed_on_the_masked_texts() -> None:
    how = Comparison(masks_for((re.compile(r"seed=\d+"),), normalize=True))
    mismatch = compare([Input("user", "seed=1 at 2026-01-01: say HELLO")],
                       [Input("user", "seed=2 at 2026-02-02: say GOODBYE")], how)
    assert mismatch is not None
    _, expected, got, diff = describe(mismatch, how)
    assert expected == f"{IGNORED} at <datetime>: say HELLO" and got == f"{IGNORED} at <datetime>: say GOODBYE"
    assert diff == "…red> at <datetime>: say [-HELLO][+GOODBYE]…"  # context reaches into the mask


def report(divergence: str) -> RunReport:
    return RunReport("run-1", "s", True, sessions=[SessionReport("p", "session.jsonl", "primary", "p", 1, 1, 0)],
                     divergences=[DivergenceReport("input", "session.jsonl", "p", 0, "the last user message",
                                                   "hello", "bye", "…[-hello][+bye]…")],
                     diverged_calls=1, divergence=divergence)


def test_a_divergence_is_a_problem_of_the_run_and_its_headline_says_what() -> None:
    failing = report("fail")
    assert failing.problems() == ["diverged: session session.jsonl (live id p) call 0 (0-based), the last user "
                                  "message: "
                                  "expected 'hello', got 'bye' (…[-hello][+bye]…)"]
    head = failing.describe().splitlines()[0]
    assert "1 problem(s)" in head and "first session.jsonl call 0 (0-based) at the last user message" in head


def test_under_warn_a_divergence_is_reported_and_fails_nothing() -> None:
    warned = report("warn")
    assert warned.problems() == []
    lines = warned.describe().splitlines()
    assert lines[0].endswith("replayed as recorded") and "(divergence: warn, so this fails nothing)" in lines[1]
