#!/usr/bin/env python3
"""The benchmark's baseline server: a bare aiohttp handler on uvloop writing pre-encoded SSE bytes.

    python3 scripts/bench_baseline.py SCENARIO_DIR [--writes per-event|one] [--host 127.0.0.1] [--port 0]

It prints `baseline listening on http://HOST:PORT` once ready and serves until SIGTERM/SIGINT.
At start-up it takes the SSE frames mockllm renders for the scenario's first call (the same bytes
mockllm sends: every chunk frame, the usage frame, `data: [DONE]`); every POST to
`/runs/{run}/v1/chat/completions` then reads the request body and writes those frames:
- `per-event` (the streaming baseline): one write per event, chunked, as a plain SSE server does;
- `one` (the floor, issue 28, and the scale baseline): the whole answer pre-encoded in one body,
  one write with a Content-Length, as mockllm writes an unpaced stream, to a POST on any path
  (every dialect's route): the least any aiohttp handler can do per streamed request; beside
  mockllm, only its routing and replay state are missing.
No routing, no parsing, no state: the floor any SSE server on aiohttp pays. It runs with mockllm's
runner and memory settings (settle_memory), so only the handlers differ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import uvloop
from aiohttp import web

from mockllm.hosting.listen import RunningServer, listen, serve_until_signalled
from mockllm.replay.catalog import Catalog
from mockllm.scenario.load import load_scenario
from mockllm.server.running import settle_memory
from mockllm.server.streaming import SSE_HEADERS
from mockllm.wire import CHAT
from mockllm.wire.chat.dialect import DONE


def frames_for(scenario_dir: Path) -> list[bytes]:
    reply = Catalog(load_scenario(scenario_dir)).reply(CHAT, 0, 0, None, None)
    if reply.status != 200 or reply.usage_frame is None or reply.ending != "done":
        raise SystemExit(f"{scenario_dir}: the first call is not a plain streamed answer with usage")
    return [*reply.frames, reply.usage_frame, DONE]


async def serve(frames: list[bytes], writes: str, host: str, port: int) -> None:
    async def per_event(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        for frame in frames:
            await response.write(frame)
        await response.write_eof()
        return response

    whole = b"".join(frames)

    async def one(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=whole, headers=SSE_HEADERS)

    app = web.Application()
    if writes == "one":
        app.router.add_post("/{path:.*}", one)
    else:
        app.router.add_post("/runs/{run}/v1/chat/completions", per_event)
    # Started and stopped as mockllm's start_server and serve are, so only the handlers differ.
    runner, bound = await listen(app, host, port)
    await serve_until_signalled(RunningServer(runner, host, bound), [f"baseline listening on http://{host}:{bound}"])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", type=Path)
    parser.add_argument("--writes", choices=["per-event", "one"], default="per-event")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    frames = frames_for(args.scenario)
    settle_memory()
    uvloop.run(serve(frames, args.writes, args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
