"""Headless Chromium for the inspector's browser tests, driven over the DevTools protocol (CDP).

The protocol is JSON over one websocket, which aiohttp's client already speaks: no Selenium, no
driver binary to match to the browser's version, no new dependency. The browser is Debian's
`chromium` (CI installs it in `.ci/run`); `MOCKLLM_CHROMIUM` names another binary. A machine
without one fails these tests with how to get it: they are never skipped.

Import it as `from tests.browser import ...`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiohttp
import pytest

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
HOW_TO_INSTALL = ("install headless Chromium: `apt-get install -y chromium` on Debian/Ubuntu (.ci/run does it), "
                  "or set MOCKLLM_CHROMIUM to a Chromium or Chrome binary")
START_TIMEOUT = 30.0  # a cold start on a busy two-core machine; far past it the browser is stuck
WAIT_TIMEOUT = 15.0


def chromium() -> str:
    """The browser binary, or a failed test saying how to install one."""
    named = os.environ.get("MOCKLLM_CHROMIUM")
    found = named if named else next((p for p in map(shutil.which, NAMES) if p), None)
    if not found or not (Path(found).is_file() or shutil.which(found)):
        pytest.fail(f"the inspector's browser tests need a browser and found none ({', '.join(NAMES)} on PATH): "
                    f"{HOW_TO_INSTALL}", pytrace=False)
    return found


class Browser:
    """One headless browser with one page; `async with Browser.launch(profile)` stops it after."""

    def __init__(self, process: subprocess.Popen[bytes], log: Path) -> None:
        self.process = process
        self.log = log
        self._http = aiohttp.ClientSession()
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._ids = itertools.count(1)

    @classmethod
    def launch(cls, profile: Path, width: int = 1440, height: int = 1000) -> Browser:
        profile.mkdir(parents=True, exist_ok=True)
        log = profile.parent / f"{profile.name}.log"
        command = [
            chromium(), "--headless", "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
            f"--user-data-dir={profile}", f"--window-size={width},{height}", "--no-first-run",
            "--no-default-browser-check", "--disable-gpu", "--disable-extensions", "--mute-audio",
            # Containers (and root, as CI runs) have no user namespaces for the sandbox; the pages
            # loaded are the test's own, from 127.0.0.1 and file://.
            "--no-sandbox", "about:blank",
        ]
        with log.open("wb") as out:
            # A session of its own: closing kills the browser's whole process group (renderers, zygote).
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        return cls(process, log)

    async def __aenter__(self) -> Self:
        try:
            await self._connect()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def _connect(self) -> None:
        # With port 0 the browser picks one and writes it to DevToolsActivePort in its profile.
        port_file = Path(self._profile_dir()) / "DevToolsActivePort"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT
        while not port_file.is_file() or not port_file.read_text().strip():
            if self.process.poll() is not None or loop.time() > deadline:
                pytest.fail(f"chromium did not start (exit {self.process.poll()}): {self._log_tail()}", pytrace=False)
            await asyncio.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        async with self._http.get(f"http://127.0.0.1:{port}/json/list") as answer:
            targets = await answer.json()
        page = next(t for t in targets if t.get("type") == "page")
        self._ws = await self._http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)

    def _profile_dir(self) -> str:
        arg = next(a for a in self.process.args if isinstance(a, str) and a.startswith("--user-data-dir="))
        return arg.split("=", 1)[1]

    def _log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.is_file() else "(no log)"

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One CDP command; its result (events arriving meanwhile are not needed, and skipped)."""
        assert self._ws is not None
        ident = next(self._ids)
        await self._ws.send_json({"id": ident, "method": method, "params": params})
        while True:
            message = await self._ws.receive(timeout=WAIT_TIMEOUT * 2)
            if message.type != aiohttp.WSMsgType.TEXT:
                pytest.fail(f"the browser closed its DevTools connection ({message.type}): {self._log_tail()}")
            data = message.json()
            if data.get("id") == ident:
                if "error" in data:
                    raise AssertionError(f"CDP {method} failed: {data['error']}")
                result: dict[str, Any] = data.get("result", {})
                return result

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def goto(self, url: str) -> None:
        """Load `url` and wait until the document and its scripts are in."""
        await self.send("Page.navigate", url=url)
        await self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'")

    async def wait_for(self, expression: str, timeout: float = WAIT_TIMEOUT) -> Any:
        """Poll a JavaScript expression until it is truthy; fail with the page's text if it never is."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            with contextlib.suppress(AssertionError):  # the document may be between two loads
                value = await self.evaluate(expression)
                if value:
                    return value
            if loop.time() > deadline:
                text = await self.evaluate("document.body ? document.body.innerText.slice(0, 3000) : ''")
                pytest.fail(f"waited {timeout} s for `{expression}`; the page shows:\n{text}", pytrace=False)
            await asyncio.sleep(0.05)

    async def text(self, selector: str) -> str:
        """The visible text of the first element matching `selector` ('' when there is none)."""
        found = await self.evaluate(f"(document.querySelector({selector!r}) || {{}}).innerText || ''")
        return str(found)

    async def screenshot(self, path: Path) -> Path:
        """The whole page as a PNG at `path` (kept as the test's artifact), from its top: a sticky
        header would otherwise be drawn where the page was scrolled to."""
        await self.evaluate("window.scrollTo(0, 0)")
        metrics = await self.send("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 6000), "scale": 1}
        shot = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    async def close(self) -> None:
        """Stop the browser and every process it started (its own process group)."""
        if self._ws is not None:
            await self._ws.close()
        await self._http.close()
        group = self.process.pid  # start_new_session: the group is the browser's pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(self.process.wait, 10)
        with contextlib.suppress(ProcessLookupError):  # whatever outlived the browser
            os.killpg(group, signal.SIGKILL)
        await asyncio.to_thread(self.process.wait)
