"""Starting a test's own aiohttp app (a scripted upstream) on a free loopback port. It imports
nothing of mockllm: the upstreams that use it know nothing of mockllm."""

from __future__ import annotations

from aiohttp import web


async def start_on_loopback(app: web.Application) -> tuple[web.AppRunner, str]:
    """Serve `app` on 127.0.0.1 at a free port: its runner (`cleanup()` stops it) and its root URL,
    `http://127.0.0.1:PORT`."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"
