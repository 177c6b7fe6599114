"""`ChatCompletions.render`: script entries to OpenAI chat-completions SSE bytes (pure, no server)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from mockllm.script.entries import Entry
from mockllm.wire.chat.dialect import DONE, ChatCompletions
from mockllm.wire.envelope import Envelope
from mockllm.wire.render import read
from mockllm.wire.reply import Reply
from tests.conftest import sse_payloads

ENVELOPE = Envelope("chatcmpl-1", 1700000000, "m")
HEAD = b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m",'


def entry(data: dict[str, Any]) -> Entry:
    return msgspec.convert(data, Entry)  # type: ignore[arg-type]


def chunks(*items: dict[str, Any]) -> Entry:
    return entry({"kind": "chunks", "chunks": list(items)})


def render(data: Entry) -> Reply:
    return ChatCompletions().render(read(data), ENVELOPE)


def deltas(raw: bytes) -> list[dict[str, Any]]:
    return [p["choices"][0]["delta"] for p in sse_payloads(raw) if isinstance(p, dict) and p.get("choices")]


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


SMALL = chunks(start(0, "text"), text(0, "Hel"), text(0, "lo"), end(0, type="text", text="Hello"),
               use(inputTokens=3, outputTokens=2), fin("stop"))


def test_small_text_call_golden_bytes():
    reply = render(SMALL)
    assert reply.status == 200
    assert reply.ending == "done"
    assert reply.stream_bytes(include_usage=True) == (
        HEAD + b'"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"logprobs":null,'
        b'"finish_reason":null}]}\n\n'
        + HEAD + b'"choices":[{"index":0,"delta":{"content":"lo"},"logprobs":null,"finish_reason":null}]}\n\n'
        + HEAD + b'"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}\n\n'
        + HEAD + b'"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}\n\n'
        + b"data: [DONE]\n\n"
    )


@pytest.mark.parametrize("include_usage", [True, False])
def test_stream_bytes_are_every_event_in_order_and_built_once(include_usage: bool) -> None:
    reply = render(SMALL)
    after = [reply.usage_frame] if include_usage else []
    assert reply.stream_bytes(include_usage) == b"".join([*reply.frames, *after, DONE])
    assert reply.stream_bytes(include_usage) is reply.stream_bytes(include_usage)  # built once


def test_stream_bytes_of_short_streams() -> None:
    finish_only = render(chunks(fin("stop")))
    assert finish_only.stream_bytes(False) == finish_only.frames[0] + DONE
    empty = Reply(status=200, frames=(), usage_frame=None, ending="cut", closing=(), body=b"")
    assert empty.stream_bytes(True) == b""


def test_usage_chunk_only_when_asked():
    reply = render(SMALL)
    without = reply.stream_bytes(include_usage=False)
    assert b'"usage"' not in without
    assert without.endswith(HEAD + b'"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}\n\n'
                            + DONE)


def test_every_frame_ends_with_a_blank_line():
    reply = render(chunks(start(0, "reasoning"), reasoning(0, "a\n"), reasoning(0, "b\n\n"), end(0, type="reasoning"),
                          start(1, "text"), text(1, "x\n"), end(1, type="text"), use(inputTokens=1), fin()))
    for frame in (*reply.frames, reply.usage_frame):
        assert frame is not None
        assert frame.startswith(b"data: {")
        assert frame.endswith(b"}\n\n")
        assert frame.count(b"\n") == 2  # newlines inside strings are JSON-escaped: one event per frame


def test_role_only_on_the_first_delta():
    reply = render(chunks(start(0, "reasoning"), reasoning(0, "think"), end(0, type="reasoning", text="think"),
                          start(1, "text"), text(1, "a"), text(1, "b"), end(1, type="text", text="ab"), fin()))
    got = deltas(reply.stream_bytes(False))
    assert [d.get("role") for d in got] == ["assistant", None, None, None]
    assert got[0] == {"role": "assistant", "reasoning_content": "think"}
    assert got[1:3] == [{"content": "a"}, {"content": "b"}]


def test_role_rides_on_the_finish_when_there_is_no_delta():
    got = deltas(render(chunks(fin("stop"))).stream_bytes(False))
    assert got == [{"role": "assistant"}]


def test_reasoning_is_sent_as_reasoning_content():
    reply = render(chunks(start(0, "reasoning"), reasoning(0, "hmm "), reasoning(0, "ok"),
                          end(0, type="reasoning", text="hmm ok"), start(1, "text"), text(1, "done"),
                          end(1, type="text", text="done"), fin()))
    got = deltas(reply.stream_bytes(False))
    assert [d.get("reasoning_content") for d in got[:2]] == ["hmm ", "ok"]
    assert all("content" not in d for d in got[:2])
    body = json.loads(reply.body)
    assert body["choices"][0]["message"]["reasoning_content"] == "hmm ok"
    assert body["choices"][0]["message"]["content"] == "done"


def test_tool_call_identity_only_on_first_fragment_and_index_is_the_call_ordinal():
    # Block indexes 1 and 3 (text blocks between): wire indexes must be 0 and 1, the k-th call.
    reply = render(chunks(
        start(0, "text"), text(0, "Let me look."), end(0, type="text", text="Let me look."),
        start(1, "tool-call"), tool(1, "", "call_a", "read"), tool(1, '{"p":', "call_a", "read"),
        tool(1, '"x"}', "call_a", "read"), end(1, type="tool-call", id="call_a", name="read", arguments='{"p":"x"}'),
        start(2, "text"), text(2, "and"), end(2, type="text", text="and"),
        start(3, "tool-call"), tool(3, '{"q":1}', "call_b", "grep"),
        end(3, type="tool-call", id="call_b", name="grep", arguments='{"q":1}'),
        fin("tool-calls"),
    ))
    calls = [d["tool_calls"] for d in deltas(reply.stream_bytes(False)) if "tool_calls" in d]
    assert calls == [
        [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "read", "arguments": ""}}],
        [{"index": 0, "function": {"arguments": '{"p":'}}],
        [{"index": 0, "function": {"arguments": '"x"}'}}],
        [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "grep", "arguments": '{"q":1}'}}],
    ]
    message = json.loads(reply.body)["choices"][0]["message"]
    assert message["tool_calls"] == [
        {"id": "call_a", "type": "function", "function": {"name": "read", "arguments": '{"p":"x"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "grep", "arguments": '{"q":1}'}},
    ]
    assert message["content"] == "Let me look.and"


def test_tool_call_name_taken_from_block_end_when_deltas_lack_it():
    reply = render(chunks(start(0, "tool-call"), tool(0, "{}", "call_n", name=None),
                          end(0, type="tool-call", id="call_n", name="ls", arguments="{}"), fin("tool-calls")))
    first = deltas(reply.stream_bytes(False))[0]
    assert first == {"role": "assistant", "content": None, "tool_calls": [
        {"index": 0, "id": "call_n", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}


@pytest.mark.parametrize(("block", "expected"), [
    ({"type": "text", "text": "whole text"}, {"content": "whole text"}),
    ({"type": "reasoning", "text": "whole thought"}, {"reasoning_content": "whole thought"}),
    ({"type": "tool-call", "id": "call_w", "name": "ls", "arguments": {"dir": "."}},
     {"content": None, "tool_calls": [{"index": 0, "id": "call_w", "type": "function",
                                       "function": {"name": "ls", "arguments": '{"dir":"."}'}}]}),
], ids=["text", "reasoning", "tool-call-object-arguments"])
def test_block_with_no_deltas_is_sent_as_one_delta(block, expected):
    reply = render(chunks(start(0, block["type"]), end(0, **block), fin()))
    assert deltas(reply.stream_bytes(False)) == [{"role": "assistant", **expected}, {}]


def test_block_without_deltas_keeps_its_position_between_other_blocks():
    reply = render(chunks(start(0, "reasoning"), end(0, type="reasoning", text="R"),
                          start(1, "text"), text(1, "T"), end(1, type="text", text="T"), fin()))
    assert deltas(reply.stream_bytes(False))[:2] == [{"role": "assistant", "reasoning_content": "R"}, {"content": "T"}]


@pytest.mark.parametrize(("reason", "expected"), [
    ({"kind": "stop"}, "stop"),
    ({"kind": "tool-calls"}, "tool_calls"),
    ({"kind": "max-tokens"}, "length"),
    ({"kind": "error", "code": "EMPTY_RESPONSE", "message": "empty"}, "stop"),
    ({"kind": "error", "failure": {"code": "EMPTY_RESPONSE", "message": "empty"}}, "stop"),
    ({"kind": "error", "code": "CONTENT_FILTER", "message": "blocked"}, "content_filter"),
    ({"kind": "error", "failure": {"code": "Weird_Code", "message": "x"}}, "weird_code"),
], ids=["stop", "tool-calls", "max-tokens", "empty-response", "empty-response-nested", "other-code",
        "other-code-nested"])
def test_finish_reason_mapping(reason, expected):
    reply = render(chunks(start(0, "text"), text(0, "x"), end(0, type="text", text="x"), fin(**reason)))
    assert reply.status == 200
    events = sse_payloads(reply.stream_bytes(False))
    assert events[-1] == "[DONE]"
    assert events[-2]["choices"][0]["finish_reason"] == expected
    assert [e["choices"][0]["finish_reason"] for e in events[:-2]] == [None]
    assert json.loads(reply.body)["choices"][0]["finish_reason"] == expected


def test_empty_response_is_a_stream_with_no_content_ending_in_stop():
    reply = render(chunks(fin("error", failure={"code": "EMPTY_RESPONSE", "message": "no content"})))
    assert sse_payloads(reply.stream_bytes(False)) == [
        {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": "m",
         "choices": [{"index": 0, "delta": {"role": "assistant"}, "logprobs": None, "finish_reason": "stop"}]},
        "[DONE]",
    ]


@pytest.mark.parametrize("reason", [
    {"kind": "error", "code": "CONTEXT_WINDOW_EXCEEDED", "message": "too long: 200k"},
    {"kind": "error", "failure": {"code": "CONTEXT_WINDOW_EXCEEDED", "message": "too long: 200k"}},
], ids=["flat", "nested"])
def test_context_window_exceeded_is_http_400(reason):
    reply = render(chunks(start(0, "text"), text(0, "x"), end(0, type="text", text="x"), fin(**reason)))
    assert reply.status == 400
    assert json.loads(reply.body) == {"error": {"message": "too long: 200k", "type": "invalid_request_error",
                                                "param": None, "code": "context_length_exceeded"}}


@pytest.mark.parametrize(("counts", "expected"), [
    ({"inputTokens": 10, "outputTokens": 4},
     {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}),
    ({"inputTokens": 10, "outputTokens": 4, "cacheReadTokens": 90},
     {"prompt_tokens": 100, "completion_tokens": 4, "total_tokens": 104,
      "prompt_tokens_details": {"cached_tokens": 90}}),
    ({"inputTokens": 10, "outputTokens": 4, "reasoningTokens": 3},
     {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14,
      "completion_tokens_details": {"reasoning_tokens": 3}}),
    ({"inputTokens": 53, "outputTokens": 33, "cacheReadTokens": 1280, "cacheWriteTokens": 7, "reasoningTokens": 31},
     {"prompt_tokens": 1333, "completion_tokens": 33, "total_tokens": 1366,
      "prompt_tokens_details": {"cached_tokens": 1280}, "completion_tokens_details": {"reasoning_tokens": 31}}),
    ({"inputTokens": 5, "outputTokens": 1, "cacheReadTokens": 0},
     {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6, "prompt_tokens_details": {"cached_tokens": 0}}),
], ids=["plain", "cache-read", "reasoning", "everything-cache-write-dropped", "zero-cache-read-recorded"])
def test_usage_object_mapping(counts, expected):
    reply = render(chunks(start(0, "text"), text(0, "x"), end(0, type="text", text="x"), use(**counts), fin()))
    assert reply.usage_frame is not None
    frame = sse_payloads(reply.usage_frame)[0]
    assert frame["choices"] == []
    assert frame["usage"] == expected
    assert json.loads(reply.body)["usage"] == expected


def test_no_usage_recorded_means_no_usage_chunk():
    reply = render(chunks(start(0, "text"), text(0, "x"), end(0, type="text", text="x"), fin()))
    assert reply.usage_frame is None
    assert b"usage" not in reply.stream_bytes(include_usage=True)
    assert "usage" not in json.loads(reply.body)


@pytest.mark.parametrize(("throw", "status", "error_type"), [
    ({"code": "AUTH"}, 401, "authentication_error"),
    ({"code": "RATE_LIMIT"}, 429, "rate_limit_error"),
    ({"code": "INVALID_REQUEST"}, 400, "invalid_request_error"),
    ({"code": "SERVER"}, 500, "server_error"),
    ({"code": "HTTP_503"}, 503, "server_error"),
    ({"code": "HTTP_418"}, 418, "invalid_request_error"),
    ({"code": "SOMETHING_ELSE"}, 500, "server_error"),
    ({"code": "AUTH", "status": 403}, 403, "permission_error"),
    ({"code": "HTTP_503", "status": 502}, 502, "server_error"),
    ({}, 500, "server_error"),
], ids=["auth", "rate-limit", "invalid-request", "server", "http-503", "http-418", "other", "explicit-status-wins",
        "explicit-status-beats-http-code", "default-code"])
def test_throw_without_chunks_is_an_http_error(throw, status, error_type):
    reply = render(entry({"kind": "throw", "message": "provider said no", **throw}))
    assert reply.status == status
    assert reply.frames == ()
    assert json.loads(reply.body) == {"error": {"message": "provider said no", "type": error_type, "param": None,
                                                "code": throw.get("code", "SERVER")}}


def test_throw_with_chunks_streams_them_then_an_error_event_and_no_done():
    reply = render(entry({"kind": "throw", "message": "overloaded", "code": "HTTP_529",
                          "chunks": [start(0, "text"), text(0, "par"), text(0, "tial")]}))
    assert reply.status == 200
    assert reply.ending == "error"
    raw = reply.stream_bytes(include_usage=True)
    events = sse_payloads(raw)
    assert [e["choices"][0]["delta"] for e in events[:2]] == [{"role": "assistant", "content": "par"},
                                                              {"content": "tial"}]
    assert events[2] == {"error": {"message": "overloaded", "type": "server_error", "param": None,
                                   "code": "HTTP_529"}}
    assert len(events) == 3
    assert b"[DONE]" not in raw


def test_stream_closed_is_a_bare_cut():
    reply = render(entry({"kind": "throw", "message": "socket closed", "code": "STREAM_CLOSED",
                          "chunks": [start(0, "text"), text(0, "half")]}))
    assert reply.status == 200
    assert reply.ending == "cut"
    raw = reply.stream_bytes(include_usage=True)
    assert deltas(raw) == [{"role": "assistant", "content": "half"}]
    assert b"error" not in raw
    assert b"[DONE]" not in raw


def test_throw_with_chunks_answers_a_non_streaming_request_with_the_http_error():
    reply = render(entry({"kind": "throw", "message": "rate limited", "code": "RATE_LIMIT",
                          "chunks": [start(0, "text"), text(0, "x")]}))
    assert reply.body_status == 429
    assert json.loads(reply.body)["error"]["code"] == "RATE_LIMIT"


def test_hang_streams_one_partial_delta_then_holds():
    reply = render(entry({"kind": "hang", "readyFile": ".ready"}))
    assert reply.status == 200
    assert reply.ending == "hold"
    assert reply.hold_when_not_streaming is True
    raw = reply.stream_bytes(include_usage=True)
    assert deltas(raw) == [{"role": "assistant", "content": "partial"}]
    assert b"[DONE]" not in raw
    assert b"finish_reason\":null" in raw


def test_aborted_finish_streams_its_chunks_then_holds():
    reply = render(chunks(start(0, "text"), text(0, "start"), fin("aborted")))
    assert reply.ending == "hold"
    assert reply.hold_when_not_streaming is True
    assert b"[DONE]" not in reply.stream_bytes(True)
    assert deltas(reply.stream_bytes(True))[0] == {"role": "assistant", "content": "start"}


def test_non_stream_body_shape():
    reply = render(chunks(start(0, "reasoning"), reasoning(0, "r1"), reasoning(0, "r2"),
                          end(0, type="reasoning", text="r1r2"), start(1, "text"), text(1, "Hi "), text(1, "there"),
                          end(1, type="text", text="Hi there"),
                          use(inputTokens=7, outputTokens=3, cacheReadTokens=1), fin("max-tokens")))
    assert json.loads(reply.body) == {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi there", "reasoning_content": "r1r2"},
                     "logprobs": None, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 8, "completion_tokens": 3, "total_tokens": 11,
                  "prompt_tokens_details": {"cached_tokens": 1}},
    }


def test_non_stream_body_with_only_tool_calls_has_null_content():
    reply = render(chunks(start(0, "tool-call"), tool(0, "{}", "call_z", "ls"),
                          end(0, type="tool-call", id="call_z", name="ls", arguments="{}"), fin("tool-calls")))
    message = json.loads(reply.body)["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"][0]["id"] == "call_z"


def test_non_stream_body_with_nothing_has_empty_string_content():
    reply = render(chunks(fin("stop")))
    assert json.loads(reply.body)["choices"][0]["message"] == {"role": "assistant", "content": ""}


@pytest.mark.parametrize("content", ["You are the chef.", [{"type": "text", "text": "You are the chef."}]],
                         ids=["string", "parts"])
def test_a_developer_message_is_the_system_prompt(content: Any) -> None:
    from mockllm.wire.chat.request import decode_request
    from mockllm.wire.request import system_text

    body = {"messages": [{"role": "developer", "content": content}, {"role": "user", "content": "Oslo"}]}
    request = decode_request(json.dumps(body).encode())
    assert [m.role for m in request.messages] == ["system", "user"]
    assert system_text(request.messages) == "You are the chef."
