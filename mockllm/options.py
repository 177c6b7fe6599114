"""Serve options: one definition shared by the CLI, the Python API and the pytest plugin.

Each option is a field of `ServeOptions` whose metadata says how the command line spells it, so
`mockllm serve --help`, `mockllm.Server(**options)` and the plugin can never drift apart: the
parser is built from the fields, and the API takes the field names as keywords.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mockllm.side_routes import SideRouteSpec, parse_side_route

Headerless = Literal["conversation", "anonymous"]

# Built-in session headers: mockllm's own, and the one dsh's DeepSeek adapter sends.
SESSION_HEADERS = ("x-mockllm-session", "x-deepseek-harness-session-id")


def _option(default: Any, help: str, *, flag: str | None = None, metavar: str | None = None,
            choices: Sequence[str] | None = None, repeat: bool = False, kind: type | None = None) -> Any:
    """A field with its command-line spelling in its metadata."""
    meta = {"help": help, "flag": flag, "metavar": metavar, "choices": choices, "repeat": repeat, "kind": kind}
    if repeat:
        return field(default_factory=tuple, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """How a server listens, routes and replays. Every field is also a `mockllm serve` flag."""

    host: str = _option("127.0.0.1", "address to listen on")
    port: int = _option(8080, "port to listen on; 0 picks a free one", kind=int)
    session_headers: tuple[str, ...] = _option(
        (), "another request header naming the calling session (repeatable)",
        flag="--session-header", metavar="NAME", repeat=True)
    headerless: Headerless = _option(
        "conversation", "route requests with no session header by their conversation (default) or as one session",
        choices=("conversation", "anonymous"))
    cwd: str | None = _option(None, "replaces {{cwd}} in recorded strings for the default runs", metavar="DIR")
    side_routes: tuple[str, ...] = _option(
        (), "serve requests for model MODEL from FILE (in each scenario's folder), not from a session (repeatable)",
        flag="--side-route", metavar="MODEL=FILE", repeat=True)
    journal_limit: int = _option(1000, "calls kept in each run's journal (older ones are counted, not kept)",
                                 metavar="N", kind=int)
    log_level: str = _option("warning", "what the server logs; info logs one line per model call",
                             choices=("debug", "info", "warning", "error"))

    def __post_init__(self) -> None:
        if self.headerless not in ("conversation", "anonymous"):
            raise ValueError(f"headerless must be 'conversation' or 'anonymous', not {self.headerless!r}")
        if self.journal_limit < 1:
            raise ValueError(f"journal_limit must be at least 1, not {self.journal_limit}")
        for name in ("session_headers", "side_routes"):
            value = getattr(self, name)
            # A lone string given where a list belongs is one item, not its characters.
            object.__setattr__(self, name, (value,) if isinstance(value, str) else tuple(value))
        for route in self.side_routes:
            parse_side_route(route)  # raises ValueError naming the bad one

    @property
    def all_session_headers(self) -> tuple[str, ...]:
        """The built-in session headers, then the configured ones, lowercased, in lookup order."""
        return tuple(h.lower() for h in SESSION_HEADERS + self.session_headers)

    @property
    def side_route_specs(self) -> list[SideRouteSpec]:
        return [parse_side_route(route) for route in self.side_routes]

    def replace(self, **changes: Any) -> ServeOptions:
        """A copy with `changes`; an unknown name is a TypeError naming it."""
        return dataclasses.replace(self, **changes)


# An in-process server (the Python API, the pytest plugin) picks a free port unless given one.
IN_PROCESS_DEFAULTS: dict[str, Any] = {"port": 0}


def in_process(**changes: Any) -> ServeOptions:
    """The options of an in-process server: ServeOptions field names as keywords, a free port by default.

    An unknown name is a TypeError listing the known ones.
    """
    unknown = sorted(set(changes) - set(names()))
    if unknown:
        raise TypeError(f"unknown serve option(s) {', '.join(unknown)}; known: {', '.join(names())}")
    return ServeOptions(**{**IN_PROCESS_DEFAULTS, **changes})


def names() -> tuple[str, ...]:
    """Every option's field name, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(ServeOptions))


def argument_specs(prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
    """(flag, argparse keyword arguments) per field; `prefix` goes after the dashes and before the
    `dest` (`--mockllm-port`, dest `mockllm_port`), for a host such as pytest that shares one parser."""
    specs = []
    for f in dataclasses.fields(ServeOptions):
        meta = f.metadata
        kwargs: dict[str, Any] = {"dest": prefix.replace("-", "_") + f.name, "help": meta["help"]}
        if meta["metavar"]:
            kwargs["metavar"] = meta["metavar"]
        if meta["choices"]:
            kwargs["choices"] = meta["choices"]
        if meta["kind"]:
            kwargs["type"] = meta["kind"]
        if meta["repeat"]:
            kwargs.update(action="append", default=[])
        else:
            kwargs["default"] = f.default
        specs.append(("--" + prefix + _flag(f).removeprefix("--"), kwargs))
    return specs


def _flag(f: dataclasses.Field[Any]) -> str:
    return f.metadata["flag"] or "--" + f.name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per ServeOptions field to `parser`."""
    for flag, kwargs in argument_specs():
        parser.add_argument(flag, **kwargs)


def from_arguments(args: argparse.Namespace | Mapping[str, Any]) -> ServeOptions:
    """The options a parsed command line (from a parser given `add_arguments`) asks for."""
    values = vars(args) if isinstance(args, argparse.Namespace) else args
    return ServeOptions(**{name: values[name] for name in names() if name in values})
