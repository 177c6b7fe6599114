"""The child's side of a server in a process of its own (`mockllm.process`, whose docstring tells
the private protocol between the two): run as `python -m mockllm.process_child`, it makes the
server's imports, reads its orders from its control channel (a spare loads what it is told to
meanwhile), prints its ready line, serves until that channel closes, and sends its log records back
as JSON lines on its stderr. Kept apart from the parent's side, from which it imports only the
orders' framing (`ORDERS_LENGTH`): the test's process neither runs nor imports anything here."""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import logging
import os
import pickle
import socket
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

from mockllm.errors import MockllmError
from mockllm.options import ServeOptions
from mockllm.process import ORDERS_LENGTH

if TYPE_CHECKING:
    from aiohttp import web

    from mockllm.scenario.fingerprint import Fingerprint

log = logging.getLogger("mockllm")

# What the child imports to serve: most of its start (aiohttp alone is a third), made before its orders.
SERVING = ("mockllm.hosting.listen", "mockllm.scenario.collector", "mockllm.server.running", "mockllm.starting")


class _JsonLines(logging.Formatter):
    """A record as the JSON line the parent logs again (`mockllm.process._ChildLogs`)."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        return json.dumps({"name": record.name, "level": record.levelno, "message": message})


def _say(out: IO[str], **fields: Any) -> None:
    """The ready line: the one line the child ever writes to the parent's pipe."""
    out.write(json.dumps(fields) + "\n")
    out.flush()


@dataclass
class _Orders:
    """One message of the control channel, as `mockllm.process._Child.order` sent it."""

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
    head = _read_exactly(control, ORDERS_LENGTH.size, fds)  # the socket comes with a message's first bytes
    body = _read_exactly(control, ORDERS_LENGTH.unpack(head)[0], fds) if head is not None else None
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
