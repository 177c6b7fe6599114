"""`mockllm.Server(process=True)`: the same API with the server in a process of its own (the pytest
plugin's default), driven with the real openai SDK over loopback; and the kept-alive admin connection."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest

import mockllm
from mockllm import process, process_child
from mockllm.errors import NotAScenarioError
from mockllm.hosting.admin_client import AdminConnection
from mockllm.hosting.log_rate import limit_repeats
from mockllm.options import in_process
from mockllm.shared_server import SharedServer, attach
from tests.server_children import server_children, threads_started
from tests.test_api import RECORDINGS, USER, WARN, port_is_free

ROOT = Path(__file__).resolve().parents[1]


def answered(url: str) -> bool:
    """Whether anything answers `url`'s health address (a refused connection: nothing listens)."""
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                f"{url}/_mockllm/health", timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError):
        return False


@pytest.fixture(scope="module")
def srv() -> Any:
    with mockllm.Server(RECORDINGS, process=True, **WARN) as server:
        yield server


def test_a_tool_loop_replays_from_a_server_process(srv: mockllm.Server) -> None:
    assert srv.suite is None  # the child holds the suite
    assert "tool-loop" in srv.scenarios and "text-turn" in srv.scenarios
    with srv.run("tool-loop") as run, openai.OpenAI(base_url=run.base_url, api_key="x", max_retries=0,
                                                     default_headers=run.headers("agent")) as client:
        calls = [client.chat.completions.create(model="m", messages=USER) for _ in range(5)]  # type: ignore[arg-type]
        assert [r.choices[0].finish_reason for r in calls] == ["tool_calls", "tool_calls", "stop", "tool_calls", "stop"]
        assert calls[4].choices[0].message.content == "It prints: hi"
        run.assert_consumed()
    assert run.end().consumed
    assert "mockllm-server" not in {t.name for t in threading.enumerate()}  # no server thread here


def test_admin_errors_and_reports_come_back_as_in_thread(srv: mockllm.Server) -> None:
    with pytest.raises(mockllm.AdminError) as caught:
        srv.run("no-such-scenario")
    assert caught.value.status == 404
    run = srv.run("text-turn")
    assert "<html" in run.report_html().lower()
    report = run.end(discard="not used")
    assert not report.consumed


def test_stopping_frees_the_port_and_ends_the_process() -> None:
    server = mockllm.Server(RECORDINGS / "text-turn", process=True).start()
    url = server.url
    port = int(url.rsplit(":", 1)[1])
    assert server.scenarios == ["text-turn"] and not port_is_free(port)
    server.stop()
    assert port_is_free(port) and not answered(url)
    server.stop()  # idempotent


def test_the_test_process_does_not_import_the_childs_side() -> None:
    # The parent's side is imported as every plugin session starts; the child's dataclasses and
    # server code (`mockllm.process_child`) are the server process's alone.
    probe = "import sys, mockllm.process; print('mockllm.process_child' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_stopping_is_woken_by_the_childs_exit_not_by_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every session's end waits for its server's child: `Popen.wait(timeout)` would see the exit only
    # at its next look (it sleeps 0.5, 1, 2 ... 50 ms between them).
    naps: list[float] = []
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    monkeypatch.setattr(time, "sleep", naps.append)
    process._wait_for_exit(child, 60)
    assert child.returncode == 0 and naps == []


def test_a_child_that_does_not_exit_in_time_is_a_timeout() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            process._wait_for_exit(child, 0.2)
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


def test_a_process_holding_over_1024_descriptors_starts_and_stops_its_server() -> None:
    # select() refuses descriptors numbered 1024 or more; a big suite's process may hold that many
    # files, and the server's pipe and its process descriptor are opened after them.
    held: list[int] = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        server = mockllm.Server(RECORDINGS / "text-turn", process=True).start()
        url = server.url
        assert answered(url)
        server.stop()
        assert not answered(url)
    finally:
        for fd in held:
            os.close(fd)


@pytest.mark.parametrize(("path", "error", "match"), [
    ("no-such-folder", NotAScenarioError, "not a folder"),
    ("suite", mockllm.ServerStartError, "no valid scenario"),
], ids=["missing-folder", "nothing-valid"])
def test_start_errors_are_raised_in_the_caller(tmp_path: Path, path: str, error: type[Exception], match: str) -> None:
    (tmp_path / "suite" / "broken").mkdir(parents=True)
    (tmp_path / "suite" / "broken" / "session.jsonl").write_text("not json\n")
    with pytest.raises(error, match=match):
        mockllm.Server(tmp_path / path, process=True).start()


def test_a_port_in_use_is_a_start_error() -> None:
    with mockllm.Server(RECORDINGS / "text-turn", process=True) as first:
        port = int(first.url.rsplit(":", 1)[1])
        with pytest.raises(mockllm.ServerStartError, match=f"cannot listen on 127.0.0.1:{port}"):
            mockllm.Server(RECORDINGS / "text-turn", process=True, port=port).start()


def test_a_parent_that_dies_leaves_no_server_behind(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import os, mockllm
        server = mockllm.Server({str(RECORDINGS / "text-turn")!r}, process=True).start()
        print(server.url, flush=True)
        os._exit(0)  # no stop(), no atexit: as a killed test run ends
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env,
                          check=True)
    url = done.stdout.strip()
    deadline = time.monotonic() + 30
    while answered(url) and time.monotonic() < deadline:
        time.sleep(0.05)  # the child notices its closed stdin; nothing to wait on from here
    assert not answered(url)


def test_the_childs_log_records_reach_the_parents_loggers_by_the_next_admin_call(
        caplog: pytest.LogCaptureFixture) -> None:
    def served() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "call 0 (0-based): 200" in r.getMessage()]

    with caplog.at_level(logging.INFO, logger="mockllm"), \
            mockllm.Server(RECORDINGS / "text-turn", process=True, log_level="info", **WARN) as server, \
            server.run("text-turn") as run, \
            openai.OpenAI(base_url=run.base_url, api_key="x", max_retries=0) as client:
        client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
        run.report()  # the admin call after the call: the call's record is logged here once it is answered
        assert [(r.name, r.levelno) for r in served()] == [("mockllm", logging.INFO)], caplog.text


def test_a_process_server_starts_no_thread_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not even one that only waits: a second thread makes every malloc and free of the process take a
    lock (glibc's), for good: 4 % more CPU for the test's own code (mockllm.process._ChildLogs)."""
    started = threads_started(monkeypatch)
    process.start_spare()  # as the pytest plugin starts it, taken by the launch below
    with mockllm.Server(RECORDINGS / "text-turn", process=True, log_level="debug", **WARN) as server, \
            server.run("text-turn") as run, \
            openai.OpenAI(base_url=run.base_url, api_key="x", max_retries=0) as client:
        client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
        assert run.report().consumed
    assert started == []


def test_a_child_that_logs_more_than_a_pipe_holds_between_admin_calls_keeps_serving(
        caplog: pytest.LogCaptureFixture) -> None:
    """Its log is a file: a pipe read only at admin calls would fill (64 KiB) and stop the server,
    blocked on writing a line, in the middle of a test's calls."""
    session = "s" * 7_500  # in each call's log line; the server logs ten alike per 10 s (log_rate): 75 KB
    with caplog.at_level(logging.INFO, logger="mockllm"), \
            mockllm.Server(RECORDINGS / "text-turn", process=True, log_level="info", **WARN) as server, \
            server.run("text-turn") as run, \
            openai.OpenAI(base_url=run.base_url, api_key="x", max_retries=0, timeout=10,
                          default_headers=run.headers(session)) as client:
        for _ in range(12):  # the first is served; each after it is refused (script exhausted), and logged
            with contextlib.suppress(openai.APIStatusError):
                client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
        run.report()
    relayed = [r.getMessage() for r in caplog.records if session in r.getMessage()]
    assert len(relayed) == 10 and sum(map(len, relayed)) > 64 * 1024


def test_relayed_records_pass_a_repeat_limit_as_records_of_their_own(caplog: pytest.LogCaptureFixture) -> None:
    """A server in a thread puts a repeat limit on its process's mockllm loggers (log_rate), which
    tells messages apart by their format string: relayed, each record is its own message, and 15
    different ones in a row all pass (under one shared format, the limit kept 10)."""
    limit_repeats()
    tag = f"relayed-{time.monotonic_ns()}"
    with caplog.at_level(logging.INFO, logger="mockllm"):
        for n in range(15):
            record = {"name": "mockllm", "level": logging.INFO, "message": f"{tag} {n}"}
            process._relay_line(json.dumps(record).encode())
    assert [r.getMessage() for r in caplog.records if tag in r.getMessage()] == [f"{tag} {n}" for n in range(15)]


def test_admin_calls_share_one_kept_alive_connection_and_survive_its_close(srv: mockllm.Server) -> None:
    connection = srv._connection
    assert isinstance(connection, AdminConnection)
    srv.run("text-turn").end(discard="not used")
    first = connection._socket
    assert first is not None
    srv.run("text-turn").end(discard="not used")
    assert connection._socket is first  # the same socket, kept alive
    first.shutdown(socket.SHUT_RDWR)  # a dead connection, as a server's keep-alive timeout leaves it
    srv.run("text-turn").end(discard="not used")  # sent again on a fresh connection
    assert connection._socket is not first


@pytest.fixture
def spare() -> Any:
    """A spare server process, started by the test; the process it is (stopped after the test if
    nothing took it)."""
    before = server_children()
    process.start_spare()
    (pid,) = server_children() - before
    yield pid
    process.drop_spare()


def test_a_spare_is_the_next_launch_and_serves(spare: int) -> None:
    before = server_children()
    with mockllm.Server(RECORDINGS / "text-turn", process=True, **WARN) as server, server.run("text-turn") as run, \
            openai.OpenAI(base_url=run.base_url, api_key="x", max_retries=0) as client:
        assert server_children() == before, "no process started: the spare is the server"
        reply = client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
        assert reply.choices[0].message.content == "Hello from the recorded model!"
    assert spare not in server_children(), "stopped with the server"


def test_a_spare_takes_the_listening_socket_its_launch_bound(spare: int) -> None:
    """The xdist controller's server: the address is known before the spare even has its orders."""
    before = server_children()
    shared = SharedServer(RECORDINGS / "text-turn", dict(WARN))
    try:
        assert server_children() == before
        server = attach(shared.url, RECORDINGS / "text-turn", dict(WARN))
        with server.run("text-turn") as run, openai.OpenAI(base_url=run.base_url, api_key="x", max_retries=0) as client:
            reply = client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
            assert reply.choices[0].message.content == "Hello from the recorded model!"
        server.stop()
        assert shared.failure is None
    finally:
        shared.stop()


def test_a_spare_from_another_environment_is_stopped_and_not_used(spare: int,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A conftest that sets a variable after the spare started: the server must see it."""
    monkeypatch.setenv("MOCKLLM_TEST_CHANGED", "1")
    with mockllm.Server(RECORDINGS / "text-turn", process=True, **WARN):
        assert spare not in server_children(), "the spare was stopped, and another process serves"
        assert process._spare is None


def test_a_spare_nothing_takes_is_stopped_at_once_even_while_it_loads_ahead(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    folder = many_scenarios(tmp_path, 200)  # loading it ahead takes a while: the drop does not wait for it
    before = server_children()
    process.start_spare((folder, in_process(**WARN)))
    (pid,) = server_children() - before
    child = process._spare
    assert child is not None
    process.drop_spare()
    assert pid not in server_children() and child.proc.returncode is not None
    assert "Traceback" not in capfd.readouterr().err


def test_a_spare_whose_parent_closes_the_channel_with_no_orders_ends_without_a_word(
        capfd: pytest.CaptureFixture[str]) -> None:
    """What a parent that dies does: its end of the channel closes."""
    process.start_spare()
    child, process._spare = process._spare, None
    assert child is not None
    child.control.close()
    assert child.proc.wait(timeout=process.STOP_TIMEOUT) == 0
    child.stop()  # what is left of it here: its pipes
    assert "Traceback" not in capfd.readouterr().err


def many_scenarios(root: Path, count: int) -> Path:
    suite = root / "many"
    for n in range(count):
        shutil.copytree(RECORDINGS / "text-turn", suite / f"s{n}")
    return suite.resolve()


DEBUG = {**WARN, "log_level": "debug"}
AHEAD = "as loaded before the orders came"


def test_a_spare_serves_what_it_loaded_ahead_when_the_launch_orders_just_that(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="mockllm")
    folder = many_scenarios(tmp_path, 3)
    process.start_spare((folder, in_process(**DEBUG)))
    with mockllm.Server(folder, process=True, **DEBUG) as server, server.run("s1") as run, \
            openai.OpenAI(base_url=run.base_url, api_key="x", max_retries=0) as client:
        reply = client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
        assert reply.choices[0].message.content == "Hello from the recorded model!"
    assert AHEAD in caplog.text  # logged before it listened; relayed by the time it stopped


@pytest.mark.parametrize("change", ["options", "folder"])
def test_a_spare_loads_again_when_the_launch_orders_something_else(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, change: str) -> None:
    """Other options than it loaded with, or a recording rewritten since: what the launch orders is
    served, whenever the change came (before the spare loaded, or after)."""
    caplog.set_level(logging.DEBUG, logger="mockllm")
    folder = many_scenarios(tmp_path, 3)
    headerless = "anonymous" if change == "options" else "conversation"
    process.start_spare((folder, in_process(**DEBUG, headerless=headerless)))
    log = folder / "s1" / "session.jsonl"
    if change == "folder":  # the last delta rewritten
        log.write_text(log.read_text().replace('"text":"!"', '"text":"?"'))
    with mockllm.Server(folder, process=True, **DEBUG) as server, server.run("s1") as run, \
            openai.OpenAI(base_url=run.base_url, api_key="x", max_retries=0) as client:
        reply = client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
        expected = "Hello from the recorded model" + ("?" if change == "folder" else "!")
        assert reply.choices[0].message.content == expected
    if change == "options":
        assert AHEAD not in caplog.text


def test_what_was_loaded_ahead_is_served_only_while_the_orders_and_the_folder_are_the_same(
        tmp_path: Path) -> None:
    folder = many_scenarios(tmp_path, 2)
    options = in_process(**WARN)
    ahead = process_child._Ahead.load(process_child._Orders(folder, options, None, True))
    assert ahead is not None

    def orders(path: Path = folder, **changes: Any) -> process_child._Orders:
        return process_child._Orders(path, options.replace(**changes), None, False)

    assert ahead.serves(orders())
    assert not ahead.serves(orders(headerless="anonymous"))
    assert not ahead.serves(orders(tmp_path))
    log = folder / "s0" / "session.jsonl"  # copied with its source's times: any write now differs
    log.write_text(log.read_text())
    assert not ahead.serves(orders()), "the same bytes written again in place"

    def reloaded() -> process_child._Ahead:
        again = process_child._Ahead.load(process_child._Orders(folder, options, None, True))
        assert again is not None and again.serves(orders())
        return again

    ahead = reloaded()
    shutil.copy2(log, folder / "copy")
    os.replace(folder / "copy", log)
    assert not ahead.serves(orders()), "an identical file renamed into place (a new inode)"
    ahead = reloaded()
    (folder / "s2").mkdir()
    assert not ahead.serves(orders()), "a folder added"


def test_a_folder_that_does_not_load_is_not_loaded_ahead(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "session.jsonl").write_text("not json\n")
    assert process_child._Ahead.load(process_child._Orders(tmp_path, in_process(**WARN), None, True)) is None


def test_the_server_process_keeps_the_scheduling_it_inherits() -> None:
    """Not a batch task: under xdist a batch task's answer could wait for a busy core while the test
    waiting for it left its own core idle (see process_child.main; Linux, as the process mode's control
    channel is POSIX)."""
    before = server_children()
    with mockllm.Server(RECORDINGS / "text-turn", process=True, **WARN):
        (pid,) = server_children() - before
        assert os.sched_getscheduler(pid) == os.sched_getscheduler(0)
