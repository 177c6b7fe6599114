"""Real agents' request shapes, recorded through `mockllm record` and replayed with the default settings,
run after run, varying what a real agent varies between runs:

- Claude Code (Anthropic Messages, `tests/fixtures/claude_code/`): a title call, two `Task`
  subagents started at once, their results sent back in the order they finished, each with the
  `agentId` and `<usage>` block Claude Code adds (a fresh id and a new `duration_ms` every run);
- Codex CLI (OpenAI Responses, `tests/fixtures/codex/`): two parallel `shell` calls whose
  `function_call_output` items come back in the order the commands finished, each with the
  command's `duration_seconds`; the whole input every call (`store: false`, as Codex sends it) or
  a `previous_response_id` chain;
- a LangGraph-supervisor-like team (chat completions): a supervisor hands off to two workers in
  parallel, and each worker's answer comes back with the framework's own hand-back tool call and
  result, under a fresh `uuid4` id every run.

Every replay must answer what was recorded and leave a clean run: no failure, no divergence,
every recorded call served.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import mockllm
from mockllm.record.command import RecordOptions, start_recorder
from mockllm.scenario.load import load_scenario
from tests.claude_code import ANSWERS, REQUESTS, SONNET, heard
from tests.claude_code import answer as claude_answer
from tests.claude_code import request as claude_request
from tests.fake_upstream import Answer, running_upstream
from tests.scripted_llm import responses_stream

REPLAYS = 6
CODEX = Path(__file__).parent / "fixtures" / "codex"
Post = Callable[[str, dict[str, Any]], Awaitable[bytes]]


def claude_answer_blocks(name: str) -> tuple[list[Any], str]:
    """A copy of Claude Code's recorded answer to request `name`: its blocks and stop reason."""
    blocks, stop = ANSWERS[name]
    return json.loads(json.dumps(blocks)), stop


async def _record(out: Path, answers: list[Answer], drive: Callable[[Post], Awaitable[Any]]) -> Any:
    """`drive(post)` through the recorder, against an upstream that answers `answers` in arrival order."""
    async with running_upstream() as upstream:
        upstream.answers += answers
        async with await start_recorder(RecordOptions(upstream.base_url, out, port=0)) as recorder, \
                aiohttp.ClientSession() as client:
            async def post(path: str, body: dict[str, Any]) -> bytes:
                async with client.post(recorder.base_url + "/v1" + path, json=body,
                                       headers={"authorization": "Bearer sk-live", "x-api-key": "sk-ant-live"}) as r:
                    assert r.status == 200, await r.text()
                    return await r.read()

            return await drive(post)


async def _replays(out: Path, recorded: Any, drive: Callable[[Post, random.Random], Awaitable[Any]]) -> list[Any]:
    """Serve `out` with the default settings; drive it REPLAYS times, each in a fresh run with its own
    random choices; each must hear what was recorded and leave a clean run. Returns the reports."""
    reports = []
    async with mockllm.AsyncServer(out) as server, aiohttp.ClientSession() as client:
        for number in range(REPLAYS):
            async with await server.run(out.name) as run:
                async def post(path: str, body: dict[str, Any], base: str = run.base_url) -> bytes:
                    async with client.post(base + path, json=body) as response:
                        assert response.status == 200, await response.text()
                        return await response.read()

                assert await drive(post, random.Random(number)) == recorded, f"replay {number + 1}"
                await run.assert_consumed()
                reports.append(await run.end())
    return reports


# --- Claude Code --------------------------------------------------------------------------------------


def _with_fresh_agent_ids(body: dict[str, Any], rng: random.Random, order: list[int]) -> dict[str, Any]:
    """Claude Code's next request after its subagents: their `tool_result` blocks in `order` (the
    order they finished), each ending with a fresh `agentId` and the subagent's measured usage."""
    body = json.loads(json.dumps(body))
    results = body["messages"][-1]["content"]
    for block in results:
        block["content"][-1]["text"] = (
            f"agentId: a{rng.getrandbits(24):06x} (for resuming to continue this agent's work if needed)\n"
            f"<usage>total_tokens: 18342\ntool_uses: 1\nduration_ms: {rng.randint(900, 30000)}</usage>")
    body["messages"][-1]["content"] = [results[k] for k in order]
    return body


def _claude_code(recording: bool) -> Callable[[Post, random.Random], Awaitable[dict[str, Any]]]:
    async def drive(post: Post, rng: random.Random) -> dict[str, Any]:
        heard_back = {name: heard(await post("/messages", claude_request(name))) for name in ("title", "main-1")}

        async def subagent(city: str) -> None:
            await asyncio.sleep(0 if recording else rng.uniform(0, 0.02))
            steps = ("agent-oslo-1", "agent-oslo-2") if city == "oslo" else ("agent-rome-1",)
            for name in steps:
                heard_back[name] = heard(await post("/messages", claude_request(name)))

        if recording:  # one at a time, as the upstream answers in arrival order
            await subagent("oslo")
            await subagent("rome")
        else:
            await asyncio.gather(*(subagent(city) for city in rng.sample(["oslo", "rome"], 2)))
        main = _with_fresh_agent_ids(claude_request("main-2"), rng, rng.sample([0, 1], 2))
        heard_back["main-2"] = heard(await post("/messages", main))
        return heard_back

    return drive


async def test_claude_code_subagents_replay_cleanly_with_fresh_agent_ids_in_any_order(tmp_path):
    out = tmp_path / "claude-code"
    order = ("title", "main-1", "agent-oslo-1", "agent-oslo-2", "agent-rome-1", "main-2")
    assert sorted(order) == sorted(REQUESTS)
    record = _claude_code(recording=True)
    recorded = await _record(out, [claude_answer(name) for name in order],
                             lambda post: record(post, random.Random(99)))
    assert [(s.kind, len(s.entries)) for s in load_scenario(out).sessions] == [
        ("primary", 2), ("spawn", 1), ("spawn", 2), ("spawn", 1)]
    await _replays(out, recorded, _claude_code(recording=False))


# --- Claude Code: a lead with three subagents, and the noise its harness adds ------------------------

LIMA = "Lima: 14\u00b0C and cloudy."
TASK_NOTICE = ("<task-notification>\n<task-id>bash_1</task-id>\n<status>completed</status>\n"
               "<summary>Background command \"npm test\" completed (exit code 0)</summary>\n"
               "<duration_ms>{ms}</duration_ms>\n</task-notification>")
REMINDER = ("\n\n<system-reminder>\nContext left until auto-compact: {pct}%. Keep your answers short.\n"
            "</system-reminder>")


def _as_lima(value: Any) -> Any:
    """A copy of Rome's piece (request, tool call, result) for Lima."""
    return json.loads(json.dumps(value).replace("Rome", "Lima"))


def _three() -> tuple[dict[str, dict[str, Any]], dict[str, tuple[list[Any], str]]]:
    """Claude Code's requests for a lead that starts three `Task` subagents (Oslo, Rome and Lima, the
    third made from Rome's), and each one's answer."""
    main_1 = claude_request("main-1")
    main_1["messages"][-1]["content"][-1]["text"] = main_1["messages"][-1]["content"][-1]["text"].replace(
        "Oslo and Rome", "Oslo, Rome and Lima")
    first, stop = claude_answer_blocks("main-1")
    rome_call = next(b for b in first if b.get("type") == "tool_use" and "Rome" in b["input"]["prompt"])
    lima_call = _as_lima(rome_call)  # its id too: toolu_02Lima9xZw
    first = [*first, lima_call]
    main_2 = claude_request("main-2")
    main_2["messages"][0] = main_1["messages"][-1]
    main_2["messages"][1]["content"] = first
    results = main_2["messages"][2]["content"]
    lima_result = _as_lima(results[0])
    lima_result["content"][0]["text"] = LIMA
    main_2["messages"][2]["content"] = [*results, lima_result]
    agent_lima = _as_lima(claude_request("agent-rome-1"))
    requests = {"title": claude_request("title"), "main-1": main_1, "agent-oslo-1": claude_request("agent-oslo-1"),
                "agent-oslo-2": claude_request("agent-oslo-2"), "agent-rome-1": claude_request("agent-rome-1"),
                "agent-lima-1": agent_lima, "main-2": main_2}
    answers = {name: claude_answer_blocks(name) for name in requests if name not in ("main-1", "agent-lima-1")}
    answers |= {"main-1": (first, stop), "agent-lima-1": ([{"type": "text", "text": LIMA}], "end_turn")}
    return requests, answers


def _lead_next(body: dict[str, Any], rng: random.Random, recording: bool) -> dict[str, Any]:
    """The lead's request after its subagents, as Claude Code sends it this run: results in the
    order the agents finished, each with a fresh `agentId` and measured usage; a background task's
    notice with its measured `<duration_ms>`; and, in a replay, a `<system-reminder>` (a context-budget
    note) appended to some of the results, which the recording lacks."""
    body = _with_fresh_agent_ids(body, rng, rng.sample(range(3), 3))
    if not recording:
        for block in body["messages"][-1]["content"]:
            if rng.random() < 0.5:
                block["content"].append({"type": "text", "text": REMINDER.format(pct=rng.randint(5, 40))})
    body["messages"][-1]["content"].append({"type": "text", "text": TASK_NOTICE.format(ms=rng.randint(100, 900))})
    return body


def _claude_code_three(recording: bool) -> Callable[[Post, random.Random], Awaitable[dict[str, Any]]]:
    requests, _ = _three()

    async def drive(post: Post, rng: random.Random) -> dict[str, Any]:
        heard_back = {name: heard(await post("/messages", requests[name])) for name in ("title", "main-1")}

        async def subagent(city: str) -> None:
            await asyncio.sleep(0 if recording else rng.uniform(0, 0.02))
            for name in ("agent-oslo-1", "agent-oslo-2") if city == "oslo" else (f"agent-{city}-1",):
                heard_back[name] = heard(await post("/messages", requests[name]))

        if recording:
            for city in ("oslo", "rome", "lima"):
                await subagent(city)
        else:
            await asyncio.gather(*(subagent(city) for city in rng.sample(["oslo", "rome", "lima"], 3)))
        heard_back["main-2"] = heard(await post("/messages", _lead_next(requests["main-2"], rng, recording)))
        return heard_back

    return drive


async def test_claude_code_lead_with_three_subagents_replays_clean_through_its_harness_noise(tmp_path):
    out = tmp_path / "claude-code-three"
    _, answers = _three()
    order = ("title", "main-1", "agent-oslo-1", "agent-oslo-2", "agent-rome-1", "agent-lima-1", "main-2")
    record = _claude_code_three(recording=True)
    recorded = await _record(out, [claude_answer(name, answers[name], SONNET if name != "title" else None)
                                   for name in order], lambda post: record(post, random.Random(99)))
    assert [(s.kind, len(s.entries)) for s in load_scenario(out).sessions] == [
        ("primary", 2), ("spawn", 1), ("spawn", 2), ("spawn", 1), ("spawn", 1)]
    reports = await _replays(out, recorded, _claude_code_three(recording=False))
    noted = [n for report in reports for n in report.notices]
    assert {n.kind for n in noted} == {"reminder_ignored"}, noted
    assert all(n.session == "session.jsonl" and n.call == 1 for n in noted)


# --- Codex CLI ----------------------------------------------------------------------------------------


def _codex_request(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((CODEX / f"{name}.json").read_text(encoding="utf-8"))
    return body


CODEX_FIRST = [item for item in _codex_request("turn-2")["input"] if item.get("type") in ("reasoning", "function_call")]
CODEX_SUMMARY = ("Oslo's module asks for imperial units and Rome's for metric: the forecasts disagree on units, "
                 "not on the weather.")


def _codex_answers() -> list[Answer]:
    def response(number: int, output: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": f"resp_codex_{number}", "object": "response", "created_at": 1760000000 + number,
                "status": "completed", "model": "gpt-5-codex", "output": output,
                "usage": {"input_tokens": 2100, "output_tokens": 120, "total_tokens": 2220,
                          "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": 64}}}

    summary = {"type": "message", "id": "msg_codex_2", "status": "completed", "role": "assistant",
               "content": [{"type": "output_text", "text": CODEX_SUMMARY, "annotations": []}]}
    return [Answer(responses_stream(response(1, CODEX_FIRST))), Answer(responses_stream(response(2, [summary])))]


def _codex_heard(stream: bytes) -> tuple[str | None, list[tuple[str, str, str]]]:
    """What Codex reads of a streamed answer: the response id, and per output item its type and its
    call id and arguments, or its text."""
    completed = next(json.loads(event.split(b"data: ", 1)[1]) for event in stream.split(b"\n\n")
                     if b"response.completed" in event)["response"]
    items = []
    for item in completed["output"]:
        if item["type"] == "function_call":
            items.append(("function_call", item["call_id"], json.dumps(json.loads(item["arguments"]), sort_keys=True)))
        elif item["type"] == "message":
            items.append(("message", "", "".join(part["text"] for part in item["content"])))
    return completed["id"], items


def _codex(chained: bool) -> Callable[[Post, random.Random], Awaitable[list[Any]]]:
    async def drive(post: Post, rng: random.Random) -> list[Any]:
        first_id, first = _codex_heard(await post("/responses", _codex_request("turn-1")))
        second = _codex_request("turn-2")
        outputs = [item for item in second["input"] if item["type"] == "function_call_output"]
        for item in outputs:  # each command took its own time this run
            result = json.loads(item["output"])
            result["metadata"]["duration_seconds"] = round(rng.uniform(0, 2), 1)
            item["output"] = json.dumps(result)
        outputs = rng.sample(outputs, len(outputs))  # in the order the commands finished
        if chained:
            second = {**second, "input": outputs, "previous_response_id": first_id}
        else:
            second["input"] = [item for item in second["input"] if item["type"] != "function_call_output"] + outputs
        _, summary = _codex_heard(await post("/responses", second))
        return [first, summary]

    return drive


@pytest.mark.parametrize("chained", [False, True], ids=["whole-input", "previous-response-id"])
async def test_codex_parallel_results_replay_cleanly_in_any_order_with_other_durations(tmp_path, chained):
    out = tmp_path / "codex"
    recorded = await _record(out, _codex_answers(), lambda post: _codex(chained)(post, random.Random(99)))
    assert recorded == [[("function_call", "call_Oslo3fQ8cV1kZ2", json.dumps(json.loads(CODEX_FIRST[1]["arguments"]),
                                                                            sort_keys=True)),
                         ("function_call", "call_Rome7aP2xW9dN4", json.dumps(json.loads(CODEX_FIRST[2]["arguments"]),
                                                                            sort_keys=True))],
                        [("message", "", CODEX_SUMMARY)]]
    assert [(s.kind, len(s.entries)) for s in load_scenario(out).sessions] == [("primary", 2)]
    await _replays(out, recorded, _codex(chained))


# --- a LangGraph-supervisor-like team -------------------------------------------------------------------

SUPERVISOR = "You are a team supervisor managing an oslo_agent and a rome_agent. Hand each city to its agent."
QUESTION = "Compare today's weather in Oslo and Rome."
HANDOFFS = {"oslo": "call_hOslo4Tq9Zk", "rome": "call_hRome8Lm2Yx"}
FORECASTS = {"oslo": "Oslo: -3\u00b0C and light snow.", "rome": "Rome: 18\u00b0C and sunny."}
SUMMARY = "Oslo is at -3\u00b0C with light snow; Rome is at 18\u00b0C and sunny."


def _transfer(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": f"Ask {name.removeprefix('transfer_to_')} "
                                              "for help.", "parameters": {"type": "object", "properties": {}}}}


def _supervisor_messages(finished: list[str]) -> list[dict[str, Any]]:
    """The supervisor's history after the workers in `finished` handed back, in that order: each
    worker's answer, then the framework's own hand-back call and its result, under a fresh uuid4."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SUPERVISOR}, {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": HANDOFFS[city], "type": "function", "function": {"name": f"transfer_to_{city}_agent",
                                                                      "arguments": "{}"}} for city in HANDOFFS]}]
    messages += [{"role": "tool", "tool_call_id": call_id, "content": f"Successfully transferred to {city}_agent"}
                 for city, call_id in HANDOFFS.items()]
    for city in finished:
        back = str(uuid.uuid4())
        messages += [
            {"role": "assistant", "name": f"{city}_agent", "content": FORECASTS[city]},
            {"role": "assistant", "name": f"{city}_agent", "content": "Transferring back to supervisor",
             "tool_calls": [{"id": back, "type": "function",
                             "function": {"name": "transfer_back_to_supervisor", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": back, "content": "Successfully transferred back to supervisor"}]
    return messages


def _worker_messages(city: str) -> list[dict[str, Any]]:
    """A worker's request: its own prompt, then the shared history up to its own handoff."""
    history = _supervisor_messages([])
    return [{"role": "system", "content": f"You are the {city}_agent: report today's weather in {city.title()}."},
            history[1], history[2], next(m for m in history if m.get("tool_call_id") == HANDOFFS[city])]


def _chat_heard(raw: bytes) -> tuple[str, list[tuple[str, str]]]:
    reply = json.loads(raw)["choices"][0]["message"]
    return reply["content"] or "", [(c["id"], c["function"]["name"]) for c in reply.get("tool_calls") or ()]


def _supervisor(recording: bool) -> Callable[[Post, random.Random], Awaitable[dict[str, Any]]]:
    tools = [_transfer(f"transfer_to_{city}_agent") for city in HANDOFFS]

    async def drive(post: Post, rng: random.Random) -> dict[str, Any]:
        heard_back = {"supervisor-1": _chat_heard(await post("/chat/completions", {
            "model": "gpt-4.1", "messages": _supervisor_messages([])[:2], "tools": tools}))}
        finished: list[str] = []

        async def worker(city: str) -> None:
            await asyncio.sleep(0 if recording else rng.uniform(0, 0.02))
            heard_back[city] = _chat_heard(await post("/chat/completions",
                                                      {"model": "gpt-4.1", "messages": _worker_messages(city)}))
            finished.append(city)

        if recording:
            for city in ("rome", "oslo"):
                await worker(city)
        else:
            await asyncio.gather(*(worker(city) for city in rng.sample(list(HANDOFFS), 2)))
        heard_back["supervisor-2"] = _chat_heard(await post("/chat/completions", {
            "model": "gpt-4.1", "messages": _supervisor_messages(finished), "tools": tools}))
        return heard_back

    return drive


async def test_supervisor_hand_backs_with_fresh_ids_replay_cleanly(tmp_path):
    out = tmp_path / "supervisor"
    handoffs = tuple((call_id, f"transfer_to_{city}_agent") for city, call_id in HANDOFFS.items())
    answers = [_whole(calls=handoffs), _whole(FORECASTS["rome"]), _whole(FORECASTS["oslo"]), _whole(SUMMARY)]
    recorded = await _record(out, answers, lambda post: _supervisor(recording=True)(post, random.Random(99)))
    assert recorded == {"supervisor-1": ("", list(handoffs)), "rome": (FORECASTS["rome"], []),
                        "oslo": (FORECASTS["oslo"], []), "supervisor-2": (SUMMARY, [])}
    reports = await _replays(out, recorded, _supervisor(recording=False))
    # Worth knowing, and fails nothing: the hand-back results were matched by name and position.
    assert all({n.kind for n in report.notices} == {"framework_ids"} for report in reports)


def _whole(text: str = "", calls: tuple[tuple[str, str], ...] = ()) -> Answer:
    """A whole (`stream: false`) chat completion, as the upstream answers a request that asks for one."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [{"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}
                                 for call_id, name in calls]
    body = {"id": "chatcmpl-up", "object": "chat.completion", "created": 1, "model": "gpt-4.1",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop",
                         "logprobs": None}], "usage": {"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48}}
    return Answer([json.dumps(body).encode()], content_type="application/json")
