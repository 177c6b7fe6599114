"""Test helper: a scripted upstream for the recorder, on a free loopback port.

Each answer is a list of byte pieces sent one write at a time (optionally waiting on an event
before a piece, so a test can prove the proxy forwards a piece before the next exists), or an
error status with a body. Every request it received is kept with its headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.loopback import start_on_loopback

# Streamed answers, by their media type (Ollama streams NDJSON), with the Content-Type sent.
STREAMED = {"text/event-stream": "text/event-stream; charset=utf-8", "application/x-ndjson": "application/x-ndjson"}


@dataclass
class Answer:
    pieces: list[bytes] = field(default_factory=list)
    status: int = 200
    content_type: str = "text/event-stream"
    before: dict[int, asyncio.Event] = field(default_factory=dict)  # piece index -> wait for this first
    sent: dict[int, asyncio.Event] = field(default_factory=dict)  # piece index -> set once it is written
    end: asyncio.Event | None = None  # set: the body's end (after the last piece) waits for it


@dataclass
class FakeUpstream:
    answers: list[Answer] = field(default_factory=list)
    received: list[dict[str, Any]] = field(default_factory=list)
    base_url: str = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.received.append({"path": request.path, "query": request.query_string, "headers": dict(request.headers),
                              "body": await request.read()})
        answer = self.answers.pop(0)
        if answer.status >= 400 or answer.content_type not in STREAMED:
            return web.Response(status=answer.status, body=b"".join(answer.pieces), content_type=answer.content_type)
        response = web.StreamResponse(headers={"Content-Type": STREAMED[answer.content_type],
                                               "x-request-id": "req_upstream"})
        await response.prepare(request)
        for k, piece in enumerate(answer.pieces):
            if k in answer.before:
                await answer.before[k].wait()
            await response.write(piece)
            if k in answer.sent:
                answer.sent[k].set()
        if answer.end is not None:
            await answer.end.wait()
        await response.write_eof()
        return response


@contextlib.asynccontextmanager
async def running_upstream() -> AsyncIterator[FakeUpstream]:
    upstream = FakeUpstream()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", upstream.handle)  # /v1/…, and beside it (/v1beta/…, /api/…)
    runner, root = await start_on_loopback(app)
    upstream.base_url = root + "/v1"
    try:
        yield upstream
    finally:
        await runner.cleanup()


def chat_chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": "m",
                            "choices": [] if usage else [{"index": 0, "delta": delta, "logprobs": None,
                                                          "finish_reason": finish}]}
    if usage:
        body["usage"] = usage
    return b"data: " + json.dumps(body).encode() + b"\n\n"
