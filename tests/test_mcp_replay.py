"""The MCP replay rules on a log built in memory (no socket): what each JSON-RPC message gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mockllm.errors import RecordingError
from mockllm.mcp.log import Exchange, Header, McpLog, encode, read_log
from mockllm.mcp.replay import McpReplay, McpRun
from mockllm.mcp.spec import parse_all, parse_mcp
from mockllm.replay.normalize import BUILTIN, masked


def request(number: int, method: str, params: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": number, "method": method}
    if params is not None:
        message["params"] = params
    return message


def exchange(seq: int, method: str, params: Any, result: Any, **fields: Any) -> Exchange:
    sent = request(100 + seq, method, params)
    return Exchange(seq=seq, time=seq, request=sent, response=[{"jsonrpc": "2.0", "id": sent["id"], "result": result}],
                    line=seq + 2, **fields)


def tool(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments, "_meta": {"progressToken": 7}}


def counter_log() -> McpLog:
    return McpLog(Path("mcp.counter.jsonl"), Header(server="counter"), [
        exchange(0, "initialize", {"protocolVersion": "2025-11-25"}, {"protocolVersion": "2025-11-25"},
                 session_id="abc", mcp_session=1),
        exchange(1, "tools/list", {}, {"tools": [{"name": "count"}]}, mcp_session=1),
        exchange(2, "tools/call", tool("count", step=2), {"n": 2}, mcp_session=1, session="a"),
        exchange(3, "tools/call", tool("count", step=2), {"n": 4}, mcp_session=1, session="b"),
        exchange(4, "resources/read", {"uri": "memo://x"}, {"contents": ["x"]}, mcp_session=1),
        exchange(5, "tools/call", tool("search", q="run 3f1c2a9e-0000-4000-8000-1234567890ab"), {"hits": 1}),
    ])


def result(replay: McpReplay, message: dict[str, Any], **kwargs: Any) -> Any:
    answer = replay.answer(message, **kwargs)
    (reply,) = [m for m in answer.messages if "method" not in m]
    assert reply["id"] == message["id"]  # the caller's id, whatever the recorded one was
    return reply.get("result", reply.get("error"))


def test_the_handshake_and_lists_as_often_as_asked() -> None:
    replay = McpReplay(counter_log())
    for number in range(3):
        assert result(replay, request(number, "initialize", {"protocolVersion": "2025-11-25"})) == {
            "protocolVersion": "2025-11-25"}
        assert result(replay, request(number, "tools/list", {"_meta": {"x": 1}})) == {"tools": [{"name": "count"}]}
    assert replay.session_id(replay.answer(request(9, "initialize", {}))) == "abc"
    assert result(replay, request(1, "ping")) == {}
    # A handshake-era recording answers the 2026 probe as its server would: method not found, no divergence.
    assert result(replay, request(2, "server/discover"))["code"] == -32601 and not replay.misses


def test_a_repeated_call_takes_the_next_answer_then_misses() -> None:
    replay = McpReplay(counter_log())
    assert result(replay, request(1, "tools/call", tool("count", step=2))) == {"n": 2}
    assert result(replay, request(2, "tools/call", tool("count", step=2))) == {"n": 4}
    third = result(replay, request(3, "tools/call", tool("count", step=2)))
    assert third["code"] == -32001
    assert "recorded 2 time(s) in mcp.counter.jsonl; this is one call more than were recorded" in third["message"]
    # Reads repeat their last answer.
    assert [result(replay, request(n, "resources/read", {"uri": "memo://x"})) for n in range(3)] == [
        {"contents": ["x"]}] * 3
    assert len(replay.misses) == 1 and replay.misses[0].call == 2


def test_the_calling_session_takes_its_own_recorded_answer_first() -> None:
    replay = McpReplay(counter_log())
    assert result(replay, request(1, "tools/call", tool("count", step=2)), session="b") == {"n": 4}
    assert result(replay, request(2, "tools/call", tool("count", step=2)), session="a") == {"n": 2}


def test_a_miss_names_the_nearest_recorded_call() -> None:
    replay = McpReplay(counter_log())
    error = result(replay, request(1, "tools/call", tool("count", step=3)))
    assert error["message"] == ('mockllm: tools/call count {"step":3}: no recorded call matches it; nearest recorded '
                                'call: tools/call count {"step":2} (mcp.counter.jsonl:4)')
    assert error["data"]["nearest"] == 'tools/call count {"step":2} (mcp.counter.jsonl:4)'
    miss = replay.misses[0]
    assert (miss.what, miss.file, miss.server) == ('tools/call count {"step":3}', "mcp.counter.jsonl", "counter")


def test_arguments_are_normalised_as_model_inputs_are() -> None:
    strict = McpReplay(counter_log())
    other_uuid = tool("search", q="run 9a9a9a9a-1111-4111-8111-abcdefabcdef")
    assert result(strict, request(1, "tools/call", other_uuid))["code"] == -32001
    normalised = McpRun({"counter": counter_log()}, lambda text: masked(text, BUILTIN)).server("counter")
    assert normalised is not None and result(normalised, request(1, "tools/call", other_uuid)) == {"hits": 1}


def test_progress_notifications_carry_the_callers_token() -> None:
    log = counter_log()
    streamed = log.exchanges[2]
    streamed.response = [{"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 7,
                                                                                          "progress": 1}},
                         *streamed.response]
    streamed.sse = True
    answer = McpReplay(log).answer(request(5, "tools/call", {**tool("count", step=2), "_meta": {"progressToken": 42}}))
    assert answer.sse and answer.messages[0]["params"] == {"progressToken": 42, "progress": 1}
    assert answer.messages[1]["id"] == 5


def test_notifications_and_answers_are_accepted() -> None:
    replay = McpReplay(counter_log())
    assert replay.answer({"jsonrpc": "2.0", "method": "notifications/initialized"}).status == 202
    assert replay.answer({"jsonrpc": "2.0", "id": 3, "result": {}}).status == 202
    assert replay.calls == []


def test_the_file_round_trips_and_a_broken_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "mcp.counter.jsonl"
    log = counter_log()
    path.write_bytes(encode(log.header) + b"".join(encode(e) for e in log.exchanges) + b'{"type":"later"}\n')
    again = read_log(path)
    assert [e.request for e in again.exchanges] == [e.request for e in log.exchanges]
    assert again.exchanges[0].session_id == "abc" and again.exchanges[1].line == 3
    path.write_bytes(encode(log.header) + b"{oops\n")
    with pytest.raises(RecordingError, match=r"mcp.counter.jsonl:2: not JSON"):
        read_log(path)
    path.write_bytes(encode(Header(server="other")))
    with pytest.raises(RecordingError, match=r":1: header names server 'other'"):
        read_log(path)
    path.write_bytes(b'{"type":"mcp/header","server":"counter","version":1}\n')
    with pytest.raises(RecordingError, match="version 1"):
        read_log(path)


def test_mcp_options() -> None:
    assert parse_mcp("a=http://h/mcp").url == "http://h/mcp"
    assert parse_mcp("b=stdio:python 'my server.py' --x").command == ("python", "my server.py", "--x")
    for bad in ("nourl", "a=ftp://x", "a b=http://x", "a=stdio:"):
        with pytest.raises(ValueError, match="--mcp"):
            parse_mcp(bad)
    with pytest.raises(ValueError, match="more than once"):
        parse_all(["a=http://x", "a=http://y"])
