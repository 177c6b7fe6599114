"""The OpenAI Responses dialect, pure: entries to named SSE events, requests to neutral messages,
and the live-stream decoder (round trip on the real corpus)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mockllm.dsh.chunks import StreamChunk, TokenUsage, UsageChunk
from mockllm.errors import RequestError
from mockllm.replay.run import Run
from mockllm.scenario.load import load_scenario
from mockllm.script.entries import ChunksEntry, Entry
from mockllm.wire import DIALECTS
from mockllm.wire.envelope import Envelope
from mockllm.wire.render import read
from mockllm.wire.reply import Reply
from mockllm.wire.request import Message, ToolCall
from mockllm.wire.responses.dialect import Responses
from mockllm.wire.sse import iter_events
from tests.logbuilder import CORPUS, corpus_or_skip, text_call, write_sessions

ENVELOPE = Envelope("resp_mockllm_0_1", 1700000000, "m")
RESPONSES = Responses()


def entry(data: dict[str, Any]) -> Entry:
    return msgspec.convert(data, Entry)  # type: ignore[arg-type]


def chunks(*items: dict[str, Any]) -> Entry:
    return entry({"kind": "chunks", "chunks": list(items)})


def render(data: Entry) -> Reply:
    return Responses().render(read(data), ENVELOPE)


def events(raw: bytes) -> list[dict[str, Any]]:
    """The stream's events, decoded; each event's name must equal its JSON `type`."""
    assert raw.endswith(b"\n\n"), raw[-80:]
    out = []
    for name, data in iter_events(raw):
        payload = json.loads(data)
        assert name == payload["type"]
        out.append(payload)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    return out


def types(raw: bytes) -> list[str]:
    return [e["type"] for e in events(raw)]


def start(index: int, kind: str) -> dict[str, Any]:
    return {"type": "block-start", "index": index, "blockType": kind}


def text(index: int, value: str) -> dict[str, Any]:
    return {"type": "text-delta", "index": index, "text": value}


def reasoning(index: int, value: str) -> dict[str, Any]:
    return {"type": "reasoning-delta", "index": index, "text": value}


def tool(index: int, part: str, call_id: str | None = "call_x", name: str | None = "f") -> dict[str, Any]:
    out: dict[str, Any] = {"type": "tool-call-delta", "index": index, "argumentsDelta": part}
    if call_id is not None:
        out["id"] = call_id
    if name is not None:
        out["name"] = name
    return out


def end(index: int, **block: Any) -> dict[str, Any]:
    return {"type": "block-end", "index": index, "block": block}


def fin(kind: str = "stop", **reason: Any) -> dict[str, Any]:
    return {"type": "finish", "reason": {"kind": kind, **reason}}


def use(**counts: int) -> dict[str, Any]:
    return {"type": "usage", "usage": counts}


SMALL = chunks(start(0, "text"), text(0, "Hel"), text(0, "lo"), end(0, type="text", text="Hello"),
               use(inputTokens=3, outputTokens=2), fin("stop"))

RESPONSE_HEAD = ('{"id":"resp_mockllm_0_1","object":"response","created_at":1700000000,"status":"%s","error":null,'
                 '"incomplete_details":null,"model":"m","output":%s,"parallel_tool_calls":true,"tool_choice":"auto",'
                 '"tools":[],"usage":%s}')
MESSAGE = ('{"id":"msg_mockllm_0_1_0","type":"message","status":"%s","role":"assistant","content":%s}')


def test_small_text_call_golden_bytes():
    reply = render(SMALL)
    assert reply.status == 200
    assert reply.ending == "done"
    in_progress = RESPONSE_HEAD % ("in_progress", "[]", "null")
    part = '{"type":"output_text","text":"%s","annotations":[]}'
    done_message = MESSAGE % ("completed", "[" + part % "Hello" + "]")
    usage = ('{"input_tokens":3,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":2,'
             '"output_tokens_details":{"reasoning_tokens":0},"total_tokens":5}')
    where = '"item_id":"msg_mockllm_0_1_0","output_index":0,"content_index":0'
    named = [
        ("response.created", f'"response":{in_progress}'),
        ("response.in_progress", f'"response":{in_progress}'),
        ("response.output_item.added", '"output_index":0,"item":' + MESSAGE % ("in_progress", "[]")),
        ("response.content_part.added", f'{where},"part":' + part % ""),
        ("response.output_text.delta", f'{where},"delta":"Hel","logprobs":[]'),
        ("response.output_text.delta", f'{where},"delta":"lo","logprobs":[]'),
        ("response.output_text.done", f'{where},"text":"Hello","logprobs":[]'),
        ("response.content_part.done", f'{where},"part":' + part % "Hello"),
        ("response.output_item.done", '"output_index":0,"item":' + done_message),
        ("response.completed", '"response":' + RESPONSE_HEAD % ("completed", f"[{done_message}]", usage)),
    ]
    expected = "".join(f'event: {name}\ndata: {{"type":"{name}","sequence_number":{n},{body}}}\n\n'
                       for n, (name, body) in enumerate(named))
    assert reply.stream_bytes(include_usage=True) == expected.encode()
    assert reply.stream_bytes(include_usage=False) == expected.encode()  # usage always rides on completed
    assert json.loads(reply.body) == json.loads(RESPONSE_HEAD % ("completed", f"[{done_message}]", usage))


def test_every_item_is_added_before_its_content_and_done_before_completed():
    reply = render(chunks(
        start(0, "reasoning"), reasoning(0, "think"), start(1, "tool-call"), tool(1, ""), tool(1, '{"a":1}'),
        start(2, "text"), text(2, "T"),
        end(0, type="reasoning", text="think"), end(1, type="tool-call", id="call_x", name="f", arguments='{"a":1}'),
        end(2, type="text", text="T"), use(inputTokens=1, outputTokens=1), fin("tool-calls")))
    assert types(reply.stream_bytes(True)) == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
        # dsh records every block-end at the end of the call; OpenAI closes an item before adding the next.
        "response.reasoning_summary_text.done", "response.reasoning_summary_part.done", "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed",
    ]
    got = events(reply.stream_bytes(True))
    added = [e for e in got if e["type"] == "response.output_item.added"]
    assert [(e["output_index"], e["item"]["type"], e["item"]["id"]) for e in added] == [
        (0, "reasoning", "rs_mockllm_0_1_0"), (1, "function_call", "fc_mockllm_0_1_1"),
        (2, "message", "msg_mockllm_0_1_2")]
    assert added[1]["item"] == {"id": "fc_mockllm_0_1_1", "type": "function_call", "status": "in_progress",
                                "call_id": "call_x", "name": "f", "arguments": ""}
    completed = got[-1]["response"]
    assert completed["status"] == "completed"
    assert completed["output"] == [e["item"] for e in got if e["type"] == "response.output_item.done"]
    assert {e["response"]["id"] for e in got if "response" in e} == {"resp_mockllm_0_1"}


def test_interleaved_deltas_keep_both_items_open():
    reply = render(chunks(start(0, "tool-call"), start(1, "tool-call"), tool(0, "{", "call_a", "a"),
                          tool(1, "{", "call_b", "b"), tool(0, "}", "call_a", "a"), tool(1, "}", "call_b", "b"),
                          fin("tool-calls")))
    got = events(reply.stream_bytes(True))
    assert [(e["type"].removeprefix("response."), e.get("output_index")) for e in got[2:]] == [
        ("output_item.added", 0), ("output_item.added", 1),
        ("function_call_arguments.delta", 0), ("function_call_arguments.delta", 1),
        ("function_call_arguments.delta", 0), ("function_call_arguments.delta", 1),
        ("function_call_arguments.done", 0), ("output_item.done", 0),
        ("function_call_arguments.done", 1), ("output_item.done", 1), ("completed", None)]
    assert [(i["call_id"], i["arguments"]) for i in got[-1]["response"]["output"]] == [("call_a", "{}"),
                                                                                        ("call_b", "{}")]


def test_tool_call_identity_from_block_end_when_deltas_lack_it():
    reply = render(chunks(start(0, "tool-call"), tool(0, "{}", call_id=None, name=None),
                          end(0, type="tool-call", id="call_n", name="ls", arguments="{}"), fin("tool-calls")))
    item = events(reply.stream_bytes(True))[2]["item"]
    assert (item["call_id"], item["name"]) == ("call_n", "ls")


def test_tool_call_with_no_recorded_id_gets_one_per_call():
    reply = render(chunks(start(0, "tool-call"), tool(0, "{}", None, "a"),
                          start(1, "tool-call"), tool(1, "{}", None, "b"), fin("tool-calls")))
    assert [i["call_id"] for i in json.loads(reply.body)["output"]] == ["call_0", "call_1"]


@pytest.mark.parametrize(("block", "delta_type", "expected"), [
    ({"type": "text", "text": "whole text"}, "response.output_text.delta", "whole text"),
    ({"type": "reasoning", "text": "whole thought"}, "response.reasoning_summary_text.delta", "whole thought"),
    ({"type": "tool-call", "id": "call_w", "name": "ls", "arguments": {"dir": "."}},
     "response.function_call_arguments.delta", '{"dir":"."}'),
], ids=["text", "reasoning", "tool-call-object-arguments"])
def test_block_with_no_deltas_is_sent_as_one_delta(block, delta_type, expected):
    reply = render(chunks(start(0, block["type"]), end(0, **block), fin()))
    deltas = [e for e in events(reply.stream_bytes(True)) if e["type"].endswith(".delta")]
    assert [(e["type"], e["delta"]) for e in deltas] == [(delta_type, expected)]


@pytest.mark.parametrize(("reason", "event", "status", "extra"), [
    ({"kind": "stop"}, "response.completed", "completed", {}),
    ({"kind": "tool-calls"}, "response.completed", "completed", {}),
    ({"kind": "max-tokens"}, "response.incomplete", "incomplete",
     {"incomplete_details": {"reason": "max_output_tokens"}}),
    ({"kind": "error", "failure": {"code": "EMPTY_RESPONSE", "message": "empty"}}, "response.completed", "completed",
     {}),
    ({"kind": "error", "code": "CONTENT_FILTER", "message": "blocked"}, "response.incomplete", "incomplete",
     {"incomplete_details": {"reason": "content_filter"}}),
    ({"kind": "error", "failure": {"code": "SERVER_ERROR", "message": "upstream broke"}}, "response.failed", "failed",
     {"error": {"code": "server_error", "message": "upstream broke"}}),
], ids=["stop", "tool-calls", "max-tokens", "empty-response", "content-filter", "other-error"])
def test_finish_mapping(reason, event, status, extra):
    reply = render(chunks(start(0, "text"), text(0, "x"), end(0, type="text", text="x"), fin(**reason)))
    assert reply.status == 200
    last = events(reply.stream_bytes(True))[-1]
    assert last["type"] == event
    response = last["response"]
    assert response["status"] == status
    for key in ("error", "incomplete_details"):
        assert response[key] == extra.get(key)
    assert json.loads(reply.body) == response


@pytest.mark.parametrize("reason", [
    {"kind": "error", "code": "CONTEXT_WINDOW_EXCEEDED", "message": "too long: 200k"},
    {"kind": "error", "failure": {"code": "CONTEXT_WINDOW_EXCEEDED", "message": "too long: 200k"}},
], ids=["flat", "nested"])
def test_context_window_exceeded_is_http_400(reason):
    reply = render(chunks(start(0, "text"), text(0, "x"), end(0, type="text", text="x"), fin(**reason)))
    assert (reply.status, reply.body_status) == (400, 400)
    assert json.loads(reply.body) == {"error": {"message": "too long: 200k", "type": "invalid_request_error",
                                                "param": None, "code": "context_length_exceeded"}}


@pytest.mark.parametrize(("counts", "expected"), [
    ({"inputTokens": 10, "outputTokens": 4},
     {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0}, "output_tokens": 4,
      "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 14}),
    ({"inputTokens": 53, "outputTokens": 33, "cacheReadTokens": 1280, "reasoningTokens": 31},
     {"input_tokens": 1333, "input_tokens_details": {"cached_tokens": 1280, "cache_write_tokens": 0},
      "output_tokens": 33, "output_tokens_details": {"reasoning_tokens": 31}, "total_tokens": 1366}),
    ({"inputTokens": 5, "outputTokens": 1, "cacheReadTokens": 2, "cacheWriteTokens": 7},
     {"input_tokens": 14, "input_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 7}, "output_tokens": 1,
      "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}),
], ids=["plain", "cache-read-and-reasoning", "cache-write"])
def test_usage_mapping(counts, expected):
    reply = render(chunks(start(0, "text"), text(0, "x"), end(0, type="text", text="x"), use(**counts), fin()))
    assert events(reply.stream_bytes(False))[-1]["response"]["usage"] == expected
    assert json.loads(reply.body)["usage"] == expected


def test_no_usage_recorded_means_null_usage():
    reply = render(chunks(start(0, "text"), text(0, "x"), end(0, type="text", text="x"), fin()))
    assert events(reply.stream_bytes(True))[-1]["response"]["usage"] is None


def test_throw_without_chunks_is_an_http_error():
    reply = render(entry({"kind": "throw", "message": "slow down", "code": "RATE_LIMIT"}))
    assert (reply.status, reply.frames) == (429, ())
    assert json.loads(reply.body) == {"error": {"message": "slow down", "type": "rate_limit_error", "param": None,
                                                "code": "RATE_LIMIT"}}


def test_throw_with_chunks_streams_them_then_an_error_event():
    reply = render(entry({"kind": "throw", "message": "overloaded", "code": "HTTP_529",
                          "chunks": [start(0, "text"), text(0, "par"), text(0, "tial")]}))
    assert (reply.status, reply.ending, reply.body_status) == (200, "error", 529)
    got = events(reply.stream_bytes(True))
    assert [e["type"] for e in got][-3:] == ["response.output_text.delta", "response.output_text.delta", "error"]
    # Flat as the reference documents, nested as OpenAI sends it (the nesting is what the SDK raises on).
    assert got[-1] == {"type": "error", "sequence_number": len(got) - 1, "code": "HTTP_529", "message": "overloaded",
                       "param": None, "error": {"type": "server_error", "code": "HTTP_529", "message": "overloaded",
                                                "param": None}}
    assert json.loads(reply.body)["error"]["code"] == "HTTP_529"


def test_stream_closed_is_a_bare_cut():
    reply = render(entry({"kind": "throw", "message": "socket closed", "code": "STREAM_CLOSED",
                          "chunks": [start(0, "text"), text(0, "half")]}))
    assert (reply.status, reply.ending) == (200, "cut")
    raw = reply.stream_bytes(True)
    assert types(raw)[-1] == "response.output_text.delta"
    assert b"error" not in raw.replace(b'"error":null', b"")


def test_hang_streams_one_partial_delta_then_holds():
    reply = render(entry({"kind": "hang"}))
    assert (reply.ending, reply.hold_when_not_streaming) == ("hold", True)
    got = events(reply.stream_bytes(True))
    assert [e["type"] for e in got] == ["response.created", "response.in_progress", "response.output_item.added",
                                        "response.content_part.added", "response.output_text.delta"]
    assert got[-1]["delta"] == "partial"


def test_aborted_finish_streams_its_chunks_then_holds():
    reply = render(chunks(start(0, "text"), text(0, "start"), fin("aborted")))
    assert (reply.ending, reply.hold_when_not_streaming) == ("hold", True)
    assert types(reply.stream_bytes(True))[-1] == "response.output_text.delta"


# -- requests -------------------------------------------------------------------------------------

def decode(body: dict[str, Any]) -> list[Message]:
    return RESPONSES.decode_request(json.dumps(body).encode()).messages


@pytest.mark.parametrize(("body", "expected"), [
    ({"input": "hi"}, [Message("user", "hi")]),
    ({"input": "hi", "instructions": "be brief"}, [Message("system", "be brief"), Message("user", "hi")]),
    ({"input": [{"role": "developer", "content": "sys"}, {"role": "user", "content": "q"}]},
     [Message("system", "sys"), Message("user", "q")]),
    ({"input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "he"},
                                                                {"type": "input_text", "text": "llo"}]}]},
     [Message("user", "hello")]),
    ({"input": [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
        {"type": "function_call", "call_id": "call_a", "name": "read", "arguments": '{"p":1}'},
        {"type": "function_call", "call_id": "call_b", "name": "grep", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_a", "output": "file"},
        {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "none"}]},
    ]}, [Message("assistant", "Let me look.",
                 (ToolCall("call_a", "read", '{"p":1}'), ToolCall("call_b", "grep", "{}"))),
         Message("tool", "file", tool_call_id="call_a"), Message("tool", "none", tool_call_id="call_b")]),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "ls", "arguments": "{}"}]},
     [Message("assistant", "", (ToolCall("c", "ls", "{}"),))]),
], ids=["string", "instructions-first", "role-without-type", "text-parts", "tool-turn", "tool-call-alone"])
def test_input_is_the_conversation(body, expected):
    assert decode(body) == expected


def test_request_fields():
    request = RESPONSES.decode_request(b'{"model":"m","input":"x","stream":true,"previous_response_id":"resp_1"}')
    assert (request.stream, request.include_usage, request.model, request.continues) == (True, True, "m", "resp_1")


@pytest.mark.parametrize("body", [b"[]", b'{"input": 3}', b'{"model": "m"}', b'{"input": []}', b"nope"],
                         ids=["not-object", "bad-input", "no-input", "empty-input", "not-json"])
def test_bad_requests_are_request_errors(body):
    with pytest.raises(RequestError):
        RESPONSES.decode_request(body)


def test_reply_ids_round_trip():
    assert RESPONSES.reply_id(2, 7) == "resp_mockllm_2_7"
    assert RESPONSES.reply_of("resp_mockllm_2_7") == (2, 7)
    for foreign in ("resp_abc", "resp_mockllm_2_7x", "chatcmpl-mockllm-2-7", ""):
        assert RESPONSES.reply_of(foreign) is None


def test_registered_under_its_route():
    assert [d.path for d in DIALECTS if isinstance(d, Responses)] == ["/responses"]


# -- chains: which session a continued reply belongs to (Run, no socket) --------------------------

def continuing(reply_id: str | None, text: str = "q") -> Any:
    body: dict[str, Any] = {"input": text}
    if reply_id is not None:
        body["previous_response_id"] = reply_id
    return RESPONSES.decode_request(json.dumps(body).encode())


def test_chain_steps_and_retries_stay_with_their_session_and_branches_route_by_conversation(tmp_path: Path):
    scenario = load_scenario(write_sessions(tmp_path / "two", {
        "p": [text_call(f"p{n}") for n in range(4)], "c": [text_call("c0")]}))
    run = Run("r", scenario)

    def served(reply_id: str | None, text: str = "q") -> tuple[str, int, int]:
        live = run.live_session(None, continuing(reply_id, text), RESPONSES)
        turn = run.take(live)
        return live, turn.script, turn.call

    assert served(None, "start") == ("conversation-1", 0, 0)
    assert served("resp_mockllm_0_0") == ("conversation-1", 0, 1)   # the next step
    assert served("resp_mockllm_0_0") == ("conversation-1", 0, 2)   # a retry of that step
    assert served("resp_mockllm_0_2") == ("conversation-1", 0, 3)
    # Continuing an older reply branches off (a fork child continuing its parent's first turn).
    assert served("resp_mockllm_0_0", "fork task") == ("conversation-2", 1, 0)


@pytest.mark.parametrize("reply_id", ["resp_not_ours", "resp_mockllm_1_0", "resp_mockllm_0_5", "resp_mockllm_9_0"],
                         ids=["foreign", "unbound-script", "never-served-call", "no-such-script"])
def test_ids_this_run_never_served_route_by_conversation(tmp_path: Path, reply_id: str):
    scenario = load_scenario(write_sessions(tmp_path / "two", {"p": [text_call("p0"), text_call("p1")],
                                                              "c": [text_call("c0")]}))
    run = Run("r", scenario)
    run.take(run.live_session(None, continuing(None, "start"), RESPONSES))
    assert run.live_session(None, continuing(reply_id, "start"), RESPONSES) == "conversation-1"  # its conversation
    assert run.live_session(None, continuing(reply_id, "other"), RESPONSES) == "conversation-2"


# -- the live-stream decoder ----------------------------------------------------------------------

def decoded(raw: bytes) -> list[StreamChunk]:
    decoder = RESPONSES.stream_decoder()
    out: list[StreamChunk] = []
    for name, data in iter_events(raw):
        out += decoder.feed(name, data)
    return out + decoder.close()


def _as_sent(chunk: StreamChunk) -> StreamChunk:
    """The wire always carries both detail counts (the SDK's models require them): an absent one reads back 0."""
    if isinstance(chunk, UsageChunk):
        usage = chunk.usage
        return UsageChunk(TokenUsage(usage.inputTokens, usage.outputTokens, usage.cacheReadTokens or 0,
                                     usage.cacheWriteTokens, usage.reasoningTokens or 0))
    return chunk


CORPUS_ENTRIES = [
    pytest.param(scenario_dir, session.file, call,
                 id=f"{scenario_dir.parent.name}/{scenario_dir.name}/{session.file}#{call}")
    for scenario_dir in (sorted(p.parent for p in CORPUS.glob("*/*/session.jsonl")) if CORPUS.is_dir() else [])
    for session in load_scenario(scenario_dir).sessions
    for call, item in enumerate(session.entries) if isinstance(item, ChunksEntry)
]


@pytest.mark.parametrize(("scenario_dir", "file", "call"),
                         CORPUS_ENTRIES or [pytest.param(None, None, None, id="no-corpus")])
def test_decoder_round_trips_every_corpus_call(scenario_dir, file, call):
    corpus_or_skip()
    session = next(s for s in load_scenario(scenario_dir).sessions if s.file == file)
    recorded = session.entries[call]
    assert isinstance(recorded, ChunksEntry)
    raw = Responses().render(read(recorded), ENVELOPE).stream_bytes(True)
    assert decoded(raw) == [_as_sent(c) for c in recorded.chunks]


def _decoded_finish(raw: bytes) -> dict[str, Any]:
    return msgspec.to_builtins(decoded(raw)[-1])["reason"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(("data", "expected"), [
    (chunks(start(0, "text"), text(0, "x"), fin("max-tokens")), {"kind": "max-tokens"}),
    (chunks(start(0, "text"), text(0, "x"), fin("error", code="CONTENT_FILTER", message="no")),
     {"kind": "error", "failure": {"message": "the response ended incomplete (content_filter)",
                                   "code": "CONTENT_FILTER"}}),
    (chunks(fin("error", failure={"code": "SERVER_ERROR", "message": "broke"})),
     {"kind": "error", "failure": {"message": "broke", "code": "SERVER_ERROR"}}),
    (entry({"kind": "throw", "message": "overloaded", "code": "HTTP_529", "chunks": [start(0, "text"), text(0, "p")]}),
     {"kind": "error", "failure": {"message": "overloaded", "code": "HTTP_529"}}),
    (entry({"kind": "throw", "message": "cut", "code": "STREAM_CLOSED", "chunks": [start(0, "text"), text(0, "p")]}),
     {"kind": "error", "failure": {"message": "the stream ended with no response.completed", "code": "STREAM_CLOSED"}}),
], ids=["max-tokens", "content-filter", "failed", "error-event", "cut"])
def test_decoder_finishes(data, expected):
    assert _decoded_finish(render(data).stream_bytes(True)) == expected


def test_decoder_reads_the_flat_error_event_of_the_reference():
    decoder = RESPONSES.stream_decoder()
    decoder.feed("error", b'{"type":"error","code":"rate_limit_exceeded","message":"slow","param":null,'
                          b'"sequence_number":3}')
    assert msgspec.to_builtins(decoder.close()[-1])["reason"] == {
        "kind": "error", "failure": {"message": "slow", "code": "rate_limit_exceeded"}}
