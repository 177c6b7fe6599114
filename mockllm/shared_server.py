"""One server for all of pytest-xdist's workers: started by the controller, attached to by each worker.

Why: each worker started a server process of its own, and each one loaded and rendered every
recording (0.35-0.45 s of CPU for 200 scenarios: the interpreter, aiohttp's import, the load, the
warm) though it runs only its share of the tests; with `-n 8`, eight times over, on the cores the
tests need.

How: the controller binds the listening socket itself, so the address is known at once and goes to
every worker in its `workerinput` before the server process (which inherits the socket) has even
started: no worker waits for it to be ready, and a connection made before it serves waits in the
socket's backlog. The controller waits for the process in a thread of its own, and says why in the
session's summary if it did not start; it stops the server when the session ends, after every
worker. Only in the plugin's process mode (`--mockllm-server-mode thread` keeps a server per worker).
The server's log records reach the controller's loggers as it stops: they come back after admin
calls (`mockllm.process._ChildLogs`), and the workers make those, not the controller.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mockllm.errors import MockllmError

if TYPE_CHECKING:
    from mockllm.api import Server

BACKLOG = 128  # connections a worker may open before the server accepts them


class SharedServer:
    """The controller's side: the server process, its address, and why it did not start (if it did not)."""

    def __init__(self, path: Path, options: dict[str, Any]) -> None:
        from mockllm.api import Server
        from mockllm.options import in_process

        settings = in_process(**options)
        family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.bind((settings.host, settings.port))
            sock.listen(BACKLOG)
            port = sock.getsockname()[1]
            self.server: Server = Server(path, process=True, listening=sock, **options).launch()
        except BaseException:
            sock.close()
            raise
        host = f"[{settings.host}]" if family == socket.AF_INET6 else settings.host
        self.url = f"http://{host}:{port}"
        self.failure: str | None = None
        self._waiting = threading.Thread(target=self._wait, name="mockllm-shared-server", daemon=True)
        self._waiting.start()

    def _wait(self) -> None:
        try:
            self.server.start()  # waits for the process's ready line; raises what it could not do
        except (MockllmError, TypeError, ValueError, OSError) as exc:
            self.failure = str(exc)

    def stop(self) -> None:
        self._waiting.join()
        self.server.stop()


def attach(url: str, path: Path, options: dict[str, Any]) -> Server:
    """A worker's handle on the controller's server, once it answers; raises MockllmError saying so
    when it does not (it did not start: the controller's summary says why)."""
    from mockllm.api import Server

    server = Server.attach(url, **options)
    try:
        server.admin("GET", f"{url}/_mockllm/health")
    except (MockllmError, OSError) as exc:
        server.stop()
        raise MockllmError(f"the server for {path}, shared by xdist's workers at {url}, does not answer ({exc}); "
                           "the session's summary says why it did not start") from exc
    return server
