"""A server in a process of its own, beside the process that uses it (`mockllm.Server(process=True)`;
the pytest plugin's default): the way WireMock runs beside a JVM test suite.

Why: a server in a thread of the test's own process shares its interpreter lock. Every streamed
answer the server writes is time the test cannot run, and every hand-over between the two threads
costs a switch. In a process of its own the server runs on another core while the test reads its
answers; the test pays only for its HTTP calls, as it would against any real provider.

The protocol between the two is private and small:
- the parent starts `python -m mockllm.process_child` (the child's side, a module of its own),
  whose stdin is one end of a socket pair: its control channel. The child makes the server's
  imports first (most of a start's cost), then reads its orders there: the folder and the
  `ServeOptions`, pickled (both sides are this package: nothing else writes that channel), with a
  length before them, and, when the parent chose the address itself, a socket it bound and listens
  on, passed along with them (the pytest plugin under xdist: the workers get the address before the
  server has started);
- before them, a spare may be sent what to load ahead (`start_spare`): a message like the orders,
  marked as not yet orders. The child loads that folder and builds its server while it waits; the
  orders are served from that load when they name the same folder and options and the folder has
  not changed since (`process_child._Ahead`), and load it again otherwise;
- the child loads, listens, and prints one JSON line: `{"url": …}`, or `{"error": …, "kind": …}`
  when it cannot start (the parent raises it as the thread would have);
- the child serves until its control channel closes: the parent closing it, or the parent dying for
  any reason, so a killed test run leaves no server behind;
- the child's log records come back as JSON lines on its stderr, and are logged again in the parent
  under the same logger names and levels, where pytest's log capture sees them as before
  (`_ChildLogs`). Its stderr is a file, not a pipe, and the parent relays what is new after each
  admin call (`Server`'s) and as the child stops, not from a thread: see `_ChildLogs` for why.

A spare (`start_spare`): a child started before its orders are known, which makes its imports
meanwhile, and loads what it is told the orders will likely be. The pytest plugin starts one while
pytest is still loading its plugins and conftests (one core busy, the other idle), and the
session's server, launched later, is that child: its start no longer competes with the tests, or
with xdist's workers starting, for the cores. Measured on 2 x 200 x 5, the orders found it loaded:
ready 23 ms after them, not 232 ms (on 1,000 scenarios, 72 ms, not 498). A spare is taken only by
a launch from the same environment and folder it was started in; one never taken is stopped at
once (`drop_spare`: killed, as it holds nothing and may be loading). A launch sends its orders
alike to a spare and to a child it starts itself. The channel is a socket pair and a listening
socket passes over it (SCM_RIGHTS): POSIX, as the inherited descriptor it replaces was.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import select
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from mockllm.errors import MockllmError, NotAScenarioError
from mockllm.options import ServeOptions

# A child that stops cleanly closes its listener at once; past this it is killed.
STOP_TIMEOUT = 10.0
ERRORS: dict[str, type[Exception]] = {"NotAScenarioError": NotAScenarioError, "TypeError": TypeError,
                                      "ValueError": ValueError}
# Before the pickled orders on the control channel. Defined on this side, which the test's process
# imports: the child's module (its dataclasses, its server code) is the child's alone to import.
ORDERS_LENGTH = struct.Struct(">I")


@dataclass
class _Child:
    """A started `python -m mockllm.process_child`: its control channel, and the file of its logs."""

    proc: subprocess.Popen[bytes]
    control: socket.socket
    logs: _ChildLogs
    env: dict[str, str] = field(repr=False)
    cwd: str

    @classmethod
    def start(cls) -> _Child:
        env, cwd = _child_env(), os.getcwd()
        control, theirs = socket.socketpair()
        logs = _ChildLogs()
        try:
            proc = subprocess.Popen([sys.executable, "-m", "mockllm.process_child"], stdin=theirs.fileno(),
                                    stdout=subprocess.PIPE, stderr=logs.file, env=env)
        except BaseException:
            control.close()
            logs.close()
            raise
        finally:
            theirs.close()  # the child's end is the child's: its EOF must come when ours closes
        return cls(proc, control, logs, env, cwd)

    def order(self, path: Path | None, options: ServeOptions, sock: socket.socket | None, *,
              ahead: bool = False) -> None:
        """Send the child what to serve, and the socket it listens on when the parent bound it.
        `ahead`: not orders yet, what the child should load while it waits for them (`start_spare`)."""
        orders = pickle.dumps((path, options, ahead))
        data = ORDERS_LENGTH.pack(len(orders)) + orders
        sent = socket.send_fds(self.control, [data], [sock.fileno()]) if sock is not None else 0
        if sent < len(data):  # not once they are all sent: a child that cannot start may be gone already
            self.control.sendall(data[sent:])

    def stop(self, *, kill: bool = False) -> None:
        """Close the control channel (the child's signal to stop) and wait for it; kill it if it hangs.
        `kill`: at once (a spare never served: nothing of it is left to finish, and it may be loading)."""
        self.control.close()
        proc = self.proc
        if kill:
            proc.kill()
        try:
            _wait_for_exit(proc, STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self.logs.close()
        if proc.stdout is not None:
            proc.stdout.close()


def _wait_for_exit(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """`proc.wait(timeout)`, woken by the exit itself where Linux gives a process descriptor to wait
    on. `Popen.wait` with a timeout polls, sleeping 0.5 ms, then 1, 2, 4 … up to 50 ms between
    looks: a child that exits 16 ms after its channel closes was seen at 31.5 ms, and every pytest
    session waits for its server's child at its end."""
    deadline = time.monotonic() + timeout
    with contextlib.suppress(AttributeError, OSError):  # no pidfd_open (not Linux, Linux < 5.3), or reaped
        pidfd = os.pidfd_open(proc.pid)
        try:
            _readable(pidfd, timeout)
        finally:
            os.close(pidfd)
    proc.wait(timeout=max(deadline - time.monotonic(), 0))


def _readable(fd: int, timeout: float) -> bool:
    """Whether `fd` turns readable within `timeout` s. With poll, not select: select refuses a
    descriptor numbered 1024 or more, which a test process holding many files may be given."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(timeout, 0) * 1000))


_spare: _Child | None = None  # started ahead of a launch (start_spare)


def start_spare(ahead: tuple[Path, ServeOptions] | None = None) -> None:
    """Start a child before anything knows what it will serve: it makes the server's imports while
    the caller goes on, and the next `ServerProcess.launch` from the same environment and folder
    takes it. `ahead`: what that launch will likely order (a folder, resolved, and its options),
    which the child then loads and builds too; the launch's orders are served from that only if
    they are the same and the folder has not changed since (`process_child._Ahead`). A spare
    started already stays."""
    global _spare
    if _spare is None:
        _spare = _Child.start()
        if ahead is not None:
            _spare.order(*ahead, None, ahead=True)


def drop_spare() -> None:
    """Stop the spare, if one was started and nothing took it."""
    global _spare
    spare, _spare = _spare, None
    if spare is not None:
        spare.stop(kill=True)


def _take_spare() -> _Child | None:
    """The spare, for a launch from the environment and folder it was started in; else none (a
    spare from another is stopped: it would serve with what the caller has since changed)."""
    global _spare
    spare, _spare = _spare, None
    if spare is None:
        return None
    if spare.proc.poll() is None and _same(spare.env, _child_env()) and spare.cwd == os.getcwd():
        return spare
    spare.stop(kill=True)
    return None


def _same(env: dict[str, str], now: dict[str, str]) -> bool:
    """Whether a spare started with `env` may serve a launch from `now`: the same, but for pytest's
    note of the test phase running (it changes with every phase; no server reads it)."""
    return {**env, "PYTEST_CURRENT_TEST": ""} == {**now, "PYTEST_CURRENT_TEST": ""}


class ServerProcess:
    """The parent's side: start the child, learn its URL, stop it."""

    def __init__(self, path: Path | None, options: ServeOptions, sock: socket.socket | None = None) -> None:
        self.path = path.resolve() if path is not None else None
        self.options = options
        self.sock = sock  # a listening socket handed to the child (closed here once it has its own)
        self._child: _Child | None = None

    def start(self, timeout: float, start_error: type[MockllmError]) -> str:
        """Start the child and return its base URL; a child that cannot start raises what the
        in-thread server would have (`start_error` for what the server itself refused)."""
        self.launch()
        return self.wait(timeout, start_error)

    def launch(self) -> None:
        """Start the child without waiting for it: it loads and binds while the caller goes on. The
        spare, when there is one this launch may take, is the child."""
        child = _take_spare() or _Child.start()
        self._child = child
        try:
            child.order(self.path, self.options, self.sock)
        except BaseException:
            self.stop()
            raise
        finally:
            if self.sock is not None:
                # The child has its own copy: were it to die, the port must refuse, not queue connections.
                self.sock.close()
                self.sock = None

    def wait(self, timeout: float, start_error: type[MockllmError]) -> str:
        """The launched child's base URL, once it listens (see `start`)."""
        proc = self._child.proc if self._child is not None else None
        if proc is None or proc.stdout is None:
            raise start_error("the server process was not launched")
        try:
            line = _read_line(proc.stdout, timeout)
        except BaseException:
            self.stop()
            raise
        if line is None:
            self.stop()
            raise start_error(f"the server process did not start within {timeout} s (or exited)")
        ready = json.loads(line)
        if "url" not in ready:
            self.stop()
            kind = ERRORS.get(ready.get("kind", ""), start_error)
            raise kind(ready.get("error", "the server process did not start"))
        return str(ready["url"])

    def relay_logs(self) -> None:
        """Log again here what the child has logged since the last relay (`_ChildLogs`)."""
        if self._child is not None:
            self._child.logs.relay()

    def stop(self) -> None:
        """Stop the child (see `_Child.stop`)."""
        child, self._child = self._child, None
        if child is not None:
            child.stop()


def _child_env() -> dict[str, str]:
    """The child imports this very mockllm (an editable checkout, a PYTHONPATH entry, a wheel)."""
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [env.get("PYTHONPATH")])])
    return env


def _read_line(stream: IO[bytes], timeout: float) -> bytes | None:
    """One line from `stream` within `timeout` s, or None (the child is stuck, or exited). Waited for
    with `poll`, not in a thread: see `_ChildLogs`. Read off the descriptor, past the stream's
    buffer: the ready line is all the child ever writes there."""
    fd, line = stream.fileno(), b""
    deadline = time.monotonic() + timeout
    while b"\n" not in line:
        left = deadline - time.monotonic()
        if left <= 0 or not _readable(fd, left):
            return None
        more = os.read(fd, 1 << 12)
        if not more:
            break
        line += more
    line = line.partition(b"\n")[0]
    return line if line.strip() else None


class _ChildLogs:
    """The child's stderr, relayed here: an unlinked temporary file the child writes, read with
    `relay` from where the last relay stopped. Each complete JSON line is a record logged again under
    its logger's name and level; anything else the child wrote (a traceback) goes to this stderr.

    Why no thread reads it as it comes: a second thread in the test's process, even one that only
    waits, makes every `malloc` and `free` of the process take a lock (glibc skips it while a
    process has one thread, and never again once a thread has started). On 1 x 200 x 1, building
    the `openai` client took 0.75-0.97 ms more CPU per test (4 %) while a thread here read this
    from a pipe (see docs/benchmarks.md). Why a file: a pipe read only now and then fills (64 KiB)
    under a debug log level, and then the server stops, blocked on writing a log line, until the
    next admin call that will not come.

    So a record reaches this process's loggers after the admin call that follows it (`Server` relays
    after each), or as the child stops; in the pytest plugin, by the test's teardown at the latest,
    inside the test's own captured log."""

    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile()  # noqa: SIM115  (closed by close(); the child's copy is its stderr)
        self._read = 0  # the offset relayed up to; read with pread, the file's own offset is the child's
        self._partial = b""  # a line the child has not finished writing
        self._lock = threading.Lock()  # a Server's admin calls may come from several threads

    def relay(self, *, final: bool = False) -> None:
        """Relay every complete line written since the last relay (`final`: the last, unfinished one too)."""
        with self._lock:
            if self.file.closed:
                return
            data = self._partial
            try:
                while more := os.pread(self.file.fileno(), 1 << 16, self._read):
                    self._read += len(more)
                    data += more
            except OSError:
                pass  # relay what was read: the offset has moved past it
            *lines, self._partial = data.split(b"\n")
            if final and self._partial:
                lines.append(self._partial)
                self._partial = b""
        for raw in lines:
            _relay_line(raw)

    def close(self) -> None:
        """Relay what is left (the child has exited: all it wrote is there) and close the file."""
        self.relay(final=True)
        with self._lock:
            self.file.close()


def _relay_line(raw: bytes) -> None:
    """Log one of the child's records again in this process; pass on anything else it wrote."""
    try:
        record = json.loads(raw)
        # The message is the record's whole text, not an argument of a shared "%s": the repeat limit a
        # thread's server puts on these loggers (log_rate) tells records apart by that text.
        logging.getLogger(record["name"]).log(record["level"], str(record["message"]))
    except (ValueError, KeyError, TypeError):
        if raw.strip():
            sys.stderr.write(raw.decode(errors="replace") + "\n")
