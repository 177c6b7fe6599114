"""A server in a process of its own, beside the process that uses it (`mockllm.Server(process=True)`;
the pytest plugin's default): the way WireMock runs beside a JVM test suite.

Why: a server in a thread of the test's own process shares its interpreter lock. Every streamed
answer the server writes is time the test cannot run, and every hand-over between the two threads
costs a switch. In a process of its own the server runs on another core while the test reads its
answers; the test pays only for its HTTP calls, as it would against any real provider.

The protocol between the two is private and small:
- the parent starts `python -m mockllm.process` with the folder and the `ServeOptions` pickled on
  its stdin (both sides are this package: nothing else writes that pipe), and, when it chose the
  address itself, the file descriptor of a socket it bound and listens on, inherited by the child
  (the pytest plugin under xdist: the workers get the address before the server has started);
- the child loads, listens, and prints one JSON line: `{"url": …}`, or `{"error": …, "kind": …}`
  when it cannot start (the parent raises it as the thread would have);
- the child serves until its stdin closes: the parent closing it, or the parent dying for any
  reason, so a killed test run leaves no server behind;
- the child's log records come back as JSON lines on its stderr and are logged again in the parent
  under the same logger names and levels, where pytest's log capture sees them as before.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

from mockllm.errors import MockllmError, NotAScenarioError
from mockllm.options import ServeOptions

# A child that stops cleanly closes its listener at once; past this it is killed.
STOP_TIMEOUT = 10.0
ERRORS: dict[str, type[Exception]] = {"NotAScenarioError": NotAScenarioError, "TypeError": TypeError,
                                      "ValueError": ValueError}


class ServerProcess:
    """The parent's side: start the child, learn its URL, stop it."""

    def __init__(self, path: Path | None, options: ServeOptions, sock: socket.socket | None = None) -> None:
        self.path = path.resolve() if path is not None else None
        self.options = options
        self.sock = sock  # a listening socket handed to the child (closed here once it has its own)
        self._proc: subprocess.Popen[bytes] | None = None
        self._logs: threading.Thread | None = None

    def start(self, timeout: float, start_error: type[MockllmError]) -> str:
        """Start the child and return its base URL; a child that cannot start raises what the
        in-thread server would have (`start_error` for what the server itself refused)."""
        self.launch()
        return self.wait(timeout, start_error)

    def launch(self) -> None:
        """Start the child without waiting for it: it loads and binds while the caller goes on."""
        fd = self.sock.fileno() if self.sock is not None else None
        proc = subprocess.Popen([sys.executable, "-m", "mockllm.process"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_child_env(),
                                pass_fds=(fd,) if fd is not None else ())
        if self.sock is not None:
            # The child has its own copy: were it to die, the port must refuse, not queue connections.
            self.sock.close()
            self.sock = None
        self._proc = proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self._logs = threading.Thread(target=_relay_logs, args=(proc.stderr,), name="mockllm-server-logs",
                                      daemon=True)
        self._logs.start()
        try:
            proc.stdin.write(pickle.dumps((self.path, self.options, fd)))
            proc.stdin.flush()
        except BaseException:
            self.stop()
            raise

    def wait(self, timeout: float, start_error: type[MockllmError]) -> str:
        """The launched child's base URL, once it listens (see `start`)."""
        proc = self._proc
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

    def stop(self) -> None:
        """Close the child's stdin (its signal to stop) and wait for it; kill it if it hangs."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass  # already gone
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if self._logs is not None:
            self._logs.join(timeout=STOP_TIMEOUT)
        if proc.stdout is not None:
            proc.stdout.close()


def _child_env() -> dict[str, str]:
    """The child imports this very mockllm (an editable checkout, a PYTHONPATH entry, a wheel)."""
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [env.get("PYTHONPATH")])])
    return env


def _read_line(stream: IO[bytes], timeout: float) -> bytes | None:
    """One line from `stream` within `timeout` s, or None (the child is stuck, or exited)."""
    result: list[bytes] = []
    reader = threading.Thread(target=lambda: result.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return result[0] if result and result[0].strip() else None


def _relay_logs(stream: IO[bytes]) -> None:
    """Log the child's records again in this process; pass on anything else it writes."""
    with stream:
        for raw in stream:
            try:
                record = json.loads(raw)
                logging.getLogger(record["name"]).log(record["level"], "%s", record["message"])
            except (ValueError, KeyError, TypeError):
                sys.stderr.write(raw.decode(errors="replace"))


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


async def _serve(path: Path | None, options: ServeOptions, out: IO[str], sock: socket.socket | None) -> None:
    import asyncio

    from mockllm.scenario.collector import paused
    from mockllm.server.running import settle_memory
    from mockllm.starting import load_to_serve, start

    # What loading builds lives as long as the server: frozen before the collector is back on,
    # which would otherwise scan all of it once more at its first pass.
    with paused():
        try:
            suite = load_to_serve(path, options)
            server = await start(suite, options, sock)
        except (MockllmError, TypeError, ValueError) as exc:
            _say(out, error=str(exc), kind=type(exc).__name__)
            return
        settle_memory()
    loop = asyncio.get_running_loop()
    closed = asyncio.Event()
    # The parent's stdin pipe: EOF when it closes it or dies. A thread reads it: a pipe on stdin
    # is not always selectable the same way on every loop.
    threading.Thread(target=lambda: (sys.stdin.buffer.read(), loop.call_soon_threadsafe(closed.set)),
                     daemon=True).start()
    _say(out, url=server.base_url)
    try:
        await closed.wait()
    finally:
        await server.close()


def main() -> int:
    path, options, fd = pickle.load(sys.stdin.buffer)
    sock = socket.socket(fileno=fd) if fd is not None else None  # listening already: the parent chose the address
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonLines())
    logging.basicConfig(level=options.log_level.upper(), handlers=[handler])
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing else may write the parent's ready line's pipe
    from mockllm.hosting.listen import run_main

    run_main(_serve(path, options, out, sock))
    return 0


if __name__ == "__main__":
    sys.exit(main())
