"""Every route under one parameterized root (`/runs/{run}`) as one aiohttp resource, found by a dict lookup.

aiohttp indexes a resource with a path parameter under its literal head (`/runs`) and tries every
resource there in turn, a regex each: with every dialect's routes under the same root, a request
for the last one registered (Bedrock's) paid about twenty failed matches, 8 us of the server's CPU
per request (scripts/bench_dialects.py's floor). Here the root is matched once, then a route
without parameters of its own is a dict lookup on the rest of the path; routes with parameters
(`/v1beta/models/{model}:{verb}`) are tried after, in the order they were added, as aiohttp would.

Matching is aiohttp's: the same path (`path_safe`), the same patterns (built by aiohttp's own
`DynamicResource`), the same unquoting of parameters, and a route per method with `*` for the rest.
Where the root's parameter may span segments (a scenario's name holds one `/`), the shortest value
that leaves a served route wins.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.typedefs import Handler
from yarl import URL

if TYPE_CHECKING:
    from aiohttp.web_urldispatcher import _InfoDict  # the type AbstractResource.get_info is declared with


class _Endpoint:
    """One route path's handlers, by method ('*' for any other)."""

    def __init__(self, resource: RoutesUnder, handlers: dict[str, Handler]) -> None:
        self.routes = {method: web.ResourceRoute(method, handler, resource) for method, handler in handlers.items()}
        self.any = self.routes.get("*")
        self.allowed = set(self.routes)


class RoutesUnder(web.AbstractResource):
    """The routes added under `root` (`/runs/{run}`, `/scenarios/{name:regex}`): register it with
    `app.router.register_resource` before adding any, then `add` each route path below the root."""

    def __init__(self, root: str) -> None:
        super().__init__()
        self._root = root
        self._pattern: re.Pattern[str] = web.DynamicResource(root).get_info()["pattern"]
        self._parameter = next(iter(self._pattern.groupindex))
        self._head = root.partition("{")[0]  # `/runs/`: what every path it serves starts with
        self._plain: dict[str, _Endpoint] = {}
        self._dynamic: list[tuple[str, re.Pattern[str], _Endpoint]] = []  # (literal head, pattern, endpoint)

    def add(self, path: str, handlers: dict[str, Handler]) -> None:
        """Serve `root + path` with `handlers` by method ('*': any other method)."""
        endpoint = _Endpoint(self, handlers)
        if "{" in path:
            literal = path.partition("{")[0]
            self._dynamic.append((literal, web.DynamicResource(path).get_info()["pattern"], endpoint))
        else:
            self._plain[path] = endpoint

    async def resolve(self, request: web.Request) -> tuple[web.UrlMappingMatchInfo | None, set[str]]:
        found = self._locate(request.rel_url.path_safe)
        if found is None:
            return None, set()
        endpoint, match = found
        route = endpoint.routes.get(request.method, endpoint.any)
        if route is None:
            return None, endpoint.allowed
        return web.UrlMappingMatchInfo(match, route), endpoint.allowed

    def match(self, path: str, method: str) -> tuple[Handler, dict[str, str]] | None:
        """The handler of `method` at `path` (as `path_safe` has it) and its path parameters, the
        root's included, as `resolve` finds them; None where no route of that method is."""
        found = self._locate(path)
        if found is None:
            return None
        endpoint, match = found
        route = endpoint.routes.get(method)
        return None if route is None else (route.handler, match)

    def _locate(self, path: str) -> tuple[_Endpoint, dict[str, str]] | None:
        if not path.startswith(self._head):
            return None
        cut = path.find("/", len(self._head))
        while cut != -1:  # the shortest root value first
            value = self._pattern.fullmatch(path, 0, cut)
            if value is not None:
                found = self._find(path[cut:])
                if found is not None:
                    found[1][self._parameter] = _unquote(value.group(self._parameter))
                    return found
            cut = path.find("/", cut + 1)
        return None

    def _find(self, rest: str) -> tuple[_Endpoint, dict[str, str]] | None:
        endpoint = self._plain.get(rest)
        if endpoint is not None:
            return endpoint, {}
        for literal, pattern, endpoint in self._dynamic:
            match = pattern.fullmatch(rest) if rest.startswith(literal) else None
            if match is not None:
                return endpoint, {key: _unquote(value) for key, value in match.groupdict().items()}
        return None

    @property
    def canonical(self) -> str:
        return self._root  # indexed by aiohttp under its literal head (`/runs`)

    def url_for(self, **kwargs: str) -> URL:
        raise NotImplementedError("routes under a root are not named")

    def add_prefix(self, prefix: str) -> None:
        raise NotImplementedError("routes under a root are not mounted in a sub-application")

    def get_info(self) -> _InfoDict:
        return {"formatter": self._root, "pattern": self._pattern}

    def raw_match(self, path: str) -> bool:
        return path == self._root

    def __len__(self) -> int:
        return len(self._plain) + len(self._dynamic)

    def __iter__(self) -> Iterator[web.ResourceRoute]:
        endpoints = [*self._plain.values(), *(endpoint for _, _, endpoint in self._dynamic)]
        return (route for endpoint in endpoints for route in endpoint.routes.values())


def _unquote(value: str) -> str:
    """A path parameter as aiohttp gives it: `path_safe` keeps `%2F` and `%25` quoted, the rest is decoded."""
    return value.replace("%2F", "/").replace("%25", "%") if "%" in value else value
