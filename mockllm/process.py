"""A server in a process of its own, beside the process that uses it (`mockllm.Server(process=True)`;
the pytest plugin's default): the way WireMock runs beside a JVM test suite.

Why: a server in a thread of the test's own process shares its interpreter lock. Every streamed
answer the server writes is time the test cannot run, and every hand-over between the two threads
costs a switch. In a process of its own the server runs on another core while the test reads its
answers; the test pays only for its HTTP calls, as it would against any real provider.

The protocol between the two is private and small:
- the parent starts `python -m mockllm.process`, whose stdin is one end of a socket pair: its
  control channel. The child makes the server's imports first (most of a start's cost), then reads
  its orders there: the folder and the `ServeOptions`, pickled (both sides are this package:
  nothing else writes that channel), with a length before them, and, when the parent chose the
  address itself, a socket it bound and listens on, passed along with them (the pytest plugin under
  xdist: the workers get the address before the server has started);
- before them, a spare may be sent what to load ahead (`start_spare`): a message like the orders,
  marked as not yet orders. The child loads that folder and builds its server while it waits; the
  orders are served from that load when they name the same folder and options and the folder has
  not changed since (`_Ahead`), and load it again otherwise;
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

import atexit
import contextlib
import gc
import importlib
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
from typing import IO, TYPE_CHECKING, Any, NoReturn

from mockllm.errors import MockllmError, NotAScenarioError
from mockllm.options import ServeOptions

if TYPE_CHECKING:
    from aiohttp import web

    from mockllm.scenario.fingerprint import Fingerprint

log = logging.getLogger("mockllm")

# A child that stops cleanly closes its listener at once; past this it is killed.
STOP_TIMEOUT = 10.0
ERRORS: dict[str, type[Exception]] = {"NotAScenarioError": NotAScenarioError, "TypeError": TypeError,
                                      "ValueError": ValueError}


_ORDERS_LENGTH = struct.Struct(">I")  # before the pickled orders on the control channel
# What the child imports to serve: most of its start (aiohttp alone is a third), made before its orders.
SERVING = ("mockllm.hosting.listen", "mockllm.scenario.collector", "mockllm.server.running", "mockllm.starting")


@dataclass
class _Child:
    """A started `python -m mockllm.process`: its control channel, and the thread relaying its logs."""

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
            proc = subprocess.Popen([sys.executable, "-m", "mockllm.process"], stdin=theirs.fileno(),
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
        data = _ORDERS_LENGTH.pack(len(orders)) + orders
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
    they are the same and the folder has not changed since (`_Ahead`). A spare started already stays."""
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


class _JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        return json.dumps({"name": record.name, "level": record.levelno, "message": message})


# ---------------------------------------------------------------------------------------------
# The child's side


def _say(out: IO[str], **fields: Any) -> None:
    out.write(json.dumps(fields) + "\n")
    out.flush()


@dataclass
class _Orders:
    path: Path | None
    options: ServeOptions
    sock: socket.socket | None
    ahead: bool  # what to load while waiting for the orders (`start_spare`), not orders yet


@dataclass
class _Ahead:
    """A folder loaded and its server built before the orders came (a spare's `ahead`)."""

    path: Path
    options: ServeOptions
    seen: Fingerprint  # the folder, as it was before the load began
    app: web.Application

    @classmethod
    def load(cls, orders: _Orders) -> _Ahead | None:
        """None when it does not load: the orders load it again, and say what is wrong then."""
        from mockllm.scenario.collector import paused
        from mockllm.scenario.fingerprint import fingerprint
        from mockllm.starting import load_to_serve, prepare

        if orders.path is None:
            return None  # what serves no folder depends on the environment, not on files
        seen = fingerprint(orders.path)
        try:
            with paused():
                app = prepare(load_to_serve(orders.path, orders.options), orders.options)
        except (MockllmError, TypeError, ValueError):
            return None
        return cls(orders.path, orders.options, seen, app)

    def serves(self, orders: _Orders) -> bool:
        """Whether this is what `orders` would load now: the same folder and options, the folder unchanged."""
        from mockllm.scenario.fingerprint import fingerprint

        return self.path == orders.path and self.options == orders.options and fingerprint(self.path) == self.seen


async def _child(control: socket.socket, out: IO[str]) -> None:
    """The child's life: its orders (a spare loads what it was told to meanwhile), then serving."""
    # Read blocking: nothing else runs on this loop until the server does.
    orders = _orders(control)
    ahead = None
    while orders is not None and orders.ahead:
        ahead = _Ahead.load(orders)
        orders = _orders(control)
    if orders is None:
        return  # the parent closed the channel with no orders: a spare nothing took
    if ahead is not None and not ahead.serves(orders):
        ahead = None
        gc.collect()  # what it built is garbage now, some of it in cycles: not to be frozen with the server
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonLines())
    logging.basicConfig(level=orders.options.log_level.upper(), handlers=[handler])
    await _serve(orders, ahead, out, control)


async def _serve(orders: _Orders, ahead: _Ahead | None, out: IO[str], control: socket.socket) -> None:
    import asyncio

    from mockllm.scenario.collector import paused
    from mockllm.server.running import settle_memory
    from mockllm.starting import load_to_serve, prepare, start_prepared

    path, options = orders.path, orders.options
    # What loading builds lives as long as the server: frozen before the collector is back on,
    # which would otherwise scan all of it once more at its first pass.
    with paused():
        try:
            if ahead is not None:
                log.debug("serving %s as loaded before the orders came", path)
            app = ahead.app if ahead is not None else prepare(load_to_serve(path, options), options)
            server = await start_prepared(app, options, orders.sock)
        except (MockllmError, TypeError, ValueError) as exc:
            _say(out, error=str(exc), kind=type(exc).__name__)
            return
        settle_memory()
    loop = asyncio.get_running_loop()
    closed = asyncio.Event()
    # The control channel: EOF when the parent closes it or dies. A thread waits for it, as for
    # the pipe it was before: nothing of the loop's is spent on it.
    def watch() -> None:
        while control.recv(1 << 12):
            pass
        loop.call_soon_threadsafe(closed.set)

    threading.Thread(target=watch, daemon=True).start()
    _say(out, url=server.base_url)
    try:
        await closed.wait()
    finally:
        await server.close()


def _orders(control: socket.socket) -> _Orders | None:
    """What to serve (or to load ahead), and the listening socket when the parent bound it; None:
    the parent closed the channel with no orders (a spare nothing took). Reads exactly one message:
    the next may be waiting behind it (a spare's orders behind what it loads ahead)."""
    fds: list[int] = []
    head = _read_exactly(control, _ORDERS_LENGTH.size, fds)  # the socket comes with a message's first bytes
    body = _read_exactly(control, _ORDERS_LENGTH.unpack(head)[0], fds) if head is not None else None
    if body is None:
        for fd in fds:
            os.close(fd)
        return None
    path, options, ahead = pickle.loads(body)
    return _Orders(path, options, socket.socket(fileno=fds[0]) if fds else None, ahead)


def _read_exactly(control: socket.socket, size: int, fds: list[int]) -> bytes | None:
    """`size` bytes from `control`, adding any descriptor passed with them to `fds`; None at EOF."""
    data = b""
    while len(data) < size:
        more, passed, _, _ = socket.recv_fds(control, size - len(data), 1)
        fds += passed
        if not more:
            return None
        data += more
    return data


def main() -> NoReturn:
    # The server keeps the scheduling it inherits. As a batch task (SCHED_BATCH, 42a2125 until c610c6a) a
    # request that woke it never preempted a test, but the answer could wait for a busy core while
    # the core its test had freed stayed idle: on 2 x 200 x 5 (-n 2) the cores were idle 6-8 % of
    # the tests' time, against 2-3 % as a normal task (the floor's, a bare server's, is 2 %). As a
    # normal task: 0.19 s less wall time per session (median of 10 interleaved pairs, 9 faster),
    # for 0.05 s more of the server's CPU; with one worker, no difference.
    for module in SERVING:  # before the orders: a spare makes them while its parent is still busy
        importlib.import_module(module)
    from mockllm.hosting.listen import run_main

    control = socket.socket(fileno=sys.stdin.fileno())
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing else may write the parent's ready line's pipe
    run_main(_child(control, out))
    # Served and closed: what is left is the interpreter's teardown, freeing every module and every
    # loaded recording one by one (15 ms at 200 scenarios), which the parent waits for as each session
    # ends. The exit handlers still run (logging's flush among them); then the process just ends.
    atexit._run_exitfuncs()
    for stream in (sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()  # type: ignore[union-attr]
    os._exit(0)


if __name__ == "__main__":
    main()
