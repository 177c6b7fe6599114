"""The recorder's pure parts: SSE splitting across pieces, redaction across fragments, call -> events."""

from __future__ import annotations

import re

import msgspec
import pytest

from mockllm.dsh.chunks import Block, BlockEnd, BlockStart, FinishChunk, FinishReason, TextDelta, ToolCallDelta
from mockllm.dsh.writer import encode_rows
from mockllm.errors import AlreadyRecorded, BadRedaction, MockllmError, RecordError
from mockllm.record.call import ObservedCall, TimedChunk, observe
from mockllm.record.command import RecordOptions, record_forever
from mockllm.record.events import SessionEvents
from mockllm.record.redact import MASK, Redactor, redact_chunks
from mockllm.record.tree import SessionTree
from mockllm.script.inputs import recorded_inputs
from mockllm.wire.request import Message, ToolCall
from mockllm.wire.sse_reader import SSEReader

STREAM = b'data: {"a":1}\r\n\r\nevent: x\ndata: {"b":2}\ndata: {"c":3}\n\n: keep-alive\n\ndata: [DONE]\n\n'
EVENTS = [(None, b'{"a":1}'), ("x", b'{"b":2}\n{"c":3}'), (None, b"[DONE]")]


@pytest.mark.parametrize("size", [1, 2, 3, 7, len(STREAM)], ids=lambda n: f"pieces-of-{n}")
def test_sse_reader_gives_the_same_events_however_the_bytes_are_split(size):
    reader = SSEReader()
    events = []
    for start in range(0, len(STREAM), size):
        events += reader.feed(STREAM[start:start + size])
    assert events + reader.close() == EVENTS


def test_sse_reader_keeps_a_last_event_that_lacks_its_blank_line():
    reader = SSEReader()
    assert reader.feed(b'data: {"a":1}\n\ndata: {"z"') == [(None, b'{"a":1}')]
    assert reader.feed(b":0}") == []
    assert reader.close() == [(None, b'{"z":0}')]


@pytest.mark.parametrize(("parts", "expected"), [
    (["key sk-ab", "c1 ok"], ["key " + MASK, " ok"]),
    (["sk-", "abc", "!"], [MASK, "", "!"]),
    (["a sk-x b sk-y"], [f"a {MASK} b {MASK}"]),
    (["nothing here"], ["nothing here"]),
], ids=["straddles-two", "spans-three", "two-in-one", "no-match"])
def test_redaction_masks_a_secret_however_it_is_split(parts, expected):
    redactor = Redactor([r"sk-[a-z0-9]+"])
    masked = redactor.fragments(parts)
    assert masked == expected
    assert "".join(masked) == redactor.text("".join(parts))


def test_redacted_chunks_keep_deltas_and_block_end_in_agreement():
    chunks = [BlockStart(0, "tool-call"), ToolCallDelta(0, '{"k":"sk-a', "c1", "f"), ToolCallDelta(0, 'b"}', "c1", "f"),
              BlockEnd(0, Block("tool-call", id="c1", name="f", arguments='{"k":"sk-ab"}')),
              FinishChunk(FinishReason("tool-calls"))]
    out = redact_chunks(Redactor([r"sk-[a-z0-9]+"]), chunks)
    deltas = "".join(c.argumentsDelta for c in out if isinstance(c, ToolCallDelta))
    assert deltas == out[3].block.arguments == '{"k":"[REDACTED]"}'


def _call(messages, chunks, started=10, system=None):
    call = observe(messages, started, system=system)
    call.chunks = [TimedChunk(started + 1 + n, c) for n, c in enumerate(chunks)]
    return call


TOOL_ANSWER = [BlockStart(0, "tool-call"), ToolCallDelta(0, "{}", "c1", "bash"),
               BlockEnd(0, Block("tool-call", id="c1", name="bash", arguments="{}")),
               FinishChunk(FinishReason("tool-calls"))]
TEXT_ANSWER = [BlockStart(0, "text"), TextDelta(0, "done"), BlockEnd(0, Block("text", text="done")),
               FinishChunk(FinishReason("stop"))]


def test_a_tool_step_then_a_text_step_are_one_turn_laid_out_as_dsh_writes_it():
    events = SessionEvents()
    first = events.call(_call([Message("system", "sys"), Message("user", "run it")], TOOL_ANSWER), Redactor())
    assert (events.turn_open, events.step_open, events.completed) == (True, True, 0)
    second = events.call(_call([Message("user", "run it"), Message("assistant", "", (ToolCall("c1", "bash", "{}"),)),
                                Message("tool", "ok", tool_call_id="c1")], TEXT_ANSWER, 50), Redactor())
    rows = [*first, *second]
    kinds = [r["type"] if isinstance(r, dict) else r.type for r in rows]
    assert kinds == ["turn/start", "user/message", "step/start", *["assistant/chunk"] * 4, "assistant/message",
                     "tool/call", "tool/result", "step/end", "step/start", *["assistant/chunk"] * 4,
                     "assistant/message", "step/end", "turn/end"]
    assert [r["seq"] if isinstance(r, dict) else r.seq for r in rows] == list(range(len(rows)))
    assert events.completed == len(rows) and events.completed_turn == 1, "a fork now inherits the whole turn"
    # What replay reads back as each call's recorded inputs: the user's message, then the tool result.
    raw = {r["type"]: msgspec.Raw(msgspec.json.encode(r["data"])) for r in rows if isinstance(r, dict)}
    assert recorded_inputs("user/message", raw["user/message"])[0].text == "run it"
    result = recorded_inputs("tool/result", raw["tool/result"])[0]
    assert (result.text, result.tool_call_id) == ("ok", "c1")
    assert encode_rows(rows, pack=True)  # packable as written


def test_a_request_ending_in_a_user_message_starts_the_next_turn_and_numbers_continue_after_a_seed():
    events = SessionEvents(first_seq=44, turn=1)  # a fork child after its parent's first turn
    rows = events.call(_call([Message("user", "a"), Message("assistant", "b"), Message("user", "task")], TEXT_ANSWER),
                       Redactor())
    assert rows[0] == {"type": "turn/start", "seq": 44, "time": 10,
                       "data": {"turn": 2, "trigger": {"kind": "message", "source": {"kind": "user"}}}}
    assert [r["data"]["content"][0]["text"] for r in rows if isinstance(r, dict) and r["type"] == "user/message"] == [
        "task"], "only what came after the last assistant message is a new input"


def test_a_sessions_first_call_logs_its_system_prompt_in_a_request_header_as_dsh_does():
    """The system prompt tells apart subagents asked the same thing (replay binds twins by it):
    written once, before the first call's step, redacted and with `{{cwd}}` like every string."""
    events = SessionEvents()
    prompt = "You are the chef. Work in /home/dev/app/kitchen with key sk-abc."
    messages = [Message("system", prompt), Message("user", "Oslo")]
    redactor = Redactor([r"sk-[a-z]+"], cwd="/home/dev/app")
    first = events.call(_call(messages, TOOL_ANSWER, system=prompt), redactor)
    assert [r["type"] for r in first[:4] if isinstance(r, dict)] == [
        "turn/start", "user/message", "request/header", "step/start"]
    (logged,) = [r["data"] for r in first if isinstance(r, dict) and r["type"] == "request/header"]
    assert logged == {"header": {"system": "You are the chef. Work in {{cwd}}/kitchen with key [REDACTED]."},
                      "reason": "initial"}
    later = events.call(_call([*messages, Message("assistant", "", (ToolCall("c1", "bash", "{}"),)),
                               Message("tool", "ok", tool_call_id="c1")], TEXT_ANSWER, 50, system=prompt), redactor)
    assert not [r for r in later if isinstance(r, dict) and r["type"] == "request/header"], "once per session"
    assert not [r for r in SessionEvents().call(_call([Message("user", "x")], TEXT_ANSWER), redactor)
                if isinstance(r, dict) and r["type"] == "request/header"], "no system prompt, no header"


def test_closing_ends_an_open_step_and_turn():
    events = SessionEvents()
    events.call(_call([Message("user", "go")], TOOL_ANSWER), Redactor())
    closing = events.closing(99)
    assert [r["type"] for r in closing] == ["step/end", "turn/end"]
    assert events.closing(100) == []


def test_an_error_finish_ends_the_turn_with_its_reason():
    events = SessionEvents()
    failure = FinishReason("error", failure=None, message="boom", code="HTTP_500")
    rows = events.call(_call([Message("user", "go")], [FinishChunk(failure)]), Redactor())
    assert rows[-1]["data"]["reason"] == {"kind": "error", "step": 1, "message": "boom", "code": "HTTP_500"}


def test_observed_call_knows_when_the_answer_calls_tools():
    assert _call([Message("user", "x")], TOOL_ANSWER).calls_tools
    assert not _call([Message("user", "x")], TEXT_ANSWER).calls_tools
    assert isinstance(observe([], 0), ObservedCall) and not observe([], 0).starts_turn


def test_a_bad_redact_pattern_is_a_record_error_naming_it():
    with pytest.raises(BadRedaction, match=r"--redact '\(' is not a regular expression") as caught:
        Redactor([r"sk-[a-z]+", "("])
    assert isinstance(caught.value, MockllmError) and isinstance(caught.value, re.error)


def test_record_exits_2_naming_a_bad_redact_pattern_and_creates_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert record_forever(RecordOptions("http://127.0.0.1:9/v1", out, redact=("(",), port=0)) == 2
    assert "mockllm record: --redact '('" in capsys.readouterr().err
    assert not out.exists()


def test_a_folder_holding_a_recording_or_that_is_a_file_is_refused_with_a_record_error(tmp_path):
    (tmp_path / "session.1.jsonl.partial").write_text("")
    with pytest.raises(AlreadyRecorded, match=r"already holds a recording \(session.1.jsonl.partial\)") as caught:
        SessionTree(tmp_path)
    assert isinstance(caught.value, FileExistsError), "what it was before it had a class of its own"
    a_file = tmp_path / "notes.txt"
    a_file.write_text("")
    with pytest.raises(RecordError, match="cannot record there"):
        SessionTree(a_file)
