"""MCP servers recorded and replayed beside the model (issue 27), with the official `mcp` SDK on
both sides: a FastMCP counter server (its counter drifts: a replay must give the recorded values),
its 2.x client in both protocol eras (`mode="auto"`: 2026-07-28's `server/discover`, no session;
`mode="legacy"`: the 2025 `initialize` handshake with `Mcp-Session-Id`, as 1.x clients speak it),
over Streamable HTTP and stdio, recorded through `mockllm record --mcp` and replayed with the
server stopped."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from mcp import Client, MCPError, StdioServerParameters

import mockllm
from mockllm.mcp.log import read_log
from mockllm.record.command import RecordOptions, start_recorder
from mockllm.replay.report import check
from tests.logbuilder import text_call, write_sessions
from tests.loopback import start_on_loopback
from tests.mcp_helpers import STDIO_COMMAND, counter_server, mcp_client, use_counter

SECRET = "Bearer sk-mcp-secret-123"


@pytest.fixture(scope="module")
def counter() -> Any:
    """One counter server for the module's recordings (its start is the slow part); replays never reach
    it (the test that proves a replay offline stops its own)."""
    with counter_server() as url:
        yield url


async def record(out: Path, mcp: str, *modes: str, model: bool = True) -> list[dict[str, Any]]:
    """Record one `use_counter` pass per client mode through `mockllm record --mcp counter=…`, and
    (`model`) a model session beside it."""
    recorder = await start_recorder(RecordOptions("http://127.0.0.1:9/v1", out, port=0, mcp=(f"counter={mcp}",)))
    try:
        seen = []
        for mode in modes:
            async with mcp_client(f"{recorder.base_url}/mcp/counter", mode,
                                  {"Authorization": SECRET, "x-mockllm-session": f"agent-{mode}"}) as client:
                seen.append(await use_counter(client))
    finally:
        await recorder.close()
    if model:
        write_sessions(out, {"p": [text_call("done")]})
    return seen


async def test_record_writes_both_eras_and_no_header(tmp_path: Path, counter: str) -> None:
    seen = await record(tmp_path / "s", counter, "auto", "legacy")
    counts = [c["result"] for s in seen for c in s["counts"]]
    assert counts == list(range(counts[0], counts[0] + 8, 2))  # the counter drifts: what replay must undo
    text = (tmp_path / "s" / "mcp.counter.jsonl").read_text()
    assert "sk-mcp-secret" not in text and "uthorization" not in text
    log = read_log(tmp_path / "s" / "mcp.counter.jsonl")
    assert log.header.server == "counter" and log.header.transport == "http"
    methods = [e.method for e in log.exchanges if e.http == "POST"]
    assert methods[0] == "server/discover" and "initialize" in methods and "notifications/initialized" in methods
    initialize = next(e for e in log.exchanges if e.method == "initialize")
    assert initialize.session_id and initialize.mcp_session == 1 and initialize.sse
    modern = [e for e in log.exchanges if e.protocol == "2026-07-28"]
    assert modern and all(e.mcp_session is None and e.session == "agent-auto" for e in modern)
    legacy = [e for e in log.exchanges if e.mcp_session == 1]
    assert {e.session for e in legacy} == {"agent-legacy"}
    assert sorted(e.order for e in legacy) == list(range(len(legacy)))  # arrival order in the session
    assert {e.http for e in legacy} == {"POST", "GET", "DELETE"}  # the server's stream and the session's end


async def test_replay_in_both_eras_run_after_run_at_every_base(tmp_path: Path) -> None:
    with counter_server() as url:
        recorded = await record(tmp_path / "s", url, "auto", "legacy")
    async with mockllm.AsyncServer(tmp_path / "s") as server:
        for attempt in range(2):  # runs are independent: each replays the counter from its start
            run = await server.run("s")
            root = run.base_url.removesuffix("/v1")
            replayed = []
            for mode in ("auto", "legacy"):
                async with mcp_client(f"{root}/mcp/counter", mode, {"x-mockllm-session": f"agent-{mode}"}) as client:
                    replayed.append(await use_counter(client))
            assert replayed == recorded, attempt
            report = await run.end()
            assert report.problems(require_consumed=False) == []
            assert [c.what for c in report.mcp if c.method == "tools/call"][:2] == [
                'tools/call count {"step":2}', 'tools/call count {"step":2}']
        # The scenario's default run and the single-scenario root serve it too.
        for root in (f"{server.url}/scenarios/s", server.url):
            async with mcp_client(f"{root}/mcp/counter", "legacy") as client:
                assert (await client.call_tool("echo", {"text": "hi"})).content[0].text == "echo: hi"  # type: ignore[union-attr]


async def test_a_changed_call_is_an_error_naming_the_nearest_and_a_divergence(tmp_path: Path, counter: str) -> None:
    await record(tmp_path / "s", counter, "auto")
    async with mockllm.AsyncServer(tmp_path / "s") as server:
        run = await server.run("s")
        root = run.base_url.removesuffix("/v1")
        async with mcp_client(f"{root}/mcp/counter") as client:
            with pytest.raises(MCPError) as changed:
                await client.call_tool("count", {"step": 3})
            assert 'tools/call count {"step":3}' in str(changed.value)
            assert 'nearest recorded call: tools/call count {"step":2} (mcp.counter.jsonl:' in str(changed.value)
            await client.call_tool("count", {"step": 2})
            await client.call_tool("count", {"step": 2})
            with pytest.raises(MCPError, match=r"recorded 2 time\(s\).*one call more than were recorded"):
                await client.call_tool("count", {"step": 2})  # the counter was asked twice when recorded
        report = await run.end()
        problems = report.problems(require_consumed=False)
        assert len(problems) == 2 and all(p.startswith("diverged: session mcp.counter.jsonl") for p in problems)
        assert 'count {"step":3}' in problems[0]
        with pytest.raises(AssertionError, match="nearest recorded call"):
            check(report, require_consumed=False)


async def test_a_recording_of_mcp_servers_only_is_a_scenario(tmp_path: Path, counter: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from mockllm.cli.main import main

    recorded = await record(tmp_path / "tools", counter, "legacy", model=False)
    assert sorted(p.name for p in (tmp_path / "tools").iterdir()) == ["mcp.counter.jsonl"]
    async with mockllm.AsyncServer(tmp_path) as server:
        async with await server.run("tools") as run, mcp_client(run.mcp_url("counter"), "legacy") as client:
            assert [await use_counter(client)] == recorded
        report = await run.end()
        assert report.consumed and report.problems() == []
    assert main(["check", str(tmp_path / "tools")]) == 0
    assert main(["inspect", str(tmp_path)]) == 0
    assert "MCP server counter <- mcp.counter.jsonl" in capsys.readouterr().out


async def test_unknown_server_and_bad_bodies_are_clear_errors(tmp_path: Path, counter: str) -> None:
    await record(tmp_path / "s", counter, "auto")
    async with mockllm.AsyncServer(tmp_path / "s") as server, aiohttp.ClientSession() as http:
        async with http.post(f"{server.url}/mcp/nope", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}) as r:
            assert r.status == 404 and "its MCP servers: counter" in (await r.json())["error"]["message"]
        async with http.post(f"{server.url}/mcp/counter", data=b"{not json") as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == -32700
        async with http.get(f"{server.url}/mcp/counter") as r:  # recorded sessionless: no server stream
            assert r.status == 405
        async with http.post(f"{server.url}/runs/nope/mcp/counter", json={"jsonrpc": "2.0", "id": 1,
                                                                          "method": "ping"}) as r:
            assert r.status == 404 and "unknown run 'nope'" in (await r.json())["error"]["message"]


async def test_authorization_is_forwarded_never_written(tmp_path: Path) -> None:
    seen: list[str | None] = []

    async def upstream(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        body = await request.json()
        return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": {"echo": body["params"]}})

    app = web.Application()
    app.router.add_post("/mcp", upstream)
    runner, root = await start_on_loopback(app)
    recorder = await start_recorder(RecordOptions("http://127.0.0.1:9/v1", tmp_path / "s", port=0,
                                                  mcp=(f"api={root}/mcp",), redact=("hunter2",)))
    try:
        async with aiohttp.ClientSession() as http, http.post(
                f"{recorder.base_url}/mcp/api", headers={"Authorization": SECRET},
                json={"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "login", "arguments": {"password": "hunter2"}}}) as r:
            assert (await r.json())["result"]["echo"]["arguments"] == {"password": "hunter2"}
    finally:
        await recorder.close()
        await runner.cleanup()
    assert seen == [SECRET]
    text = (tmp_path / "s" / "mcp.api.jsonl").read_text()
    assert "sk-mcp" not in text and "hunter2" not in text and "[REDACTED]" in text


async def test_stdio_server_recorded_and_replayed_through_the_bridge(tmp_path: Path) -> None:
    out = tmp_path / "s"
    recorder = await start_recorder(RecordOptions("http://127.0.0.1:9/v1", out, port=0,
                                                  mcp=(f"counter=stdio:{STDIO_COMMAND}",)))
    try:
        recorded = []
        for mode in ("legacy", "auto"):
            async with mcp_client(f"{recorder.base_url}/mcp/counter", mode) as client:
                recorded.append(await use_counter(client))
    finally:
        await recorder.close()
    assert recorded[0]["counts"] == [{"result": 2}, {"result": 4}]  # the handshake's own process
    assert read_log(out / "mcp.counter.jsonl").header.transport == "stdio"
    write_sessions(out, {"p": [text_call("done")]})
    async with mockllm.AsyncServer(out) as server:
        run = await server.run("s")
        url = run.mcp_url("counter")
        bridge = StdioServerParameters(command=sys.executable, args=["-m", "mockllm", "mcp-bridge", url],
                                       env={"PYTHONPATH": str(Path(__file__).parents[1])})
        replayed = []
        for mode in ("legacy", "auto"):
            async with Client(bridge, mode=mode) as client:
                replayed.append(await use_counter(client))
        assert replayed == recorded
        report = await run.end()
        assert report.problems(require_consumed=False) == []


def test_check_and_inspect_name_a_broken_mcp_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mockllm.cli.main import main

    out = write_sessions(tmp_path / "s", {"p": [text_call("done")]})
    (out / "mcp.counter.jsonl").write_text('{"type":"mcp/header","server":"counter","version":0}\n'
                                           '{"type":"mcp/exchange","seq":0,"time":1,"request":{"id":1}}\n')
    assert main(["check", str(out)]) == 1
    err = capsys.readouterr()
    assert "mcp.counter.jsonl:2" in err.out + err.err and "JSON-RPC 2.0" in err.out + err.err
    (out / "mcp.counter.jsonl").write_text(json.dumps({"type": "mcp/header", "server": "counter", "version": 0}) + "\n"
                                           + json.dumps({"type": "mcp/exchange", "seq": 0, "time": 1, "request": {
                                               "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                               "params": {"name": "count", "arguments": {"step": 2}}},
                                               "response": [{"jsonrpc": "2.0", "id": 1, "result": {}}]}) + "\n")
    assert main(["check", str(out)]) == 0
    assert main(["inspect", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "mcp.counter.jsonl" in shown and 'tools/call count {"step":2}' in shown


class OneX:
    """The wire of an `mcp` 1.x client (1.9-1.2x), spoken with raw aiohttp: `initialize` offering
    2025-06-18, then `notifications/initialized` and every request with the session id and the agreed
    version as headers, SSE or JSON answers alike, DELETE at the end."""

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http, self.url, self.ids = http, url, 0
        self.headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}

    async def send(self, method: str, params: dict[str, Any] | None = None, *, notify: bool = False) -> Any:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if not notify:
            self.ids += 1
            message["id"] = self.ids
        async with self.http.post(self.url, json=message, headers=self.headers) as r:
            if "mcp-session-id" in r.headers and method == "initialize":
                self.headers["mcp-session-id"] = r.headers["mcp-session-id"]
            if notify:
                assert r.status == 202
                return None
            text = await r.text()
            if r.headers["Content-Type"].startswith("text/event-stream"):
                text = [line[len("data: "):] for line in text.splitlines() if line.startswith("data: ")][-1]
            answer = json.loads(text)
            assert answer["id"] == message["id"]
            return answer.get("result", answer.get("error"))

    async def session(self) -> list[Any]:
        init = await self.send("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                              "clientInfo": {"name": "mcp", "version": "0.1.0"}})
        self.headers["mcp-protocol-version"] = init["protocolVersion"]
        await self.send("notifications/initialized", notify=True)
        said = [init["protocolVersion"], [t["name"] for t in (await self.send("tools/list"))["tools"]]]
        for _ in range(2):
            said.append((await self.send("tools/call", {"name": "count", "arguments": {"step": 5}}))["content"])
        async with self.http.delete(self.url, headers=self.headers) as r:
            said.append(r.status)
        return said


async def test_a_1x_client_is_recorded_and_replayed_as_it_speaks(tmp_path: Path, counter: str) -> None:
    out = tmp_path / "s"
    recorder = await start_recorder(RecordOptions("http://127.0.0.1:9/v1", out, port=0, mcp=(f"counter={counter}",)))
    try:
        async with aiohttp.ClientSession() as http:
            recorded = await OneX(http, f"{recorder.base_url}/mcp/counter").session()
    finally:
        await recorder.close()
    assert recorded[0] == "2025-06-18" and recorded[-1] == 200
    async with mockllm.AsyncServer(out) as server, aiohttp.ClientSession() as http:
        run = await server.run("s")
        assert await OneX(http, run.mcp_url("counter")).session() == recorded
        assert (await run.end()).problems() == []


async def test_the_bridge_records_a_stdio_agent_too(tmp_path: Path, counter: str) -> None:
    """An agent that starts its MCP servers as commands records through the bridge as well: the
    2026-07-28 requests get the headers the SDK's HTTP client would have sent."""
    out = tmp_path / "s"
    recorder = await start_recorder(RecordOptions("http://127.0.0.1:9/v1", out, port=0, mcp=(f"counter={counter}",)))
    try:
        bridge = StdioServerParameters(command=sys.executable, env={"PYTHONPATH": str(Path(__file__).parents[1])},
                                       args=["-m", "mockllm", "mcp-bridge", f"{recorder.base_url}/mcp/counter",
                                             "--header", "x-mockllm-session:stdio-agent"])
        async with Client(bridge) as client:
            assert (await client.call_tool("echo", {"text": "via"})).content[0].text == "echo: via"  # type: ignore[union-attr]
    finally:
        await recorder.close()
    log = read_log(out / "mcp.counter.jsonl")
    assert {e.method for e in log.exchanges} == {"server/discover", "tools/list", "tools/call"}
    assert {(e.protocol, e.session) for e in log.exchanges} == {("2026-07-28", "stdio-agent")}
