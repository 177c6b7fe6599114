"""The Anthropic Messages dialect, pure: entries to SSE bytes and messages, requests to neutral
conversations, and a live stream decoded back into the recorded chunks (no server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mockllm.dsh.chunks import StreamChunk
from mockllm.scenario.load import load_scenario
from mockllm.script.entries import ChunksEntry, Entry
from mockllm.script.templates import request_text
from mockllm.wire.anthropic.dialect import MESSAGE_STOP, SIGNATURE, AnthropicMessages
from mockllm.wire.envelope import Envelope
from mockllm.wire.render import read
from mockllm.wire.reply import Reply
from mockllm.wire.request import Message, ToolCall
from mockllm.wire.sse import iter_events
from tests.logbuilder import CORPUS, CORPUS_MISSING

ENVELOPE = Envelope("msg_1", 1700000000, "m")
DIALECT = AnthropicMessages()


def entry(data: dict[str, Any]) -> Entry:
    return msgspec.convert(data, Entry)  # type: ignore[arg-type]


def chunks(*items: dict[str, Any]) -> Entry:
    return entry({"kind": "chunks", "chunks": list(items)})


def render(data: Entry) -> Reply:
    return AnthropicMessages().render(read(data), ENVELOPE)


def events(raw: bytes) -> list[dict[str, Any]]:
    """The events of a stream, decoded; each `event:` name must equal its JSON `type`."""
    assert raw.endswith(b"\n\n"), raw[-80:]
    out = []
    for name, data in iter_events(raw):
        payload = json.loads(data)
        assert name == payload["type"], (name, payload)
        out.append(payload)
    return out


def deltas(raw: bytes) -> list[tuple[int, dict[str, Any]]]:
    return [(e["index"], e["delta"]) for e in events(raw) if e["type"] == "content_block_delta"]


def start(index: int, kind: str) -> dict[str, Any]:
    return {"type": "block-start", "index": index, "blockType": kind}


def text(index: int, value: str) -> dict[str, Any]:
    return {"type": "text-delta", "index": index, "text": value}


def reasoning(index: int, value: str) -> dict[str, Any]:
    return {"type": "reasoning-delta", "index": index, "text": value}


def tool(index: int, part: str, call_id: str = "call_x", name: str | None = "f") -> dict[str, Any]:
    out: dict[str, Any] = {"type": "tool-call-delta", "index": index, "id": call_id, "argumentsDelta": part}
    if name is not None:
        out["name"] = name
    return out


def end(index: int, **block: Any) -> dict[str, Any]:
    return {"type": "block-end", "index": index, "block": block}


def fin(kind: str = "stop", **reason: Any) -> dict[str, Any]:
    return {"type": "finish", "reason": {"kind": kind, **reason}}


def use(**counts: int) -> dict[str, Any]:
    return {"type": "usage", "usage": counts}


# -- rendering ------------------------------------------------------------------------------------

THINK_THEN_TOOL = chunks(
    start(0, "reasoning"), reasoning(0, "Hm"),
    start(1, "tool-call"), tool(1, "", "call_1", "ls"), tool(1, '{"d":"."}', "call_1", "ls"),
    end(0, type="reasoning", text="Hm"), end(1, type="tool-call", id="call_1", name="ls", arguments='{"d":"."}'),
    use(inputTokens=5, outputTokens=7, cacheReadTokens=3, reasoningTokens=1), fin("tool-calls"),
)


def test_golden_bytes_thinking_then_a_tool_call():
    reply = render(THINK_THEN_TOOL)
    assert (reply.status, reply.ending, reply.usage_frame) == (200, "done", None)
    assert reply.stream_bytes(include_usage=False) == reply.stream_bytes(include_usage=True)  # usage always sent
    assert reply.stream_bytes(include_usage=True) == (
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message",'
        b'"role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":'
        b'{"input_tokens":5,"cache_read_input_tokens":3,"output_tokens":7,"output_tokens_details":'
        b'{"thinking_tokens":1}}}}\n\n'
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":'
        b'{"type":"thinking","thinking":"","signature":""}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":'
        b'{"type":"thinking_delta","thinking":"Hm"}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":'
        b'{"type":"signature_delta","signature":"mockllm-unsigned"}}\n\n'
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
        b'event: content_block_start\ndata: {"type":"content_block_start","index":1,"content_block":'
        b'{"type":"tool_use","id":"call_1","name":"ls","input":{}}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":1,"delta":'
        b'{"type":"input_json_delta","partial_json":""}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":1,"delta":'
        b'{"type":"input_json_delta","partial_json":"{\\"d\\":\\".\\"}"}}\n\n'
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":1}\n\n'
        b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"tool_use",'
        b'"stop_sequence":null},"usage":{"output_tokens":7,"output_tokens_details":{"thinking_tokens":1}}}\n\n'
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )


def test_non_stream_body_is_the_same_message():
    assert json.loads(render(THINK_THEN_TOOL).body) == {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "thinking", "thinking": "Hm", "signature": SIGNATURE},
                    {"type": "tool_use", "id": "call_1", "name": "ls", "input": {"d": "."}}],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 5, "cache_read_input_tokens": 3, "output_tokens": 7,
                  "output_tokens_details": {"thinking_tokens": 1}},
    }


def test_every_event_is_one_frame_ending_with_a_blank_line():
    reply = render(chunks(start(0, "reasoning"), reasoning(0, "a\n"), reasoning(0, "b\n\n"),
                          start(1, "text"), text(1, "x\n"), end(0, type="reasoning"), end(1, type="text"), fin()))
    for frame in (*reply.frames, *reply.closing):
        assert frame.startswith(b"event: ")
        assert frame.endswith(b"}\n\n")
        assert frame.count(b"\n") == 3  # newlines inside strings are JSON-escaped


def test_blocks_are_streamed_one_after_another():
    # dsh records every block-end at the end of the call; on the wire a block stops when the next starts.
    reply = render(chunks(start(0, "reasoning"), reasoning(0, "r"), start(1, "text"), text(1, "t"),
                          end(0, type="reasoning", text="r"), end(1, type="text", text="t"), fin()))
    got = [(e["type"], e.get("index"), (e.get("delta") or {}).get("type")) for e in events(reply.stream_bytes(True))]
    assert got == [
        ("message_start", None, None),
        ("content_block_start", 0, None), ("content_block_delta", 0, "thinking_delta"),
        ("content_block_delta", 0, "signature_delta"), ("content_block_stop", 0, None),
        ("content_block_start", 1, None), ("content_block_delta", 1, "text_delta"), ("content_block_stop", 1, None),
        ("message_delta", None, None), ("message_stop", None, None),
    ]


def test_wire_indexes_count_blocks_in_order_of_first_sight():
    reply = render(chunks(start(3, "text"), text(3, "a"), start(7, "tool-call"), tool(7, "{}", "call_7", "g"),
                          end(3, type="text", text="a"),
                          end(7, type="tool-call", id="call_7", name="g", arguments="{}"), fin("tool-calls")))
    assert [i for i, _ in deltas(reply.stream_bytes(True))] == [0, 1]


def test_tool_identity_comes_from_the_block_end_when_deltas_lack_it():
    reply = render(chunks(start(0, "tool-call"), tool(0, "{}", "call_n", name=None),
                          end(0, type="tool-call", id="call_n", name="ls", arguments="{}"), fin("tool-calls")))
    starts = [e for e in events(reply.stream_bytes(True)) if e["type"] == "content_block_start"]
    assert starts[0]["content_block"] == {"type": "tool_use", "id": "call_n", "name": "ls", "input": {}}


def test_a_delta_without_a_block_start_opens_its_block():
    reply = render(entry({"kind": "throw", "message": "x", "chunks": [text(0, "orphan")]}))
    got = events(reply.stream_bytes(True))
    assert got[1] == {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    assert got[2]["delta"] == {"type": "text_delta", "text": "orphan"}


@pytest.mark.parametrize(("block", "expected"), [
    ({"type": "text", "text": "whole text"}, {"type": "text_delta", "text": "whole text"}),
    ({"type": "reasoning", "text": "whole thought"}, {"type": "thinking_delta", "thinking": "whole thought"}),
    ({"type": "tool-call", "id": "call_w", "name": "ls", "arguments": {"dir": "."}},
     {"type": "input_json_delta", "partial_json": '{"dir":"."}'}),
], ids=["text", "reasoning", "tool-call-object-arguments"])
def test_block_with_no_deltas_is_sent_as_one_delta(block, expected):
    reply = render(chunks(start(0, block["type"]), end(0, **block), fin()))
    assert deltas(reply.stream_bytes(True))[0] == (0, expected)


@pytest.mark.parametrize(("reason", "expected"), [
    ({"kind": "stop"}, "end_turn"),
    ({"kind": "tool-calls"}, "tool_use"),
    ({"kind": "max-tokens"}, "max_tokens"),
    ({"kind": "error", "failure": {"code": "EMPTY_RESPONSE", "message": "empty"}}, "end_turn"),
    ({"kind": "error", "code": "CONTENT_FILTER", "message": "blocked"}, "refusal"),
    ({"kind": "error", "failure": {"code": "Weird_Code", "message": "x"}}, "weird_code"),
], ids=["stop", "tool-calls", "max-tokens", "empty-response", "content-filter", "other-code"])
def test_stop_reason_mapping(reason, expected):
    reply = render(chunks(start(0, "text"), text(0, "x"), end(0, type="text", text="x"), fin(**reason)))
    got = events(reply.stream_bytes(True))
    assert got[-2]["delta"] == {"stop_reason": expected, "stop_sequence": None}
    assert got[-1] == {"type": "message_stop"}
    assert json.loads(reply.body)["stop_reason"] == expected


def test_no_finish_recorded_ends_with_a_null_stop_reason():
    reply = render(chunks(start(0, "text"), text(0, "x")))
    assert events(reply.stream_bytes(True))[-2]["delta"]["stop_reason"] is None
    assert reply.closing == (MESSAGE_STOP,)


def test_empty_response_is_a_message_with_no_content():
    reply = render(chunks(fin("error", failure={"code": "EMPTY_RESPONSE", "message": "no content"})))
    assert [e["type"] for e in events(reply.stream_bytes(True))] == ["message_start", "message_delta", "message_stop"]
    assert json.loads(reply.body)["content"] == []


@pytest.mark.parametrize(("message", "expected"), [
    ("250000 > 200000", "prompt is too long: 250000 > 200000"),
    ("prompt is too long: 210000 tokens > 200000 maximum", "prompt is too long: 210000 tokens > 200000 maximum"),
    (None, "prompt is too long: the context window was exceeded"),
], ids=["dsh-message", "anthropic-message-kept", "no-message"])
def test_context_window_exceeded_is_http_400_prompt_is_too_long(message, expected):
    failure = {"code": "CONTEXT_WINDOW_EXCEEDED", **({"message": message} if message else {})}
    reply = render(chunks(start(0, "text"), text(0, "x"), fin("error", failure=failure)))
    assert (reply.status, reply.body_status, reply.frames) == (400, 400, ())
    assert json.loads(reply.body) == {"type": "error", "error": {"type": "invalid_request_error", "message": expected}}


@pytest.mark.parametrize(("counts", "expected"), [
    ({"inputTokens": 10, "outputTokens": 4}, {"input_tokens": 10, "output_tokens": 4}),
    ({"inputTokens": 10, "outputTokens": 4, "cacheReadTokens": 90, "cacheWriteTokens": 7},
     {"input_tokens": 10, "cache_creation_input_tokens": 7, "cache_read_input_tokens": 90, "output_tokens": 4}),
    ({"inputTokens": 5, "outputTokens": 1, "cacheReadTokens": 0, "reasoningTokens": 3},
     {"input_tokens": 5, "cache_read_input_tokens": 0, "output_tokens": 1,
      "output_tokens_details": {"thinking_tokens": 3}}),
], ids=["plain", "cache-read-and-write", "zero-cache-read-recorded-and-thinking"])
def test_usage_mapping(counts, expected):
    reply = render(chunks(start(0, "text"), text(0, "x"), end(0, type="text", text="x"), use(**counts), fin()))
    got = events(reply.stream_bytes(True))
    assert got[0]["message"]["usage"] == expected
    output = {k: v for k, v in expected.items() if k.startswith("output_")}
    assert got[-2]["usage"] == output
    assert json.loads(reply.body)["usage"] == expected


def test_no_usage_recorded_is_zeros():
    reply = render(chunks(start(0, "text"), text(0, "x"), end(0, type="text", text="x"), fin()))
    got = events(reply.stream_bytes(True))
    assert got[0]["message"]["usage"] == {"input_tokens": 0, "output_tokens": 0}
    assert got[-2]["usage"] == {"output_tokens": 0}


@pytest.mark.parametrize(("throw", "status", "error_type"), [
    ({"code": "AUTH"}, 401, "authentication_error"),
    ({"code": "RATE_LIMIT"}, 429, "rate_limit_error"),
    ({"code": "INVALID_REQUEST"}, 400, "invalid_request_error"),
    ({"code": "SERVER"}, 500, "api_error"),
    ({"code": "HTTP_529"}, 529, "overloaded_error"),
    ({"code": "HTTP_413"}, 413, "request_too_large"),
    ({"code": "HTTP_418"}, 418, "invalid_request_error"),
    ({"code": "HTTP_502"}, 502, "api_error"),
    ({"code": "AUTH", "status": 403}, 403, "permission_error"),
    ({"code": "NOT_FOUND", "status": 404}, 404, "not_found_error"),
], ids=["auth", "rate-limit", "invalid-request", "server", "overloaded", "too-large", "other-4xx", "other-5xx",
        "explicit-status", "not-found"])
def test_throw_without_chunks_is_an_anthropic_http_error(throw, status, error_type):
    reply = render(entry({"kind": "throw", "message": "provider said no", **throw}))
    assert (reply.status, reply.body_status, reply.frames) == (status, status, ())
    assert json.loads(reply.body) == {"type": "error", "error": {"type": error_type, "message": "provider said no"}}


def test_throw_with_chunks_streams_them_then_an_error_event():
    reply = render(entry({"kind": "throw", "message": "overloaded", "code": "HTTP_529",
                          "chunks": [start(0, "text"), text(0, "par"), text(0, "tial")]}))
    assert (reply.status, reply.ending, reply.body_status) == (200, "error", 529)
    got = events(reply.stream_bytes(True))
    assert [e["type"] for e in got] == ["message_start", "content_block_start", "content_block_delta",
                                        "content_block_delta", "error"]
    assert got[-1] == {"type": "error", "error": {"type": "overloaded_error", "message": "overloaded"}}
    assert json.loads(reply.body) == got[-1]  # not streaming: the HTTP error


def test_stream_closed_is_a_bare_cut():
    reply = render(entry({"kind": "throw", "message": "socket closed", "code": "STREAM_CLOSED",
                          "chunks": [start(0, "text"), text(0, "half")]}))
    assert (reply.status, reply.ending, reply.closing) == (200, "cut", ())
    assert [e["type"] for e in events(reply.stream_bytes(True))][-1] == "content_block_delta"


def test_hang_streams_one_partial_delta_then_holds():
    reply = render(entry({"kind": "hang"}))
    assert (reply.status, reply.ending, reply.hold_when_not_streaming) == (200, "hold", True)
    assert deltas(reply.stream_bytes(True)) == [(0, {"type": "text_delta", "text": "partial"})]
    assert b"message_stop" not in reply.stream_bytes(True)


def test_aborted_finish_streams_its_chunks_then_holds():
    reply = render(chunks(start(0, "text"), text(0, "start"), fin("aborted")))
    assert (reply.ending, reply.hold_when_not_streaming) == ("hold", True)
    raw = reply.stream_bytes(True)
    assert deltas(raw) == [(0, {"type": "text_delta", "text": "start"})]
    assert b"message_delta" not in raw and b"message_stop" not in raw


def test_tool_input_that_is_not_json_is_kept_as_recorded():
    reply = render(chunks(start(0, "tool-call"), tool(0, '{"cut', "call_t", "f"), fin("max-tokens")))
    assert json.loads(reply.body)["content"][0]["input"] == '{"cut'


@pytest.mark.parametrize(("code", "status", "error_type"), [
    ("script_exhausted", 410, "invalid_request_error"),
    ("unrecorded_session", 404, "not_found_error"),
    ("request_too_large", 413, "request_too_large"),
    ("mockllm_internal_error", 500, "api_error"),
], ids=["exhausted", "unrecorded", "too-large", "internal"])
def test_mock_made_errors_carry_their_code(code, status, error_type):
    body = json.loads(DIALECT.error_body("run run-1: what happened", code, status))
    assert body == {"type": "error", "error": {"type": error_type, "message": f"{code}: run run-1: what happened",
                                               "code": code}}


def test_reply_ids_are_stable_per_script_and_call():
    assert DIALECT.reply_id(2, 5) == "msg_mockllm_2_5"
    assert DIALECT.reply_of("msg_mockllm_2_5") is None  # Anthropic requests never continue a reply by id


# -- requests -------------------------------------------------------------------------------------

def decode(body: dict[str, Any]) -> list[Message]:
    return DIALECT.decode_request(json.dumps(body).encode()).messages


def test_request_fields():
    request = DIALECT.decode_request(b'{"model":"claude","max_tokens":5,"stream":true,"messages":[{"role":"user",'
                                     b'"content":"hi"}]}')
    assert (request.stream, request.include_usage, request.model) == (True, True, "claude")
    assert request.messages == [Message("user", "hi")]


@pytest.mark.parametrize("system", [
    "Be brief.",
    [{"type": "text", "text": "Be ", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "brief."}],
], ids=["string", "blocks"])
def test_system_is_a_leading_system_message(system):
    assert decode({"system": system, "messages": [{"role": "user", "content": "q"}]}) == [
        Message("system", "Be brief."), Message("user", "q")]


def test_no_system_no_system_message():
    assert decode({"messages": [{"role": "user", "content": "q"}]}) == [Message("user", "q")]


def test_tool_use_and_tool_results():
    got = decode({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "list it"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "t1", "name": "ls", "input": {"z": 1, "a": [2]}},
            {"type": "tool_use", "id": "t2", "name": "cat", "input": {}, "cache_control": {"type": "ephemeral"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"},
            {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "A"}], "is_error": True},
            {"type": "text", "text": "and now?"},
        ]},
    ]})
    assert got == [
        Message("user", "list it"),
        Message("assistant", "Looking.", (ToolCall("t1", "ls", '{"a":[2],"z":1}'), ToolCall("t2", "cat", "{}"))),
        Message("tool", "a.txt", tool_call_id="t1"),
        Message("tool", "A", tool_call_id="t2"),
        Message("user", "and now?"),
    ]


def test_a_user_turn_of_only_tool_results_is_only_tool_messages():
    result = {"type": "tool_result", "tool_use_id": "t", "content": "x"}
    got = decode({"messages": [{"role": "user", "content": [result]}]})
    assert got == [Message("tool", "x", tool_call_id="t")]


@pytest.mark.parametrize(("before", "after"), [
    ({"role": "user", "content": "q"}, {"role": "user", "content": [{"type": "text", "text": "q"}]}),
    ({"role": "user", "content": [{"type": "text", "text": "q"}]},
     {"role": "user", "content": [{"type": "text", "text": "q", "cache_control": {"type": "ephemeral"}}]}),
    ({"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"},
                                       {"type": "text", "text": "a"}]},
     {"role": "assistant", "content": "a"}),
    ({"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1, "b": 2}}]},
     {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"b": 2, "a": 1}}]}),
    ({"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "AA"}}]},
     {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "AA"},
                                   "cache_control": {"type": "ephemeral"}}]}),
], ids=["string-vs-blocks", "cache-control-moved", "thinking-dropped", "input-key-order", "image-cache-control"])
def test_history_rewrites_keep_the_neutral_form(before, after):
    assert decode({"messages": [before]}) == decode({"messages": [after]})


def test_templates_search_system_then_messages():
    request = DIALECT.decode_request(json.dumps({
        "system": [{"type": "text", "text": "codeword ALPHA"}],
        "messages": [{"role": "user", "content": "codeword BRAVO"}]}).encode())
    haystack = request_text(request.raw_conversation)
    assert haystack.index("ALPHA") < haystack.index("BRAVO")


@pytest.mark.parametrize(("body", "needle"), [
    (b"[]", "not an Anthropic Messages request"),
    (b'{"messages": "hi"}', "not an Anthropic Messages request"),
    (b'{"messages": []}', '"messages" is empty'),
], ids=["not-an-object", "messages-not-a-list", "empty"])
def test_bad_requests_say_what_is_wrong(body, needle):
    from mockllm.errors import RequestError

    with pytest.raises(RequestError, match=needle):
        DIALECT.decode_request(body)


# -- the live-stream decoder ----------------------------------------------------------------------

def decode_stream(raw: bytes) -> list[StreamChunk]:
    decoder = DIALECT.stream_decoder()
    out: list[StreamChunk] = []
    for name, data in iter_events(raw):
        out += decoder.feed(name, data)
    return out + decoder.close()


def _corpus_entries() -> list[Any]:
    if not CORPUS.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=CORPUS_MISSING))]
    out = []
    for folder in sorted(p.parent for p in CORPUS.glob("*/*/session.jsonl")):
        for session in load_scenario(Path(folder)).sessions:
            for call, item in enumerate(session.entries):
                if isinstance(item, ChunksEntry):
                    out.append(pytest.param(item, id=f"{folder.parent.name}/{folder.name}/{session.file}#{call}"))
    return out


@pytest.mark.parametrize("recorded", _corpus_entries())
def test_round_trip_render_then_decode_gives_the_recorded_chunks(recorded):
    assert decode_stream(render(recorded).stream_bytes(True)) == recorded.chunks


def test_round_trip_of_the_golden_call():
    assert isinstance(THINK_THEN_TOOL, ChunksEntry)
    assert decode_stream(render(THINK_THEN_TOOL).stream_bytes(True)) == THINK_THEN_TOOL.chunks


def test_decoder_error_event_is_an_error_finish():
    raw = render(entry({"kind": "throw", "message": "slow down", "code": "HTTP_529",
                        "chunks": [start(0, "text"), text(0, "a")]})).stream_bytes(True)
    got = decode_stream(raw)
    assert msgspec.to_builtins(got[-1]) == {"type": "finish", "reason": {"kind": "error", "failure": {
        "message": "slow down", "code": "overloaded_error"}}}


def test_decoder_stream_with_no_stop_reason_is_stream_closed():
    raw = render(entry({"kind": "throw", "message": "cut", "code": "STREAM_CLOSED",
                        "chunks": [start(0, "text"), text(0, "a")]})).stream_bytes(True)
    finish = msgspec.to_builtins(decode_stream(raw)[-1])
    assert finish["reason"]["failure"]["code"] == "STREAM_CLOSED"


def test_decoder_reads_real_anthropic_extras():
    # What the API itself sends beyond our renderer: pings, null usage fields, cumulative input in
    # message_delta, content already in a block start, and block types dsh does not record.
    raw = b"".join([
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","type":"message","role":"assistant",'
        b'"content":[],"model":"c","stop_reason":null,"usage":{"input_tokens":9,"cache_creation_input_tokens":null,'
        b'"cache_read_input_tokens":0,"output_tokens":1}}}\n\n',
        b"event: ping\ndata: {\"type\": \"ping\"}\n\n",
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":'
        b'{"type":"redacted_thinking","data":"xx"}}\n\n',
        b'event: content_block_start\ndata: {"type":"content_block_start","index":1,"content_block":'
        b'{"type":"text","text":"Hi"}}\n\n',
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":1,"delta":'
        b'{"type":"text_delta","text":" there"}}\n\n',
        b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"refusal"},'
        b'"usage":{"input_tokens":11,"output_tokens":3}}\n\n',
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    ])
    assert msgspec.to_builtins(decode_stream(raw)) == [
        {"type": "block-start", "index": 0, "blockType": "text"},
        {"type": "text-delta", "index": 0, "text": "Hi"},
        {"type": "text-delta", "index": 0, "text": " there"},
        {"type": "block-end", "index": 0, "block": {"type": "text", "text": "Hi there"}},
        {"type": "usage", "usage": {"inputTokens": 11, "outputTokens": 3, "cacheReadTokens": 0}},
        {"type": "finish", "reason": {"kind": "error", "failure": {"message": "stop_reason refusal",
                                                                   "code": "CONTENT_FILTER"}}},
    ]
