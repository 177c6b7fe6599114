"""The Python API: `mockllm.Server` (a background thread) and `mockllm.AsyncServer` (the running
loop), driven with the real openai SDK over real loopback sockets."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

import openai
import pytest

import mockllm
from mockllm.errors import NotAScenarioError
from mockllm.replay.report import RunReport

ROOT = Path(__file__).resolve().parents[1]
RECORDINGS = ROOT / "recordings"
USER = [{"role": "user", "content": "go"}]
# These tests drive the bundled recordings with a stand-in prompt: what they check is routing and
# consumption, so a divergence is reported, not failed (tests/test_compare.py and test_plugin.py
# check that it fails by default).
WARN = {"divergence": "warn"}


OPEN: list[openai.OpenAI] = []


@pytest.fixture(autouse=True)
def close_clients() -> Any:
    """Close every client a test made: an open connection pool is a ResourceWarning (an error here)."""
    yield
    while OPEN:
        OPEN.pop().close()


def client(run: mockllm.Run | mockllm.AsyncRun, session: str) -> openai.OpenAI:
    c = openai.OpenAI(base_url=run.base_url, api_key="unused", max_retries=0, default_headers=run.headers(session))
    OPEN.append(c)
    return c


def stream_text(c: openai.OpenAI) -> str:
    stream = c.chat.completions.create(model="m", messages=USER, stream=True)  # type: ignore[arg-type]
    return "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)


def port_is_free(port: int) -> bool:
    """Whether `port` can be listened on again (a probe bind: connecting would leave the server a
    half-accepted connection to trip over as it stops)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind; TIME_WAIT is not "in use"
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.fixture(scope="module")
def srv() -> Any:
    with mockllm.Server(RECORDINGS, **WARN) as server:
        yield server


def test_server_listens_on_a_free_loopback_port_and_leaving_frees_it() -> None:
    with mockllm.Server(RECORDINGS / "text-turn", **WARN) as server:
        assert server.url.startswith("http://127.0.0.1:")
        port = int(server.url.rsplit(":", 1)[1])
        assert port != 8080 and not port_is_free(port)
        assert server.scenarios == ["text-turn"]
    assert port_is_free(port)
    with pytest.raises(mockllm.MockllmError, match="not running"):
        server.url  # noqa: B018


def test_a_tool_loop_replays_through_the_sdk_and_is_consumed(srv: mockllm.Server) -> None:
    with srv.run("tool-loop") as run:
        assert run.base_url.endswith("/v1") and f"/runs/{run.id}/" in run.base_url
        c = client(run, "agent")
        calls = [c.chat.completions.create(model="m", messages=USER) for _ in range(5)]  # type: ignore[arg-type]
        assert [r.choices[0].finish_reason for r in calls] == ["tool_calls", "tool_calls", "stop", "tool_calls", "stop"]
        assert calls[4].choices[0].message.content == "It prints: hi"
        run.assert_consumed()
        report = run.report()
        assert (report.consumed, report.failures) == (True, [])
        sessions = [(s.file, s.live_id, s.served, s.remaining) for s in report.sessions]
        assert sessions == [("session.jsonl", "agent", 5, 0)]
    assert run.end() is run.end()  # ended by the `with`; the final report is kept


def test_a_fork_tree_routes_each_session_to_its_own_script(srv: mockllm.Server) -> None:
    run = srv.run("fork-child")
    parent, child = client(run, "parent"), client(run, "child")
    assert stream_text(parent) == "OK"
    stream_text(parent)  # the call that forks
    assert stream_text(child) == "TANGERINE"  # its own answer, not the parent's seeded "OK"
    assert stream_text(parent) == "PARENT_DONE"
    report = run.end()
    assert report.consumed and not report.problems()
    assert [(s.kind, s.live_id) for s in report.sessions] == [("primary", "parent"), ("fork", "child")]


def test_runs_are_independent(srv: mockllm.Server) -> None:
    first, second = srv.run("text-turn"), srv.run("text-turn")
    assert first.id != second.id
    assert stream_text(client(first, "a")) == stream_text(client(second, "a")) == "Hello from the recorded model!"
    first.assert_consumed()
    second.assert_consumed()


def test_calls_left_unconsumed_fail_assert_consumed_with_a_readable_report(srv: mockllm.Server) -> None:
    run = srv.run("tool-loop")
    client(run, "agent").chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    run.assert_no_failures()  # nothing went wrong, it only stopped early
    with pytest.raises(mockllm.RunNotClean) as caught:
        run.assert_consumed()
    assert isinstance(caught.value, AssertionError)
    message = str(caught.value)
    assert message.splitlines()[0] == f"mockllm run {run.id} of scenario 'tool-loop': 1 problem(s)"
    assert "unconsumed: session session.jsonl (primary, recorded id d3cfb7e5-52ba-5a05-a3d1-f9cbfffe86cd) " \
           "served call 0 (0-based); calls 1-4 (0-based) of 5 not requested" in message
    assert "session.jsonl (primary): 1/5, live id agent" in message
    run.end()


def test_a_call_past_the_end_is_410_and_fails_the_run(srv: mockllm.Server) -> None:
    run = srv.run("text-turn")
    c = client(run, "agent")
    stream_text(c)
    with pytest.raises(openai.APIStatusError) as caught:
        stream_text(c)
    assert caught.value.status_code == 410
    with pytest.raises(mockllm.RunNotClean) as failed:
        run.assert_no_failures()
    assert ("failure script_exhausted in session session.jsonl (live id agent), call 1 (0-based): run "
            in str(failed.value))
    report = run.end()
    assert report.consumed and [f.code for f in report.failures] == ["script_exhausted"]


def test_a_new_run_for_an_unknown_scenario_is_refused_with_the_servers_reason(srv: mockllm.Server) -> None:
    with pytest.raises(mockllm.AdminError) as caught:
        srv.run("no-such")
    assert (caught.value.status, caught.value.code) == (404, "unknown_run")
    assert "tool-loop" in caught.value.message  # it lists what is loaded


def write_broken(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "session.jsonl").write_text("this is not json\n")
    return folder


def test_a_broken_scenario_named_raises_at_once(tmp_path: Path) -> None:
    with pytest.raises(mockllm.ServerStartError, match=r"(?s)no valid scenario.*session\.jsonl:1"):
        mockllm.Server(write_broken(tmp_path / "broken")).start()
    (tmp_path / "suite").mkdir()
    write_broken(tmp_path / "suite" / "broken")
    (tmp_path / "suite" / "good").symlink_to(RECORDINGS / "text-turn")
    with mockllm.Server(tmp_path / "suite") as server, pytest.raises(mockllm.AdminError) as caught:
        server.run("broken")
    assert (caught.value.status, caught.value.code) == (422, "scenario_invalid")
    assert "session.jsonl:1" in caught.value.message


def test_a_bad_path_raises_at_once(tmp_path: Path) -> None:
    with pytest.raises(NotAScenarioError, match="not a folder"):
        mockllm.Server(tmp_path / "missing").start()


def test_a_port_in_use_raises_with_the_reason() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = mockllm.Server(RECORDINGS / "text-turn", port=port)
        with pytest.raises(mockllm.ServerStartError, match=f"cannot listen on 127.0.0.1:{port}"):
            server.start()
        server.stop()  # nothing to stop: harmless


def test_options_are_serve_option_names_and_reach_the_server() -> None:
    with pytest.raises(TypeError, match=r"unknown serve option.*speeed.*known: host, port"):
        mockllm.Server(speeed=2)
    with mockllm.Server(RECORDINGS / "spawn-child", headerless="anonymous") as server:
        assert server.options.headerless == "anonymous"
        run = server.run("spawn-child")
        bare = openai.OpenAI(base_url=run.base_url, api_key="unused", max_retries=0)
        OPEN.append(bare)
        bare.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
        bare.chat.completions.create(model="m", messages=[{"role": "user", "content": "other"}])  # type: ignore[arg-type]
        # Anonymous: both header-less calls are one session, so the primary took two calls.
        primary = run.end().sessions[0]
        assert (primary.served, primary.live_id) == (2, "anonymous")


def test_leaving_the_context_releases_a_held_stream() -> None:
    server = mockllm.Server(RECORDINGS / "hang-sidecar").start()
    run = server.run("hang-sidecar")
    c = client(run, "agent")
    stream_text(c)  # call 1 answers; call 2 is the hang
    got_prefix = threading.Event()
    outcome: list[object] = []

    def hold() -> None:
        try:
            for chunk in c.chat.completions.create(model="m", messages=USER, stream=True):  # type: ignore[arg-type]
                if chunk.choices and chunk.choices[0].delta.content:
                    got_prefix.set()
            outcome.append("ended")
        except Exception as exc:  # the server went away mid-stream: what a real client sees
            outcome.append(exc)

    reader = threading.Thread(target=hold)
    reader.start()
    assert got_prefix.wait(10)
    server.stop()
    reader.join(10)
    assert not reader.is_alive() and outcome


async def test_async_server_has_the_same_shape() -> None:
    async with mockllm.AsyncServer(RECORDINGS, session_headers=("x-agent",), **WARN) as server:
        port = int(server.url.rsplit(":", 1)[1])
        async with await server.run("tool-loop") as run:
            aclient = openai.AsyncOpenAI(base_url=run.base_url, api_key="unused", max_retries=0,
                                         default_headers={"x-agent": "a1"})
            for _ in range(4):
                await aclient.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
            report = await run.report()
            assert [(s.live_id, s.served) for s in report.sessions] == [("a1", 4)]
            with pytest.raises(mockllm.RunNotClean,
                               match=r"served calls 0-3 \(0-based\); call 4 \(0-based\) of 5 not requested"):
                await run.assert_consumed()
            last = await aclient.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
            assert last.choices[0].message.content == "It prints: hi"
            await run.assert_consumed()
            await aclient.close()
        assert (await run.end()).consumed
    assert port_is_free(port)


async def test_async_server_refuses_a_broken_suite(tmp_path: Path) -> None:
    with pytest.raises(mockllm.ServerStartError, match=r"session\.jsonl:1"):
        await mockllm.AsyncServer(write_broken(tmp_path / "b")).start()


REPORTS = [
    pytest.param({"run": "run-1", "scenario": "s", "consumed": True, "failures": [], "sessions": [
        {"id": "p", "file": "session.jsonl", "kind": "primary", "live_id": "a", "served": 2, "entries": 2,
         "remaining": 0}]}, [], id="clean"),
    pytest.param({"run": "run-2", "scenario": "s", "consumed": False, "failures": [], "sessions": [
        {"id": "p", "file": "session.jsonl", "kind": "primary", "live_id": "a", "served": 2, "entries": 2,
         "remaining": 0},
        {"id": "c", "file": "session.1.jsonl", "kind": "fork", "live_id": None, "served": 0, "entries": 1,
         "remaining": 1}]},
        ["unconsumed: session session.1.jsonl (fork, recorded id c) never called; call 0 (0-based) of 1 not requested"],
        id="child-never-called"),
    pytest.param({"run": "run-3", "scenario": "s", "consumed": True, "failures": [
        {"code": "unrecorded_session", "message": "every session is bound", "session": "z", "call": 0}],
        "sessions": []}, ["failure unrecorded_session in live session z, call 0 (0-based): every session is bound"],
        id="unrecorded-session"),
]


@pytest.mark.parametrize(("body", "problems"), REPORTS)
def test_report_problems(body: dict[str, Any], problems: list[str]) -> None:
    report = RunReport.from_json(body)
    assert report.problems() == problems
    assert report.state == body
    assert ("1 problem(s)" in report.describe()) == bool(problems)


def test_root_url_is_the_base_for_clients_that_add_their_own_version_path(srv: mockllm.Server) -> None:
    """google-genai and the ollama client (sync, as most scripts use them) on `run.root_url`."""
    import ollama
    from google import genai

    with srv.run("tool-loop") as run:
        assert run.root_url + "/v1" == run.base_url == run.anthropic_base_url + "/v1"
        with ollama.Client(host=run.root_url, headers=run.headers("agent")) as local:
            first = local.chat(model="m", messages=USER, stream=False)
        assert [c.function.name for c in first.message.tool_calls or ()] == ["bash"]
        gemini = genai.Client(api_key="x", http_options={"base_url": run.root_url, "headers": run.headers("agent")})
        second = gemini.models.generate_content(model="m", contents="list it")
        assert [p.function_call.name for p in second.candidates[0].content.parts if p.function_call] == [
            "bash", "read_file"]
        gemini.close()
        assert [s.served for s in run.report().sessions] == [2]
