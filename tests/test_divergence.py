"""Divergence reports, strict mode, content binding and tool checks, through the openai SDK.

Live requests are rebuilt from each recorded call's inputs, as the agent sent them: a request for
call N carries the history up to the assistant's last answer, then the call's new inputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from mockllm.replay.divergence import SHOWN, short_diff
from mockllm.scenario.load import SessionScript, load_scenario
from tests.conftest import http, new_run, run_state
from tests.logbuilder import CORPUS, Log, corpus_or_skip, corpus_params, header, text_call, write_log

MIXED = CORPUS / "v0-unpacked" / "acp-agent--subagent-mixed"
MULTI = CORPUS / "v0-unpacked" / "acp-agent--subagent-multi"


def messages_for(session: SessionScript, call: int, *, history: list[dict[str, Any]] | None = None,
                 change: str | None = None) -> list[dict[str, Any]]:
    """The request an agent sends for `call`: system, history (an earlier answer for later calls),
    then the call's recorded inputs; `change` replaces the text of the last user message."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are dsh."}, *(history or [])]
    if call > 0 and not history:
        messages.append({"role": "assistant", "content": "(the answer before)"})
    inputs = list(session.inputs[call].items) if session.inputs[call] else []
    last_user = max((n for n, i in enumerate(inputs) if i.role == "user"), default=None)
    for number, item in enumerate(inputs):
        text = change if change is not None and number == last_user else item.text
        if item.role == "user":
            messages.append({"role": "user", "content": text})
        else:
            messages.append({"role": "tool", "tool_call_id": item.tool_call_id, "content": text})
    return messages


def client(base_url: str, live_id: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0,
                              default_headers={"x-mockllm-session": live_id})


async def ask(base_url: str, live_id: str, messages: list[dict[str, Any]], **extra: Any) -> Any:
    async with client(base_url, live_id) as c:
        return await c.chat.completions.create(model="m", messages=messages, **extra)


def _text(completion: Any) -> str:
    message = completion.choices[0].message
    return message.content or ",".join(t.function.name for t in message.tool_calls or ())


# -- every real tree, rebuilt as its agent sent it, agrees with its recording -----------------------

@pytest.mark.parametrize("folder", corpus_params("*/*/"))
async def test_requests_rebuilt_from_the_recording_do_not_diverge(serve, folder: Path):
    scenario = load_scenario(folder)
    server = await serve(folder, strict=True)
    run, base = await new_run(server.base_url, scenario.name)
    for session in scenario.sessions:
        for call, entry in enumerate(session.entries):
            if type(entry).__name__ != "ChunksEntry":
                continue
            await ask(base, session.id, messages_for(session, call))
    state = await run_state(server.base_url, run)
    assert state["divergences"] == [] and state["failures"] == []


# -- a diverged request in each session kind ---------------------------------------------------------

KINDS = [
    pytest.param("session.jsonl", 1, id="primary"),
    pytest.param("session.1.jsonl", 0, id="spawn"),
    pytest.param("session.2.jsonl", 0, id="fork-after-its-cut"),
]


def _session(scenario: Any, file: str) -> SessionScript:
    return next(s for s in scenario.sessions if s.file == file)


def _fork_history(scenario: Any) -> list[dict[str, Any]]:
    """What a fork child sends before its own task: the parent's seeded turn (prompt and answer)."""
    primary = scenario.sessions[0]
    return [{"role": "user", "content": primary.inputs[0].items[0].text}, {"role": "assistant", "content": "OK"}]


async def _drive_to(base: str, scenario: Any, file: str, call: int) -> SessionScript:
    """Serve the session's calls before `call`, unchanged; returns the session."""
    session = _session(scenario, file)
    for earlier in range(call):
        await ask(base, session.id, messages_for(session, earlier))
    return session


@pytest.mark.parametrize(("file", "call"), KINDS)
async def test_a_changed_last_user_message_is_named_in_the_report(serve, file, call):
    corpus_or_skip()
    scenario = load_scenario(MIXED)
    server = await serve(MIXED)
    run, base = await new_run(server.base_url, scenario.name)
    session = await _drive_to(base, scenario, file, call)
    history = _fork_history(scenario) if session.kind == "fork" else None
    served = await ask(base, session.id, messages_for(session, call, history=history, change="Something else."))
    assert _text(served)  # not strict: the recorded answer is still served
    state = await run_state(server.base_url, run)
    [divergence] = state["divergences"]
    recorded = session.inputs[call].items[-1].text
    shown = " ".join(recorded.split())  # cut to a readable length
    assert divergence == {
        "kind": "input", "session": file, "live_id": session.id, "call": call, "what": "the last user message",
        "expected": shown if len(shown) <= SHOWN else shown[: SHOWN - 1] + "…", "got": "Something else.",
        "diff": short_diff(recorded, "Something else."),
    }
    assert [j["diverged"] for j in state["journal"]][-1] == "the last user message"
    assert state["diverged_calls"] == 1


@pytest.mark.parametrize(("file", "call"), KINDS)
async def test_under_strict_a_diverged_call_is_409_and_the_cursor_stays(serve, file, call):
    corpus_or_skip()
    scenario = load_scenario(MIXED)
    server = await serve(MIXED)
    run, base = await new_run(server.base_url, scenario.name, strict=True)
    session = await _drive_to(base, scenario, file, call)
    history = _fork_history(scenario) if session.kind == "fork" else None
    with pytest.raises(openai.ConflictError) as caught:
        await ask(base, session.id, messages_for(session, call, history=history, change="Something else."))
    assert caught.value.body["code"] == "request_diverged"
    assert caught.value.response.headers["x-should-retry"] == "false"
    message = caught.value.message
    assert f"session {file} (live id {session.id}) call {call} (0-based) diverged from the recording at the last " \
           "user message" in message
    assert "got 'Something else.'" in message
    # The refused call took nothing: the right request now gets that same call.
    expected = session.entries[call]
    served = await ask(base, session.id, messages_for(session, call, history=history))
    assert _text(served) == _text_of_entry(expected)
    state = await run_state(server.base_url, run)
    assert [(f["code"], f["call"]) for f in state["failures"]] == [("request_diverged", call)]


def _text_of_entry(entry: Any) -> str:
    texts = [c.text for c in entry.chunks if type(c).__name__ == "TextDelta"]
    tools = [c.name for c in entry.chunks if type(c).__name__ == "ToolCallDelta" and c.name]
    return "".join(texts) or ",".join(dict.fromkeys(tools))


async def test_the_report_text_says_where_what_and_how(serve):
    corpus_or_skip()
    scenario = load_scenario(MIXED)
    server = await serve(MIXED)
    run, base = await new_run(server.base_url, scenario.name)
    spawn = _session(scenario, "session.1.jsonl")
    await ask(base, spawn.id, messages_for(spawn, 0, change="Reply with exactly the word GAMMA and nothing else."))
    status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
    assert status == 200 and isinstance(report, dict)
    [divergence] = report["divergences"]
    assert divergence["diff"] == "…y with exactly the word [-ALPHA][+GAMMA]…"


async def test_a_recorded_tool_the_request_does_not_offer_is_a_divergence(serve):
    corpus_or_skip()
    scenario = load_scenario(MIXED)
    server = await serve(MIXED)
    primary = scenario.sessions[0]
    offered = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
               for n in ("read_file", "subagent_fork")]  # call 1 recorded a call to `subagent`
    run, base = await new_run(server.base_url, scenario.name)
    await ask(base, primary.id, messages_for(primary, 0))
    await ask(base, primary.id, messages_for(primary, 1), tools=offered)
    [divergence] = (await run_state(server.base_url, run))["divergences"]
    assert (divergence["kind"], divergence["what"], divergence["got"]) == (
        "tool", "the tool 'subagent' the recorded call uses", "offered: read_file, subagent_fork")
    _, strict_base = await new_run(server.base_url, scenario.name, strict=True)
    await ask(strict_base, primary.id, messages_for(primary, 0))
    with pytest.raises(openai.ConflictError) as caught:
        await ask(strict_base, primary.id, messages_for(primary, 1), tools=offered)
    assert "the tool 'subagent' the recorded call uses" in caught.value.message
    # Offering it is fine.
    await ask(strict_base, primary.id, messages_for(primary, 1), tools=[*offered, {
        "type": "function", "function": {"name": "subagent", "parameters": {"type": "object"}}}])


async def test_ignore_input_masks_volatile_spans_and_cwd_matches_the_runs(serve, tmp_path):
    folder = tmp_path / "stamped"
    log = Log().turn("Started at 2026-11-30T10:00:00Z in {{cwd}}/work. Go.", text_call("done"))
    write_log(folder, "session.jsonl", header("p"), log.rows)
    server = await serve(folder)
    live = [{"role": "user", "content": "Started at 2026-12-01T08:15:42Z in /tmp/w/work. Go."}]
    normalized, normalized_base = await new_run(server.base_url, "stamped", cwd="/tmp/w", strict=True)
    await ask(normalized_base, "p", live)  # the built-in normalisations mask the timestamp
    assert (await run_state(server.base_url, normalized))["divergences"] == []
    run, base = await new_run(server.base_url, "stamped", cwd="/tmp/w", normalize=False)
    await ask(base, "p", live)
    [divergence] = (await run_state(server.base_url, run))["divergences"]
    # {{cwd}} became the run's cwd, so only the timestamp differs.
    assert divergence["expected"] == "Started at 2026-11-30T10:00:00Z in /tmp/w/work. Go."
    assert divergence["diff"] == "…Started at 2026-[-11-30T10:00:00Z][+12-01T08:15:42Z]…"
    masked_run, masked_base = await new_run(server.base_url, "stamped", cwd="/tmp/w", strict=True,
                                            ignore_input=[r"\d{4}-\d\d-\d\dT[\d:]+Z"])
    await ask(masked_base, "p", live)
    assert (await run_state(server.base_url, masked_run))["divergences"] == []


async def test_a_request_that_sends_the_recorded_cwd_placeholder_itself_diverges_under_a_cwd(serve, tmp_path):
    """Sent verbatim, inputs agree without a comparison, except where the run's cwd replaces
    `{{cwd}}` in the recorded text: the recorded text is then another than the one sent."""
    folder = tmp_path / "placeholder"
    write_log(folder, "session.jsonl", header("p"), Log().turn("Work in {{cwd}}/src.", text_call("done")).rows)
    server = await serve(folder)
    verbatim = [{"role": "user", "content": "Work in {{cwd}}/src."}]
    run, base = await new_run(server.base_url, "placeholder", strict=True)
    await ask(base, "p", verbatim)  # no cwd: the recorded text is what was sent
    assert (await run_state(server.base_url, run))["divergences"] == []
    run, base = await new_run(server.base_url, "placeholder", cwd="/home/dev/repo")
    await ask(base, "p", verbatim)
    [divergence] = (await run_state(server.base_url, run))["divergences"]
    assert (divergence["expected"], divergence["got"]) == ("Work in /home/dev/repo/src.", "Work in {{cwd}}/src.")


# -- binding by content -------------------------------------------------------------------------------

async def _children_in_reverse(server: Any, **run_fields: Any) -> tuple[str, dict[str, str]]:
    scenario = load_scenario(MULTI)
    run, base = await new_run(server.base_url, scenario.name, **run_fields)
    primary = scenario.sessions[0]
    await ask(base, primary.id, messages_for(primary, 0))  # the coordinator binds by its recorded id
    answers = {}
    # Fresh live ids, the second child first: first-call order would give it the first child's script.
    for session in reversed(scenario.sessions[1:]):
        task = session.inputs[0].items[0].text
        answers[task] = _text(await ask(base, f"fresh-{session.file}", [{"role": "user", "content": task}]))
    return run, answers


async def test_bind_content_gives_children_started_in_reverse_their_own_scripts(serve):
    corpus_or_skip()
    server = await serve(MULTI, bind="content")
    run, answers = await _children_in_reverse(server)
    assert answers == {"Reply with exactly the word BETA and nothing else.": "BETA",
                       "Reply with exactly the word ALPHA and nothing else.": "ALPHA"}
    assert (await run_state(server.base_url, run))["divergences"] == []


async def test_without_bind_content_children_started_in_reverse_swap_scripts(serve):
    corpus_or_skip()
    server = await serve(MULTI, bind="order")
    run, answers = await _children_in_reverse(server)
    assert answers == {"Reply with exactly the word BETA and nothing else.": "ALPHA",
                       "Reply with exactly the word ALPHA and nothing else.": "BETA"}
    # And the report says so: each child's request differs from the script it was bound to.
    assert [d["what"] for d in (await run_state(server.base_url, run))["divergences"]] == [
        "the last user message", "the last user message"]


async def test_bind_content_with_nothing_alike_binds_in_order_and_reports_it(serve):
    corpus_or_skip()
    server = await serve(MULTI)
    run, base = await new_run(server.base_url, "acp-agent--subagent-multi", bind="content")
    await ask(base, "stranger", [{"role": "user", "content": "Something never recorded."}])
    state = await run_state(server.base_url, run)
    [divergence] = state["divergences"]
    [notice] = state["notices"]
    # No recording is alike: bound to the first unbound one in script order; the divergence is reported on it.
    assert divergence["kind"] == "input" and divergence["session"] == notice["session"]
    assert notice["kind"] == "bound_in_order" and "no unbound recording is alike" in notice["message"]
    _, strict_base = await new_run(server.base_url, "acp-agent--subagent-multi", bind="content", strict=True)
    with pytest.raises(openai.ConflictError):
        await ask(strict_base, "stranger", [{"role": "user", "content": "Something never recorded."}])


async def test_twin_children_bind_in_script_order_under_bind_content(serve, tmp_path):
    folder = tmp_path / "twins"
    write_log(folder, "session.jsonl", header("p"), Log().turn("coordinate", text_call("P")).rows)
    for number, answer in ((1, "FIRST TWIN"), (2, "SECOND TWIN")):
        write_log(folder, f"session.{number}.jsonl", header(f"c{number}", created_at=10 + number, parent="p"),
                  Log().turn("same task", text_call(answer)).rows)
    server = await serve(folder, bind="content")
    _, base = await new_run(server.base_url, "twins")
    got = [_text(await ask(base, live, [{"role": "user", "content": "same task"}])) for live in ("x", "y")]
    assert got == ["FIRST TWIN", "SECOND TWIN"]
