"""Issue 28, the fast lane (`mockllm/hosting/fast_lane.py`): a whole model call is answered by the
connection itself, exactly as aiohttp answers it; anything else, and everything after it on that
connection, is aiohttp's as before."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace

import openai
import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from mockllm.hosting import fast_lane, guard
from mockllm.hosting.fast_lane import LANE, FastHandler
from mockllm.server.fast_calls import Decided, FastCalls
from tests.conftest import http, new_run
from tests.logbuilder import RECORDINGS

HI = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
HEALTH = b"GET /_mockllm/health HTTP/1.1\r\nHost: x\r\n\r\n"
SCENARIOS = b"GET /_mockllm/scenarios HTTP/1.1\r\nHost: x\r\n\r\n"  # aiohttp's: the lane leaves it
ASK = json.dumps({"model": "m", "stream": True,
                  "messages": [{"role": "user", "content": "Greet the replay server in one short sentence."}]}).encode()


@pytest.fixture
def answered(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The status of every response the fast lane wrote to a model or embeddings call (runs created
    and ended through it aside: see `admin_answered`)."""
    seen: list[int] = []
    original, original_admin = fast_lane.write_response, FastCalls._admin
    admin: list[bool] = []

    def write_response(transport: object, response: object) -> bool:
        if not admin:
            seen.append(response.status)  # type: ignore[attr-defined]
        return original(transport, response)  # type: ignore[arg-type]

    def _admin(self: FastCalls, *args: object) -> bool:
        admin.append(True)
        try:
            return original_admin(self, *args)  # type: ignore[arg-type]
        finally:
            admin.pop()

    monkeypatch.setattr(fast_lane, "write_response", write_response)
    monkeypatch.setattr(FastCalls, "_admin", _admin)
    return seen


class Connection:
    """One kept-alive connection, written and read as raw bytes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def answer(self) -> tuple[bytes, dict[str, str], bytes]:
        """The next response on the connection: its status line, headers (names lowercased), body."""
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 10)
        lines = head.decode("latin-1").split("\r\n")[:-2]
        pairs = (line.partition(":") for line in lines[1:])
        headers = {name.strip().lower(): value.strip() for name, _, value in pairs}
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while size := int((await self.reader.readuntil(b"\r\n")).strip(), 16):
                body += (await self.reader.readexactly(size + 2))[:-2]
            await self.reader.readuntil(b"\r\n")
        else:
            body = await self.reader.readexactly(int(headers["content-length"]))
        return lines[0].encode(), headers, body


@pytest.fixture
async def connect() -> AsyncIterator[object]:
    opened: list[asyncio.StreamWriter] = []

    async def open_to(base_url: str) -> Connection:
        host, port = base_url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        opened.append(writer)
        return Connection(reader, writer)

    yield open_to
    for writer in opened:
        writer.close()


def post(path: str, body: bytes, *headers: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: x", "Content-Type: application/json", *headers]
    if not any(h.lower().startswith("transfer-encoding") for h in headers):
        head.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(head) + "\r\n\r\n").encode() + body
    return ("\r\n".join(head) + "\r\n\r\n").encode() + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def comparable(answer: tuple[bytes, dict[str, str], bytes]) -> tuple[bytes, dict[str, str], bytes]:
    """An answer without what differs between two runs of the same call: its date, its run's id."""
    status, headers, body = answer
    return status, {k: v for k, v in headers.items() if k != "date"}, body.replace(b"run-2", b"run-1")


@pytest.mark.parametrize("body", [ASK, ASK.replace(b'"stream": true', b'"stream": false'), b'{"model": "m"}'],
                         ids=["stream", "whole", "refused"])
async def test_the_fast_lane_answers_byte_for_byte_as_aiohttp_does(serve, connect, answered, body):
    server = await serve(RECORDINGS / "text-turn")
    fast_run, slow_run = [(await new_run(server.base_url, "text-turn"))[0] for _ in range(2)]
    fast = await connect(server.base_url)
    fast.writer.write(post(f"/runs/{fast_run}/v1/chat/completions", body))
    fast_answer = await fast.answer()
    assert len(answered) == 1, "the fast lane answered the whole request"
    slow = await connect(server.base_url)  # a chunked body is aiohttp's
    slow.writer.write(post(f"/runs/{slow_run}/v1/chat/completions", body, "Transfer-Encoding: chunked"))
    slow_answer = await slow.answer()
    assert len(answered) == 1, "aiohttp answered the chunked request"
    assert comparable(fast_answer) == comparable(slow_answer)
    assert fast_answer[1]["date"] and fast_answer[1]["server"].startswith("Python/")


async def test_the_health_check_is_the_lanes_and_answered_as_aiohttp_answers_it(serve, connect, answered):
    server = await serve(RECORDINGS / "text-turn")
    await new_run(server.base_url, "text-turn")
    fast, slow = await connect(server.base_url), await connect(server.base_url)
    fast.writer.write(HEALTH)
    fast_answer = await fast.answer()
    assert isinstance(protocol_of(server, fast), fast_lane.LaneConnection)
    slow.writer.write(HEALTH.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))  # aiohttp's
    status, headers, body = await slow.answer()
    assert headers.pop("connection") == "close"
    assert comparable(fast_answer) == comparable((status, headers, body))
    assert json.loads(fast_answer[2]) == {"status": "ok", "scenarios": 1, "broken": 0, "runs": 1}


async def test_a_request_that_arrives_in_pieces_or_pipelined_is_answered_in_order(serve, connect, answered,
                                                                                 monkeypatch):
    server = await serve(RECORDINGS / "spawn-child")
    run, _ = await new_run(server.base_url, "spawn-child")
    heads: list[bytes] = []
    parse = fast_lane._parse_head
    monkeypatch.setattr(fast_lane, "_parse_head", lambda head: heads.append(head) or parse(head))
    connection = await connect(server.base_url)
    whole = post(f"/runs/{run}/v1/chat/completions", HI)
    head, _, body = whole.partition(b"\r\n\r\n")
    connection.writer.write(head + b"\r\n\r\n")  # as SDKs write: the head, then the body
    await connection.writer.drain()
    await asyncio.sleep(0.05)
    connection.writer.write(body[:3])  # a body in pieces
    await connection.writer.drain()
    await asyncio.sleep(0.02)
    connection.writer.write(body[3:] + whole + whole)  # ...then two more requests in the same write
    answers = [await connection.answer() for _ in range(3)]
    # the primary's two recorded calls, then past its end (410), in the order asked
    assert [a[0] for a in answers] == [b"HTTP/1.1 200 OK"] * 2 + [b"HTTP/1.1 410 Gone"]
    assert answered == [200, 200, 410]
    assert heads == [head] * 3, "each head read once, though the first one's body came in two more reads"
    status, state = await http("GET", f"{server.base_url}/_mockllm/runs/{run}")
    assert status == 200 and len(state["journal"]) == 3  # type: ignore[index]


async def test_requests_the_lane_leaves_to_aiohttp_keep_their_order_and_the_lane_reads_on(serve, connect, answered):
    server = await serve(RECORDINGS / "tool-loop")
    run, _ = await new_run(server.base_url, "tool-loop")
    connection = await connect(server.base_url)
    call = post(f"/runs/{run}/v1/chat/completions", HI)
    listed = SCENARIOS
    connection.writer.write(listed)  # aiohttp's, then the lane reads on
    assert "scenarios" in json.loads((await connection.answer())[2])
    connection.writer.write(call)
    assert (await connection.answer())[0] == b"HTTP/1.1 200 OK" and answered == [200]
    connection.writer.write(listed + call)  # pipelined behind aiohttp's answer: aiohttp's too, in order
    answers = [await connection.answer() for _ in range(2)]
    assert "scenarios" in json.loads(answers[0][2]) and answers[1][0] == b"HTTP/1.1 200 OK"
    assert answered == [200]
    connection.writer.write(call + call)  # from then on, aiohttp reads the connection
    assert [(await connection.answer())[0] for _ in range(2)] == [b"HTTP/1.1 200 OK"] * 2
    assert answered == [200]
    status, state = await http("GET", f"{server.base_url}/_mockllm/runs/{run}")
    assert status == 200 and len(state["journal"]) == 4  # type: ignore[index]


async def test_a_late_body_goes_to_aiohttp_whose_body_timeout_answers_it(serve, connect, answered, monkeypatch):
    monkeypatch.setattr(fast_lane, "BODY_WAIT", 0.05)
    monkeypatch.setattr(guard, "BODY_TIMEOUT", 0.3)
    server = await serve(RECORDINGS / "spawn-child")
    run, _ = await new_run(server.base_url, "spawn-child")
    connection = await connect(server.base_url)
    connection.writer.write(post(f"/runs/{run}/v1/chat/completions", HI)[:-5])
    async with asyncio.timeout(5):
        while not isinstance(side := protocol_of(server, connection), FastHandler):
            await asyncio.sleep(0.005)
    assert side._aiohttp, "aiohttp reads the late body at once: the lane waited for it once, not again"
    status, _, _ = await connection.answer()
    assert status.startswith(b"HTTP/1.1 408") and answered == []


async def test_a_kept_alive_connection_is_closed_once_idle_after_a_fast_answer(serve, connect, answered, monkeypatch):
    monkeypatch.setattr(guard, "IDLE_TIMEOUT", 0.4)
    server = await serve(RECORDINGS / "spawn-child")
    run, _ = await new_run(server.base_url, "spawn-child")
    connection = await connect(server.base_url)
    connection.writer.write(post(f"/runs/{run}/v1/chat/completions", HI))
    assert (await connection.answer())[0] == b"HTTP/1.1 200 OK" and answered == [200]
    assert await asyncio.wait_for(connection.reader.read(), 10) == b"", "closed by the server once idle"


async def test_an_answer_that_takes_time_is_decided_by_the_lane_and_written_by_aiohttp(serve, answered):
    """A paced run: the lane decides the call (the run moves on once), aiohttp's handler writes it."""
    server = await serve(RECORDINGS / "text-turn")
    run, base = await new_run(server.base_url, "text-turn", pace="1")
    async with openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=0) as client:
        stream = await client.chat.completions.create(model="m", stream=True, messages=[
            {"role": "user", "content": "Greet the replay server in one short sentence."}])
        text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
    status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
    assert status == 200 and text and answered == []
    assert report["failures"] == [] and report["divergences"] == []  # type: ignore[index]


async def test_a_decision_whose_client_left_before_aiohttp_took_it_ends_as_a_stream_left_early(serve):
    """The lane decided a paced call and handed it to aiohttp, but the client left before aiohttp's
    handler ran: the call's entry is complete in the journal, and its retry gets the same entry."""
    server = await serve(RECORDINGS / "text-turn")
    lane = server.runner.app[LANE]
    run, _ = await new_run(server.base_url, "text-turn", pace="1")
    route = lane.route("POST", f"/runs/{run}/v1/chat/completions")

    def decided() -> Decided:
        handler = SimpleNamespace(decided=None, respond=lambda response: pytest.fail("answered at once"))
        assert lane.answer(route, CIMultiDictProxy(CIMultiDict()), (), ASK, handler) is False
        assert isinstance(handler.decided, Decided)
        return handler.decided

    first = decided()
    lane.forget(first)
    assert first.outcome.record.duration_ms is not None
    retry = decided()
    assert (retry.outcome.record.script, retry.outcome.record.call) == (first.outcome.record.script, 0)


@pytest.mark.parametrize("header", ["X-Long: " + "a" * 9000, "X-Nul: a\x00b", "Bad Name: x", "X-Bare: a\nb"],
                         ids=["long-line", "nul", "name-not-a-token", "bare-lf"])
async def test_a_head_aiohttp_would_refuse_is_aiohttps_to_refuse(serve, connect, answered, header):
    server = await serve(RECORDINGS / "text-turn")
    run, _ = await new_run(server.base_url, "text-turn")
    connection = await connect(server.base_url)
    connection.writer.write(post(f"/runs/{run}/v1/chat/completions", ASK, header))
    status = await asyncio.wait_for(connection.reader.readline(), 10)
    assert status.split()[1] == b"400" and answered == [], status


async def test_an_embeddings_call_is_the_lanes_too_and_answered_as_aiohttp_answers_it(serve, connect, answered):
    """A scenario with no recorded embeddings: the miss (404, noted as a divergence of the run)."""
    server = await serve(RECORDINGS / "text-turn")
    fast_run, slow_run = [(await new_run(server.base_url, "text-turn"))[0] for _ in range(2)]
    body = json.dumps({"model": "m", "input": "Figs grow in the squares of Naples."}).encode()
    fast = await connect(server.base_url)
    fast.writer.write(post(f"/runs/{fast_run}/v1/embeddings", body))
    fast_answer = await fast.answer()
    slow = await connect(server.base_url)
    slow.writer.write(post(f"/runs/{slow_run}/v1/embeddings", body, "Transfer-Encoding: chunked"))
    slow_answer = await slow.answer()
    assert answered == [404] and comparable(fast_answer) == comparable(slow_answer)
    assert b"unrecorded_embedding" in fast_answer[2]
    for run in (fast_run, slow_run):
        status, report = await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}")
        assert status == 200 and len(report["divergences"]) == 1  # type: ignore[index]


def lane_connections(server: object) -> fast_lane.LaneConnections:
    """The lane's connections of a server started by `serve` (those not yet aiohttp's)."""
    (site,) = server.runner.sites  # type: ignore[attr-defined]
    connections = site.connections
    assert isinstance(connections, fast_lane.LaneConnections)
    return connections


async def test_a_connection_becomes_aiohttps_only_at_a_request_the_lane_does_not_answer(serve, connect, answered):
    """A suite's connection carries one model call: it never costs aiohttp's connection machinery;
    nor does an xdist worker's admin connection, whose first request is a health check. The first
    request the lane leaves to aiohttp makes the connection aiohttp's, and the lane still answers
    the calls after it."""
    server = await serve(RECORDINGS / "tool-loop")
    run, _ = await new_run(server.base_url, "tool-loop")
    connection = await connect(server.base_url)
    call = post(f"/runs/{run}/v1/chat/completions", HI)
    connection.writer.write(call)
    assert (await connection.answer())[0] == b"HTTP/1.1 200 OK" and answered == [200]
    assert isinstance(protocol_of(server, connection), fast_lane.LaneConnection)
    connection.writer.write(HEALTH)  # the lane's too
    assert json.loads((await connection.answer())[2])["status"] == "ok"
    assert isinstance(protocol_of(server, connection), fast_lane.LaneConnection)
    connection.writer.write(SCENARIOS)
    assert "scenarios" in json.loads((await connection.answer())[2])
    assert isinstance(protocol_of(server, connection), fast_lane.FastHandler)
    connection.writer.write(call)
    assert (await connection.answer())[0] == b"HTTP/1.1 200 OK" and answered == [200, 200]


def protocol_of(server: object, connection: Connection) -> object:
    """The server's side of `connection`: a LaneConnection, or aiohttp's connection."""
    address = connection.writer.get_extra_info("sockname")
    sides = [*lane_connections(server).open, *server.runner.server.connections]  # type: ignore[attr-defined]
    found = [side for side in sides if side.transport.get_extra_info("peername") == address]
    assert len(found) == 1, found
    return found[0]


async def test_a_paced_call_on_a_new_connection_is_decided_once_and_written_by_aiohttp(serve, connect, answered):
    """The lane decides it on a connection of its own, which becomes aiohttp's with the decision."""
    server = await serve(RECORDINGS / "text-turn")
    run, _ = await new_run(server.base_url, "text-turn", pace="1")
    connection = await connect(server.base_url)
    connection.writer.write(post(f"/runs/{run}/v1/chat/completions", ASK))
    status, _, body = await connection.answer()
    assert status == b"HTTP/1.1 200 OK" and b"[DONE]" in body and answered == []
    status, state = await http("GET", f"{server.base_url}/_mockllm/runs/{run}")
    assert status == 200 and len(state["journal"]) == 1, state  # type: ignore[index]


async def test_runs_are_created_and_ended_through_the_lane_as_aiohttp_answers_them(serve, connect, monkeypatch):
    """The two admin calls of every test: the same bytes as aiohttp's handlers write (a chunked
    request is aiohttp's), an unknown run's 404 too."""
    written: list[int] = []
    original = fast_lane.write_response
    monkeypatch.setattr(fast_lane, "write_response", lambda t, r: written.append(r.status) or original(t, r))
    server = await serve(RECORDINGS / "text-turn")
    create = json.dumps({"scenario": "text-turn"}).encode()
    answers: dict[str, list[tuple[bytes, dict[str, str], bytes]]] = {"lane": [], "aiohttp": []}
    for way, extra in (("lane", ()), ("aiohttp", ("Transfer-Encoding: chunked",))):
        connection = await connect(server.base_url)
        connection.writer.write(post("/_mockllm/runs", create, *extra))
        answers[way].append(await connection.answer())
        run = json.loads(answers[way][0][2])["run"]
        for target in (f"/_mockllm/runs/{run}", "/_mockllm/runs/run-none"):
            head = f"DELETE {target} HTTP/1.1\r\nHost: x\r\n" + "".join(f"{h}\r\n" for h in extra) + "\r\n"
            connection.writer.write(head.encode() + (b"0\r\n\r\n" if extra else b""))
            answers[way].append(await connection.answer())
    assert written == [201, 200, 404], "the lane answered its three, aiohttp the chunked three"
    assert [a[0] for a in answers["lane"]] == [b"HTTP/1.1 201 Created", b"HTTP/1.1 200 OK", b"HTTP/1.1 404 Not Found"]
    assert [comparable(a) for a in answers["lane"]] == [comparable(a) for a in answers["aiohttp"]]
    assert json.loads(answers["lane"][0][2])["base_url"] == "http://x/runs/run-1/v1"


async def test_a_runs_end_and_the_next_runs_creation_in_one_write_are_the_lanes_in_order(serve, connect,
                                                                                        monkeypatch):
    """As the plugin sends them (the next test's run created behind this test's run's end): both
    answered by the lane, from one read, in the order sent."""
    written: list[int] = []
    original = fast_lane.write_response
    monkeypatch.setattr(fast_lane, "write_response", lambda t, r: written.append(r.status) or original(t, r))
    server = await serve(RECORDINGS / "text-turn")
    create = post("/_mockllm/runs", json.dumps({"scenario": "text-turn"}).encode())
    connection = await connect(server.base_url)
    connection.writer.write(create)
    first = json.loads((await connection.answer())[2])["run"]
    connection.writer.write(f"DELETE /_mockllm/runs/{first} HTTP/1.1\r\nHost: x\r\n\r\n".encode() + create)
    ended, created = await connection.answer(), await connection.answer()
    assert json.loads(ended[2])["run"] == first and ended[0] == b"HTTP/1.1 200 OK"
    assert created[0] == b"HTTP/1.1 201 Created" and json.loads(created[2])["run"] != first
    assert written == [201, 200, 201]
    assert isinstance(protocol_of(server, connection), fast_lane.LaneConnection)


def test_the_lanes_header_view_reads_headers_as_aiohttps_dict_does():
    raw = ((b"Host", b"x"), (b"X-Session", b"first"), (b"x-session", b"second"), (b"X-Bytes", b"\xff\xfeok"),
           (b"Empty", b""))
    view = fast_lane.HeaderView(raw, tuple(n.lower() for n, _ in raw))
    aiohttps = CIMultiDictProxy(CIMultiDict((n.decode("latin-1"), v.decode("utf-8", "surrogateescape"))
                                            for n, v in raw))
    for name in ("host", "HOST", "x-SESSION", "X-Bytes", "empty", "absent", "ünïcode"):
        assert view.get(name) == aiohttps.get(name), name
        assert (name in view) == (name in aiohttps), name
    assert view["X-SESSION"] == "first" and len(view) == len(aiohttps)
    assert {name.lower() for name in view} == {name.lower() for name in aiohttps}
    with pytest.raises(KeyError):
        view["absent"]
    # As the lane builds it: with the names `_parse_head` lowercased while it read the head.
    parsed = fast_lane._parse_head(b"POST /v1 HTTP/1.1\r\n" + b"\r\n".join(n + b": " + v for n, v in raw))
    assert parsed is not None
    _, _, parsed_raw, names, _, _ = parsed
    assert parsed_raw == raw and names == tuple(n.lower() for n, _ in raw)
    lane_view = fast_lane.HeaderView(parsed_raw, names)
    for name in ("host", "HOST", "x-SESSION", "X-Bytes", "empty", "absent", "ünïcode"):
        assert lane_view.get(name) == aiohttps.get(name), name


async def test_a_run_that_records_is_ended_by_aiohttps_handler(serve, connect, monkeypatch):
    """Its recording is written as it ends, which takes time: the lane leaves its end to aiohttp."""
    server = await serve(RECORDINGS / "text-turn")
    run, _ = await new_run(server.base_url, "text-turn")
    ended: list[str] = []
    live = server.runner.app[LANE].server.live  # type: ignore[attr-defined]
    monkeypatch.setattr(type(live), "records", lambda self, r: True)
    original_end = type(live).end

    async def end(self: object, r: object, discard: str | None = None) -> object:
        ended.append(r.id)  # type: ignore[attr-defined]
        return await original_end(self, r, discard)

    monkeypatch.setattr(type(live), "end", end)
    connection = await connect(server.base_url)
    connection.writer.write(f"DELETE /_mockllm/runs/{run} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert (await connection.answer())[0] == b"HTTP/1.1 200 OK" and ended == [run]


async def test_the_lanes_connections_are_closed_when_the_server_stops(serve, connect, answered):
    server = await serve(RECORDINGS / "spawn-child")
    run, _ = await new_run(server.base_url, "spawn-child")
    connection = await connect(server.base_url)
    connection.writer.write(post(f"/runs/{run}/v1/chat/completions", HI))
    assert (await connection.answer())[0] == b"HTTP/1.1 200 OK" and answered == [200]
    await server.close()
    assert await asyncio.wait_for(connection.reader.read(), 10) == b""
