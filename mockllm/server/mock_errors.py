"""Errors the mock makes itself (not replayed ones): the dialect's error body, never retried."""

from __future__ import annotations

from aiohttp import web

from mockllm.wire import DEFAULT
from mockllm.wire.dialect import Dialect

NO_RETRY = {"x-should-retry": "false"}


def mock_error(status: int, code: str, message: str, headers: dict[str, str] | None = None,
               dialect: Dialect = DEFAULT) -> web.Response:
    """An error made by the mock itself, in `dialect`'s shape, with `x-should-retry: false` so SDKs
    fail at once instead of retrying into a deterministic error.

    Errors outside any model route (admin, unknown paths) take the OpenAI shape."""
    body = dialect.error_body(message, code, status)
    return web.Response(status=status, body=body, content_type="application/json",
                        headers={**NO_RETRY, **(dialect.error_headers(body) or {}), **(headers or {})})
