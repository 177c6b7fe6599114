"""Serve options: one definition shared by the CLI, the Python API and the pytest plugin.

Each option is a field of `ServeOptions` whose metadata says how the command line spells it, so
`mockllm serve --help`, `mockllm.Server(**options)` and the plugin can never drift apart: the
parser is built from the fields, and the API takes the field names as keywords.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from mockllm.replay.faults import Fault
    from mockllm.replay.normalize import Mask
    from mockllm.scenario.side_routes import SideRouteSpec

# The validators below import what they check with on first use: the pytest plugin builds its
# options from this module in every pytest start, and faults, masks and side routes pull in the
# replay and derivation layers (msgspec, the scenario loader), which a suite without a server never needs.

Headerless = Literal["conversation", "anonymous"]

# Built-in session headers: mockllm's own, and the one dsh's DeepSeek adapter sends.
SESSION_HEADERS = ("x-mockllm-session", "x-deepseek-harness-session-id")


def session_header_names(configured: Sequence[str] = ()) -> tuple[str, ...]:
    """The headers that name the calling session, in lookup order: the built-in ones, then the
    `configured` ones (`--session-header`), lowercased. Replay and record mode both read these, so
    a recording's sessions are the ones its replay will route to."""
    return tuple(h.lower() for h in (*SESSION_HEADERS, *configured))


def items(value: str | Iterable[str]) -> tuple[str, ...]:
    """A repeatable option's values; a lone string given where a list belongs is one item, not its characters."""
    return (value,) if isinstance(value, str) else tuple(value)


Bind = Literal["order", "content"]
DivergencePolicy = Literal["fail", "warn"]
# vcrpy's names (DESIGN.md §6): replay only; record what has no recording; replay and record what the
# recording cannot serve; record everything anew.
RecordMode = Literal["none", "once", "new_episodes", "rewrite"]

PACES = ("burst", "recorded")
BINDS = ("order", "content")
RECORD_MODES = ("none", "once", "new_episodes", "rewrite")
# `--upstream PROVIDER=URL`: the providers a live call can be sent to, named as users know them.
PROVIDERS = ("openai", "anthropic", "gemini", "ollama", "bedrock")


def parse_bool(value: str | bool) -> bool:
    """`true`/`false` (and yes/no, on/off, 1/0), as ini files and `--strict false` spell them."""
    if isinstance(value, bool):
        return value
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, not {value!r}")


def check_pace(value: Any) -> str:
    """`burst`, `recorded`, or a gap per event in milliseconds (a number >= 0)."""
    if isinstance(value, bool):
        raise ValueError(f"pace must be burst, recorded or a number of milliseconds, not {value!r}")
    if isinstance(value, int | float):
        value = repr(float(value))
    if isinstance(value, str) and value in PACES:
        return value
    try:
        if isinstance(value, str) and float(value) >= 0:
            return value
    except ValueError:
        pass
    raise ValueError(f"pace must be burst, recorded or a number of milliseconds >= 0, not {value!r}")


def check_bind(value: Any) -> Bind:
    """`order` (first-call order) or `content` (the script whose first recorded inputs match)."""
    if value not in BINDS:
        raise ValueError(f"bind must be 'order' or 'content', not {value!r}")
    return value  # type: ignore[no-any-return]


def check_divergence(value: Any) -> DivergencePolicy:
    if value not in ("fail", "warn"):
        raise ValueError(f"must be fail or warn, not {value!r}")
    return value  # type: ignore[no-any-return]


def check_record_mode(value: Any) -> RecordMode:
    if value not in RECORD_MODES:
        raise ValueError(f"record_mode must be one of {', '.join(RECORD_MODES)}, not {value!r}")
    return value  # type: ignore[no-any-return]


def parse_upstream(text: str) -> tuple[str, str]:
    """`URL` (the OpenAI-compatible base, `/v1` included: every provider not given its own) or
    `PROVIDER=URL`: (provider, URL), provider "" for the default. A ValueError says what is expected."""
    provider, sep, url = text.partition("=")
    if not sep or "://" in provider:
        provider, url = "", text
    elif provider not in PROVIDERS:
        raise ValueError(f"upstream {text!r}: unknown provider {provider!r}; expected URL or PROVIDER=URL with "
                         f"PROVIDER one of {', '.join(PROVIDERS)}")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"upstream {text!r}: expected an http:// or https:// URL, e.g. https://api.openai.com/v1 "
                         "or anthropic=https://api.anthropic.com")
    return provider, url.rstrip("/")


def mcp_server(text: str) -> str:
    """`--mcp NAME=URL` or `NAME=stdio:COMMAND ARGS`, as given; a bad one is an error saying what is expected."""
    from mockllm.mcp.spec import parse_mcp  # on first use, as the other validators' imports

    try:
        parse_mcp(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def check_speed(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"speed must be a number > 0, not {value!r}")
    try:
        speed = float(value)
    except ValueError:
        raise ValueError(f"speed must be a number > 0, not {value!r}") from None
    if not speed > 0:
        raise ValueError(f"speed must be a number > 0, not {value!r}")
    return speed


def check_patterns(values: Sequence[str]) -> tuple[re.Pattern[str], ...]:
    """Compiled `ignore_input` patterns; a bad one is a ValueError naming it."""
    compiled = []
    for pattern in values:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise ValueError(f"ignore_input {pattern!r} is not a regular expression: {exc}") from None
    return tuple(compiled)


# The registered dialects' names (`Dialect.name` of each in `mockllm.wire.DIALECTS`, in its order;
# a test keeps the two in step), known here without importing them: every test process validates
# its options (the plugin's controller, each xdist worker), and the dialects' imports cost ~15 ms.
DIALECT_NAMES = ("chat", "anthropic", "responses", "gemini", "ollama", "bedrock")


def check_warm(value: Any) -> str:
    """`--warm`: a comma list of dialect names (`chat`, `anthropic`, …), `all`, or `none`; an unknown
    name is a ValueError naming the known ones."""
    if not isinstance(value, str):
        raise ValueError(f"warm must be a comma list of dialects, all or none, not {value!r}")
    names = [name.strip() for name in value.split(",") if name.strip()]
    known = DIALECT_NAMES
    unknown = [name for name in names if name not in (*known, "all", "none")]
    if unknown or not names or (len(names) > 1 and ("all" in names or "none" in names)):
        raise ValueError(f"warm {value!r}: expected a comma list of {', '.join(known)}, or all, or none")
    return ",".join(names)


def warm_names(value: str) -> tuple[str, ...]:
    """The dialects `--warm` names (checked by `check_warm`)."""
    if value == "all":
        return DIALECT_NAMES
    return () if value == "none" else tuple(value.split(","))


def _option(default: Any, help: str, *, flag: str | None = None, metavar: str | None = None,
            choices: Sequence[str] | None = None, repeat: bool = False, kind: Any = None,
            switch: bool = False) -> Any:
    """A field with its command-line spelling in its metadata (`switch`: a flag that alone means true)."""
    meta = {"help": help, "flag": flag, "metavar": metavar, "choices": choices, "repeat": repeat,
            "kind": parse_bool if switch else kind, "switch": switch}
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
    pace: str = _option("burst", "how streams are paced: burst (at once), recorded (the recorded gaps), or a gap "
                        "per event in ms", metavar="burst|recorded|MS", kind=check_pace)
    speed: float = _option(1.0, "with --pace recorded: divide the recorded gaps by F (2 is twice as fast)",
                           metavar="F", kind=check_speed)
    strict: bool = _option(False, "answer a request that differs from the recording with 409 request_diverged",
                           metavar="true|false", switch=True)
    ignore_input: tuple[str, ...] = _option(
        (), "mask matches of REGEX in recorded and live inputs before comparing them (repeatable)",
        metavar="REGEX", repeat=True)
    normalize: bool = _option(True, "mask what agents vary between runs (UUIDs, hex ids, ISO dates and times, "
                              "measured durations, temp folders) before comparing inputs, and leave out the "
                              "<system-reminder> blocks a harness adds to tool results (not under --strict)",
                              metavar="true|false", switch=True)
    bind: Bind = _option("content", "bind a new live session to the unbound script whose recorded first request is "
                         "closest to its own (first inputs, then system prompt and offered tools; ties in recorded "
                         "order), or to the next script in first-call order", choices=BINDS)
    divergence: DivergencePolicy = _option(
        "fail", "whether a call that differs from the recording fails the run's checks (fail) or is only "
        "reported (warn)", choices=("fail", "warn"))
    faults: tuple[Fault, ...] = _option(
        (), 'a fault for the default runs, as JSON: {"call": N, "status": 429} or {"rate": R, "seed": S, "status": 500}'
        ' (fields: session, call, status, retry_after, cut_after, delay_ms, times; repeatable)',
        flag="--fault", metavar="JSON", repeat=True)
    record_mode: RecordMode = _option(
        "none", "none: replay only, never the network; once: record a run's scenario when it has no recording; "
        "new_episodes: replay, and send what the recording cannot serve to the upstream, then rewrite the scenario; "
        "rewrite: record every run anew", choices=RECORD_MODES)
    upstream: tuple[str, ...] = _option(
        (), "where record modes send live calls: the OpenAI-compatible base (/v1 included), or PROVIDER=URL for one "
        f"provider ({', '.join(PROVIDERS)}) (repeatable)", metavar="URL|PROVIDER=URL", repeat=True)
    mcp: tuple[str, ...] = _option(
        (), "an MCP server record modes proxy at …/mcp/NAME: NAME=URL (Streamable HTTP) or NAME=stdio:COMMAND ARGS "
        "(repeatable)", metavar="NAME=URL", repeat=True, kind=mcp_server)
    allow_run_record_modes: bool = _option(
        True, "with --record-mode none and an --upstream: whether a run created with POST /_mockllm/runs may choose a "
        'record mode of its own ("record_mode") and so reach that upstream; false refuses such a run (403), for a '
        "replay server shared with clients who must never record. With no --upstream nothing reaches the network",
        metavar="true|false", switch=True)
    warm: str = _option(
        "chat", "the dialects every recorded call is rendered in at start-up, off the request path (a comma list: "
        "chat, anthropic, responses, gemini, ollama, bedrock; or all, or none): chat, which nearly every agent "
        "speaks, by default; a call whose provider answer was recorded is rendered in its own dialect too, unless "
        "none. Others render each call on its first request", metavar="DIALECTS", kind=check_warm)
    journal_limit: int = _option(1000, "calls kept in each run's journal (older ones are counted, not kept)",
                                 metavar="N", kind=int)
    log_level: str = _option("warning", "what the server logs; info logs one line per model call",
                             choices=("debug", "info", "warning", "error"))

    def __post_init__(self) -> None:
        if self.headerless not in ("conversation", "anonymous"):
            raise ValueError(f"headerless must be 'conversation' or 'anonymous', not {self.headerless!r}")
        if self.journal_limit < 1:
            raise ValueError(f"journal_limit must be at least 1, not {self.journal_limit}")
        object.__setattr__(self, "pace", check_pace(self.pace))
        object.__setattr__(self, "speed", check_speed(self.speed))
        check_bind(self.bind)
        check_divergence(self.divergence)
        check_record_mode(self.record_mode)
        object.__setattr__(self, "warm", check_warm(self.warm))
        for name in ("session_headers", "side_routes", "ignore_input", "upstream", "mcp"):
            object.__setattr__(self, name, items(getattr(self, name)))
        for upstream in self.upstream:
            parse_upstream(upstream)  # raises ValueError naming the bad one
        if self.side_routes:
            from mockllm.scenario.side_routes import parse_side_route

            for route in self.side_routes:
                parse_side_route(route)  # raises ValueError naming the bad one
        if self.mcp:
            from mockllm.mcp.spec import parse_all as parse_mcp_all

            parse_mcp_all(self.mcp)  # raises ValueError naming the bad one
        if self.faults != ():  # anything but the default is parsed, a bad value named
            from mockllm.replay.faults import parse_faults

            object.__setattr__(self, "faults", parse_faults(self.faults))  # JSON texts or objects; a bad one is named
        check_patterns(self.ignore_input)

    @property
    def all_session_headers(self) -> tuple[str, ...]:
        """The built-in session headers, then the configured ones, lowercased, in lookup order."""
        return session_header_names(self.session_headers)

    @property
    def side_route_specs(self) -> list[SideRouteSpec]:
        from mockllm.scenario.side_routes import parse_side_route

        return [parse_side_route(route) for route in self.side_routes]

    def replace(self, **changes: Any) -> ServeOptions:
        """A copy with `changes`; an unknown name is a TypeError naming it."""
        return dataclasses.replace(self, **changes)


# An in-process server (the Python API, the pytest plugin) picks a free port unless given one.
# Its caller starts it for its own runs: the operator and the client are one, so a run may choose a record mode.
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


def argument_specs(prefix: str = "", only: Sequence[str] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(flag, argparse keyword arguments) per field (of the fields named in `only`, if given); `prefix`
    goes after the dashes and before the `dest` (`--mockllm-port`, dest `mockllm_port`), for a host
    such as pytest that shares one parser."""
    specs = []
    for f in dataclasses.fields(ServeOptions):
        if only is not None and f.name not in only:
            continue
        meta = f.metadata
        kwargs: dict[str, Any] = {"dest": prefix.replace("-", "_") + f.name, "help": meta["help"]}
        if meta["metavar"]:
            kwargs["metavar"] = meta["metavar"]
        if meta["choices"]:
            kwargs["choices"] = meta["choices"]
        if meta["kind"]:
            kwargs["type"] = meta["kind"]
        if meta["switch"]:
            kwargs.update(nargs="?", const=True)
        if meta["repeat"]:
            kwargs.update(action="append", default=[])
        else:
            kwargs["default"] = f.default
        specs.append(("--" + prefix + _flag(f).removeprefix("--"), kwargs))
    return specs


def _flag(f: dataclasses.Field[Any]) -> str:
    return f.metadata["flag"] or "--" + f.name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser, only: Sequence[str] | None = None) -> None:
    """Add one flag per ServeOptions field (per field named in `only`, if given) to `parser`: another
    verb that shares an option (`mockllm record --port`) spells and documents it as `serve` does."""
    for flag, kwargs in argument_specs(only=only):
        parser.add_argument(flag, **kwargs)


def from_arguments(args: argparse.Namespace | Mapping[str, Any]) -> ServeOptions:
    """The options a parsed command line (from a parser given `add_arguments`) asks for."""
    values = vars(args) if isinstance(args, argparse.Namespace) else args
    return ServeOptions(**{name: values[name] for name in names() if name in values})


# The serve options a run may set for itself, as JSON fields of `POST /_mockllm/runs`.
RUN_FIELDS = ("cwd", "pace", "speed", "strict", "ignore_input", "normalize", "bind", "divergence", "faults",
              "record_mode")


@dataclass(frozen=True, slots=True)
class RunSettings:
    """How one run replays: the server's options, each overridable per run."""

    cwd: str | None = None
    pace: str = "burst"
    speed: float = 1.0
    strict: bool = False
    ignore_input: tuple[str, ...] = ()
    normalize: bool = True
    bind: Bind = "content"
    divergence: DivergencePolicy = "fail"
    faults: tuple[Fault, ...] = ()
    record_mode: RecordMode = "none"
    # What a comparison masks: the run's own patterns, then the built-in normalisations.
    masks: tuple[Mask, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        from mockllm.replay.normalize import masks_for

        object.__setattr__(self, "masks", masks_for(check_patterns(self.ignore_input), self.normalize))

    @property
    def loose_reminders(self) -> bool:
        """Whether `<system-reminder>` blocks a harness adds to tool results are left out of comparisons
        (`normalize.without_reminders`): by default yes, never under `strict` or `normalize` off."""
        return self.normalize and not self.strict

    @property
    def gap_ms(self) -> float | None:
        """A fixed pace's gap per event, or None for burst and recorded."""
        return None if self.pace in PACES else float(self.pace)

    @classmethod
    def of(cls, options: ServeOptions) -> RunSettings:
        return cls(**{name: getattr(options, name) for name in RUN_FIELDS})

    def with_json(self, body: Mapping[str, Any]) -> RunSettings:
        """These settings with a run's JSON fields over them; a bad field is a ValueError naming it."""
        changes: dict[str, Any] = {}
        for name in RUN_FIELDS:
            if name not in body or body[name] is None:
                continue
            value = body[name]
            try:
                changes[name] = _run_field(name, value)
            except ValueError as exc:
                raise ValueError(f'"{name}": {exc}') from None
        # Unchanged, these settings themselves (frozen): a test's run usually sets nothing, and a
        # copy would build its masks again, a quarter of the server's work creating the run.
        return dataclasses.replace(self, **changes) if changes else self


def _run_field(name: str, value: Any) -> Any:
    if name == "cwd":
        if not isinstance(value, str):
            raise ValueError(f"must be a string, not {value!r}")
        return value
    if name == "pace":
        return check_pace(value)
    if name == "speed":
        return check_speed(value)
    if name == "divergence":
        return check_divergence(value)
    if name == "record_mode":
        return check_record_mode(value)
    if name in ("strict", "normalize"):
        if not isinstance(value, bool):
            raise ValueError(f"must be true or false, not {value!r}")
        return value
    if name == "bind":
        return check_bind(value)
    if name == "faults":
        if not isinstance(value, list):
            raise ValueError(f"must be a list of faults, not {value!r}")
        from mockllm.replay.faults import parse_faults

        return parse_faults(value)
    patterns = [value] if isinstance(value, str) else value
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise ValueError(f"must be a regular expression or a list of them, not {value!r}")
    check_patterns(patterns)
    return tuple(patterns)
