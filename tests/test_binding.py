"""Content binding does not depend on arrival order (issue 24): each case is replayed in six random
orders of its subagents, and every replay must serve the same answers and give the same report.

- subagents asked the same thing with different `developer` prompts (agno's default role for a
  chat system prompt) each get their own recording;
- one edited subagent among three binds to its own recording (the closest), and the report says
  exactly one divergence, on it, whatever the order; its unchanged siblings replay clean;
- twins (same system prompt, same first message) are told apart by the tools they offer; twins
  alike in every part bind in recorded order and the report notes it.

Recorded logs name each first call's system prompt and offered tools in a `request/header`, as
`mockllm record` writes it; the last test records twins through it and replays them over HTTP.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import openai

import mockllm
from mockllm.options import RunSettings
from mockllm.record.command import RecordOptions, start_recorder
from mockllm.replay.binding import text_share
from mockllm.replay.reporting import build_report
from mockllm.replay.run import Run
from mockllm.scenario.load import Scenario, load_scenario
from mockllm.wire import DEFAULT
from tests.logbuilder import Log, header, text_call, write_log
from tests.scripted_llm import ScriptedLLM

REPLAYS = 6


def _tree(folder: Path, children: dict[str, tuple[str | None, list[str] | None, str, str]]) -> Scenario:
    """A lead and its subagents; each child is (system prompt, offered tools, first message, answer),
    the prompt and tools named in a `request/header` as `mockllm record` writes one."""
    write_log(folder, "session.jsonl", header("lead"), Log().turn("lead the team", text_call("LEAD")).rows)
    for number, (name, (system, tools, task, answer)) in enumerate(children.items(), start=1):
        rows = Log().turn(task, text_call(answer)).rows
        named: dict[str, Any] = {}
        if system is not None:
            named["system"] = system
        if tools is not None:
            named["tools"] = tools
        if named:  # after the user message, before the call's step: where the recorder writes it
            at = next(k for k, row in enumerate(rows) if row["type"] == "step/start")
            rows.insert(at, {"type": "request/header", "data": {"header": named, "reason": "initial"}})
        write_log(folder, f"session.{number}.jsonl", header(name, created_at=10 + number, parent="lead"), rows)
    return load_scenario(folder)


def _ask(run: Run, text: str, system: str | None = None, tools: list[str] | None = None,
         role: str = "system", session: str | None = None) -> str:
    """One chat completions call whose new input is `text`, from live session `session` (None:
    header-less); the text it is answered. Twins need a session header: their first requests are
    equal, so by conversation the second would continue the first."""
    messages = ([{"role": role, "content": system}] if system is not None else []) + [
        {"role": "user", "content": text}]
    body: dict[str, Any] = {"model": "m", "stream": False, "messages": messages}
    if tools is not None:
        body["tools"] = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
                         for name in tools]
    raw = json.dumps(body).encode()
    outcome = run.answer(session, DEFAULT.decode_request(raw), DEFAULT, (), raw)
    return str(json.loads(outcome.body)["choices"][0]["message"]["content"])  # type: ignore[union-attr]


def _replays(scenario: Scenario, live: dict[str, dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Replay the lead, then the subagents `live` (name -> `_ask` keywords) in six random orders;
    per replay: what each subagent was answered, and the report's divergences and notices."""
    outcomes = []
    for number in range(REPLAYS):
        run = Run(f"r{number}", scenario, RunSettings())
        assert _ask(run, "lead the team") == "LEAD"
        order = random.Random(number).sample(list(live), len(live))
        # Fresh live ids (none is a recorded id): every subagent binds by content.
        answers = {name: _ask(run, **live[name], session=f"{name}-{number}") for name in order}
        report = build_report(run)
        outcomes.append((answers, [(d.session, d.call, d.what) for d in report.divergences],
                         sorted((n.kind, n.session) for n in report.notices), report.diverged_calls))
    return outcomes


def test_developer_prompts_tell_apart_subagents_asked_the_same_thing(tmp_path: Path) -> None:
    scenario = _tree(tmp_path / "team", {
        "historian": ("You are the historian. Answer in one sentence.", None, "Oslo", "HISTORY"),
        "chef": ("You are the chef. Answer in one sentence.", None, "Oslo", "FOOD"),
        "geographer": ("You are the geographer. Answer in one sentence.", None, "Oslo", "MAPS")})
    live = {name: {"text": "Oslo", "system": f"You are the {name}. Answer in one sentence.", "role": "developer"}
            for name in ("historian", "chef", "geographer")}
    outcomes = _replays(scenario, live)
    assert outcomes == [({"historian": "HISTORY", "chef": "FOOD", "geographer": "MAPS"}, [], [], 0)] * REPLAYS


def test_an_edited_subagent_among_three_diverges_alone_whatever_the_order(tmp_path: Path) -> None:
    # The same agent type three times (Claude Code's Task subagents): one system prompt, one set of tools.
    system, tools = "You are a research assistant. Report what you find.", ["Read", "Grep", "Bash"]
    tasks = {city: f"Find the weather station list for {city} and summarise which stations report hourly."
             for city in ("oslo", "rome", "lima")}
    scenario = _tree(tmp_path / "team", {city: (system, tools, task, city.upper()) for city, task in tasks.items()})
    live = {city: {"text": task, "system": system, "tools": tools} for city, task in tasks.items()}
    live["rome"]["text"] = tasks["rome"].replace("hourly", "every ten minutes")  # the user's edit
    outcomes = _replays(scenario, live)
    rome = "session.2.jsonl"
    assert outcomes[0] == ({"oslo": "OSLO", "rome": "ROME", "lima": "LIMA"}, [(rome, 0, "the last user message")],
                           [("bound_to_closest", rome)], 1)
    assert outcomes == [outcomes[0]] * REPLAYS


def test_an_edited_system_prompt_among_three_binds_to_its_own_recording(tmp_path: Path) -> None:
    # Three specialists asked the same thing, told apart by their prompts; one prompt was edited.
    roles = ("historian", "chef", "geographer")
    scenario = _tree(tmp_path / "team", {role: (f"You are the {role}. Cite one source for every claim you make.",
                                                None, "Oslo", role.upper()) for role in roles})
    live = {role: {"text": "Oslo", "system": f"You are the {role}. Cite one source for every claim you make."}
            for role in roles}
    live["geographer"]["system"] = "You are the geographer. Cite two sources for every claim you make, with dates."
    outcomes = _replays(scenario, live)
    assert outcomes[0] == ({"historian": "HISTORIAN", "chef": "CHEF", "geographer": "GEOGRAPHER"}, [],
                           [("bound_to_closest", "session.3.jsonl")], 0)
    assert outcomes == [outcomes[0]] * REPLAYS


def test_twins_are_told_apart_by_their_offered_tools(tmp_path: Path) -> None:
    system = "You are a helper. Use your tools."
    scenario = _tree(tmp_path / "team", {"reader": (system, ["read_file", "list_dir"], "Look into Oslo", "READ"),
                                         "searcher": (system, ["web_search"], "Look into Oslo", "SEARCHED")})
    live = {"reader": {"text": "Look into Oslo", "system": system, "tools": ["list_dir", "read_file"]},
            "searcher": {"text": "Look into Oslo", "system": system, "tools": ["web_search"]}}
    assert _replays(scenario, live) == [({"reader": "READ", "searcher": "SEARCHED"}, [], [], 0)] * REPLAYS


def test_twins_alike_in_every_part_bind_in_recorded_order_with_a_notice(tmp_path: Path) -> None:
    system = "You are a helper."
    scenario = _tree(tmp_path / "team", {"a": (system, ["grep"], "Look into Oslo", "FIRST"),
                                         "b": (system, ["grep"], "Look into Oslo", "SECOND")})
    run = Run("r", scenario)
    assert _ask(run, "lead the team") == "LEAD"
    assert [_ask(run, "Look into Oslo", system, ["grep"], session=live) for live in ("x", "y")] == ["FIRST", "SECOND"]
    [notice] = build_report(run).notices
    assert (notice.kind, notice.session, notice.call) == ("bound_by_arrival", "session.1.jsonl", 0)
    assert "twins: session.2.jsonl also start with this first request" in notice.message


def test_a_session_closer_to_no_recording_still_binds_deterministically(tmp_path: Path) -> None:
    # Nothing alike anywhere (under ALIKE): script order, and the report says how it was bound.
    scenario = _tree(tmp_path / "team", {"a": ("You are A.", None, "alpha", "A"),
                                         "b": ("You are B.", None, "beta", "B")})
    run = Run("r", scenario)
    assert _ask(run, "lead the team") == "LEAD"
    assert _ask(run, "zzz", "Qqq.") == "A"
    [notice] = build_report(run).notices
    assert notice.kind == "bound_in_order" and "no unbound recording is alike" in notice.message, notice.message


async def test_recorded_twins_differing_by_tools_replay_to_their_own_calls_in_any_order(tmp_path: Path) -> None:
    """Through `mockllm record` (which names the offered tools in the log) and back over HTTP."""
    out = tmp_path / "twins"
    system, ask = "You are the planner.", "Topics: Oslo"
    tools = {"searcher": "web_search", "reader": "read_file"}

    async def twin(base: str, who: str, live_id: str) -> list[str]:
        async with openai.AsyncOpenAI(base_url=base, api_key="sk-test", max_retries=0,
                                      default_headers={"x-mockllm-session": live_id}) as client:
            answer = await client.chat.completions.create(
                model="m", messages=[{"role": "system", "content": system}, {"role": "user", "content": ask}],
                tools=[{"type": "function", "function": {"name": tools[who], "parameters": {
                    "type": "object", "properties": {"topic": {"type": "string"}}}}}])
        return [call.function.name for call in answer.choices[0].message.tool_calls or ()]  # type: ignore[union-attr]

    llm = ScriptedLLM(0)
    async with llm.serving(), await start_recorder(RecordOptions(llm.base_url + "/v1", out, port=0)) as recorder:
        recorded = {who: await twin(recorder.base_url + "/v1", who, who) for who in tools}
    assert recorded == {"searcher": ["web_search"], "reader": ["read_file"]}
    assert sorted(sorted(s.tools or ()) for s in load_scenario(out).sessions) == [["read_file"], ["web_search"]]
    async with mockllm.AsyncServer(out) as server:
        for number in range(REPLAYS):
            async with await server.run(out.name) as run:
                order = random.Random(number).sample(list(tools), 2)
                assert {who: await twin(run.base_url, who, f"{who}-{number}") for who in order} == recorded
                await run.assert_consumed()
                report = await run.end()
                assert not report.notices, report.describe()


def test_a_recording_that_names_no_prompt_or_tools_binds_by_its_inputs_with_no_notice(tmp_path: Path) -> None:
    # Logs with no request/header (dsh's fixtures, older recordings): unknown parts never make a match inexact.
    scenario = _tree(tmp_path / "team", {"a": (None, None, "alpha", "A"), "b": (None, None, "beta", "B")})
    run = Run("r", scenario)
    assert _ask(run, "lead the team") == "LEAD"
    assert _ask(run, "beta", "You are whoever.", ["grep"], session="x") == "B"
    assert _ask(run, "alpha", "You are whoever.", ["grep"], session="y") == "A"
    assert build_report(run).notices == []


def test_an_edit_inside_a_word_still_finds_its_own_recording_whatever_the_order(tmp_path: Path) -> None:
    # No system prompts, no tools: only the first message tells these subagents apart.
    words = {"alpha": "ALPHA", "beta": "BETA", "gamma": "GAMMA"}
    scenario = _tree(tmp_path / "team", {name: (None, None, f"Reply with exactly the word {word} and nothing else.",
                                                word) for name, word in words.items()})
    live = {name: {"text": f"Reply with exactly the word {word} and nothing else."} for name, word in words.items()}
    live["beta"]["text"] = "Reply with exactly the word BETAS and nothing else."
    outcomes = _replays(scenario, live)
    assert outcomes[0] == ({"alpha": "ALPHA", "beta": "BETA", "gamma": "GAMMA"},
                           [("session.2.jsonl", 0, "the last user message")], [("bound_to_closest", "session.2.jsonl")],
                           1)
    assert outcomes == [outcomes[0]] * REPLAYS


def test_text_share_counts_three_character_pieces() -> None:
    assert text_share("same", "same") == 1.0
    assert text_share("abc", "xyz") == 0.0
    assert text_share("BETAS", "BETA") > text_share("BETAS", "ALPHA")
    assert text_share("Oslo", "Oslo, in one line") == 4 / 17  # "Osl" and "slo" on both sides, of 2 + 15


def test_the_inspector_says_how_each_session_was_bound(tmp_path: Path) -> None:
    from mockllm.inspector.view import bound_how
    from mockllm.replay.reporting import build_state

    system = "You are a helper."
    scenario = _tree(tmp_path / "team", {"a": (system, ["grep"], "Look into Oslo", "FIRST"),
                                         "b": (system, ["grep"], "Look into Oslo", "SECOND"),
                                         "c": (system, ["grep"], "Look into Rome", "THIRD")})
    run = Run("r", scenario)
    _ask(run, "lead the team")
    for live, text in (("x", "Look into Oslo"), ("y", "Look into Oslo"), ("z", "Look into Rome, briefly")):
        _ask(run, text, system, ["grep"], session=live)
    state = build_state(run)
    assert [bound_how(s, state) for s in state.sessions] == [
        "by content: its first request matched",
        "by content, among twins in recorded order: their first requests are alike",
        "by content: its first request matched",
        "by content, to the closest recording: no recorded first request matched its own in every part"]
