"""RoutesUnder finds what aiohttp's router finds for the same routes, with one lookup per request."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from mockllm.hosting.under_root import RoutesUnder
from mockllm.server.app import NAME

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ROOTS = (f"/scenarios/{{name:{NAME}}}", "/runs/{run}")
# Route paths below a root, as the server has them: plain ones, and ones with parameters of their own.
PATHS = ("/v1/chat/completions", "/v1/messages", "/api/chat", "/v1/models", "/v1beta/models/{model}:embedContent",
         "/v1beta/models/{model}:{verb}", "/model/{modelId:.+}/converse-stream", "/mcp/{server}")


def _handler(name: str) -> Handler:
    async def handle(request: web.Request) -> web.Response:
        return web.Response(text=name)

    handle.__name__ = name
    return handle


def _handlers(root: str, path: str) -> dict[str, Handler]:
    return {"POST": _handler(f"POST {root}{path}"), "*": _handler(f"* {root}{path}")}


def _apps() -> tuple[web.Application, web.Application]:
    """The same routes twice: under RoutesUnder, and as aiohttp's own resources."""
    ours, theirs = web.Application(), web.Application()
    for root in ROOTS:
        under = RoutesUnder(root)
        ours.router.register_resource(under)
        for path in PATHS:
            handlers = _handlers(root, path)
            under.add(path, handlers)
            resource = theirs.router.add_resource(root + path)
            for method, handler in handlers.items():
                resource.add_route(method, handler)
    for app in (ours, theirs):
        app.router.add_route("*", "/{tail:.*}", _handler("unknown"))
    return ours, theirs


async def _resolve(app: web.Application, method: str, path: str) -> tuple[str, dict[str, str]]:
    info = await app.router.resolve(make_mocked_request(method, path, app=app))
    return info.handler.__name__, dict(info)


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/runs/r-1/v1/chat/completions"),
    ("GET", "/runs/r-1/v1/chat/completions"),  # another method: the route's '*'
    ("POST", "/runs/r-1/v1/embeddings"),  # served by no route under the root: the catch-all
    ("POST", "/runs/r-1"),
    ("POST", "/runs//v1/chat/completions"),
    ("POST", "/runs/r%2F1/v1/messages"),  # a quoted slash in the root's value
    ("POST", "/runs/r%25x/v1/messages"),
    ("POST", "/runs/r-1/v1beta/models/gemini-2.5-flash:streamGenerateContent"),
    ("POST", "/runs/r-1/v1beta/models/text-embedding-004:embedContent"),  # the route added first wins
    ("POST", "/runs/r-1/model/us.deepseek.v4-flash-v1%3A0/converse-stream"),
    ("POST", "/runs/r-1/model/a%2Fb/c/converse-stream"),
    ("POST", "/runs/r-1/mcp/files"),
    ("POST", "/runs/r-1/mcp/files/more"),
    ("POST", "/scenarios/s/v1/chat/completions"),
    ("POST", "/scenarios/team/s/v1/chat/completions"),  # a name one level down holds a `/`
    ("POST", "/scenarios/s/api/chat"),  # the shortest name that leaves a route: scenario s's Ollama route
    ("POST", "/scenarios/s/api/api/chat"),
    ("POST", "/scenarios/s/v1/v1/messages"),  # a client adding /v1 twice: no scenario is named `s/v1`
    ("POST", "/scenarios/a/b/c/v1/messages"),
    ("POST", "/scenarios/t%C3%A9/v1/messages"),
])
async def test_a_request_finds_what_aiohttps_router_finds(method: str, path: str) -> None:
    ours, theirs = _apps()
    assert await _resolve(ours, method, path) == await _resolve(theirs, method, path)


async def test_parameters_are_decoded_and_the_root_value_is_named() -> None:
    ours, _ = _apps()
    handler, match = await _resolve(ours, "POST", "/runs/r-1/model/us.deepseek.v4-flash-v1%3A0/converse-stream")
    assert handler == "POST /runs/{run}/model/{modelId:.+}/converse-stream"
    assert match == {"run": "r-1", "modelId": "us.deepseek.v4-flash-v1:0"}
    handler, match = await _resolve(ours, "POST", "/scenarios/team/s/api/chat")
    assert (handler, match) == (f"POST /scenarios/{{name:{NAME}}}/api/chat", {"name": "team/s"})


def test_it_lists_its_routes_and_tells_its_root() -> None:
    under = RoutesUnder("/runs/{run}")
    under.add("/v1/chat/completions", _handlers("/runs/{run}", "/v1/chat/completions"))
    under.add("/mcp/{server}", _handlers("/runs/{run}", "/mcp/{server}"))
    assert len(under) == 2
    assert sorted(route.method for route in under) == ["*", "*", "POST", "POST"]
    assert under.canonical == "/runs/{run}" and under.raw_match("/runs/{run}")
