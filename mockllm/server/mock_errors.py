"""Errors the mock makes itself (not replayed ones): the dialect's error body, never retried."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from mockllm.wire import DEFAULT
from mockllm.wire.dialect import Dialect

NO_RETRY = {"x-should-retry": "false"}
# What a handler lets go on up rather than answer as its own bug: the client left, or aiohttp's own
# HTTP answers (a 408, a 413) raised as exceptions.
PASSED_ON = (asyncio.CancelledError, ConnectionResetError, web.HTTPException)

log = logging.getLogger("mockllm")


def mock_error(status: int, code: str, message: str, headers: dict[str, str] | None = None,
               dialect: Dialect = DEFAULT) -> web.Response:
    """An error made by the mock itself, in `dialect`'s shape, with `x-should-retry: false` so SDKs
    fail at once instead of retrying into a deterministic error.

    Errors outside any model route (admin, unknown paths) take the OpenAI shape."""
    body = dialect.error_body(message, code, status)
    return web.Response(status=status, body=body, content_type="application/json",
                        headers={**NO_RETRY, **(dialect.error_headers(body) or {}), **(headers or {})})


def too_large(limit: int, dialect: Dialect = DEFAULT) -> web.Response:
    """The 413 for a request body over `limit` bytes (`bodies.read_body` gave None), in `dialect`'s shape."""
    return mock_error(413, "request_too_large", f"request body over {limit} bytes", dialect=dialect)


def internal_error(request: web.Request | str, exc: Exception) -> str:
    """Log a bug met while answering `request` (or the fast lane's "METHOD path") and say it in
    words for the client's error: a bug must not take the server down or leak into other runs, so
    every handler answers it as its own error (`mock_error`, or a JSON-RPC error) after catching
    all but `PASSED_ON`."""
    where = request if isinstance(request, str) else f"{request.method} {request.path}"
    log.exception("internal error on %s", where, exc_info=exc)
    return f"mockllm failed on this request: {exc!r}"

