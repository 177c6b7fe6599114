"""What the pytest plugin's configuration says (`mockllm.pytest_plugin`): its flags and ini options,
read once pytest has parsed them (the recordings and report folders, the server mode, the serve
options), or guessed before it has (`expected_orders`: what a spare server process loads ahead).

A flag wins over its ini option; a flag's folder is relative to the folder pytest was invoked
from, an ini option's to the ini file.
"""

from __future__ import annotations

import argparse
import os
import shlex
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest

from mockllm.options import ServeOptions, argument_specs, in_process

RECORDINGS = "mockllm_recordings"
REPORT_DIR = "mockllm_report_dir"
PREFIX = "mockllm-"
RECORD_IN_CI = "mockllm_record_in_ci"
SERVER_MODE = "mockllm_server_mode"
SERVER_MODES = ("process", "thread")


def serve_flags() -> list[tuple[str, dict[str, Any]]]:
    """The serve options' flags, defaulting to None (or no value given): one not given falls back to the ini."""
    return [(flag, {**kwargs, "default": [] if kwargs.get("action") == "append" else None})
            for flag, kwargs in argument_specs(PREFIX)]


def recordings_path(config: pytest.Config) -> Path:
    """Where the recordings are: the flag (relative to the invocation folder), the ini option
    (relative to the ini file), else `recordings/` under the rootdir."""
    return _recordings_path(config, config.getoption(RECORDINGS))


def _recordings_path(config: pytest.Config, flag: str | None) -> Path:
    """`recordings_path`, with `flag` the flag's value (None: not given)."""
    return _given_folder(config, RECORDINGS, flag) or config.rootpath / "recordings"


def report_dir(config: pytest.Config) -> Path:
    """Where failing tests' reports go: the flag (relative to the invocation folder), the ini option
    (relative to the ini file), else `mockllm/` under pytest's cache folder."""
    given = _given_folder(config, REPORT_DIR, config.getoption(REPORT_DIR))
    if given is not None:
        return given
    try:
        cache = str(config.getini("cache_dir"))
    except ValueError:  # the cache provider is off (-p no:cacheprovider): its usual folder all the same
        cache = ".pytest_cache"
    return config.rootpath / os.path.expandvars(os.path.expanduser(cache)) / "mockllm"


def _given_folder(config: pytest.Config, name: str, flag: str | None) -> Path | None:
    """The folder option `name` gives: `flag` (relative to the invocation folder), else its ini
    option (relative to the ini file); None when neither does."""
    if flag:
        return Path(config.invocation_params.dir, flag)
    ini = config.getini(name)
    if ini:
        return Path(config.inipath.parent if config.inipath else config.rootpath, ini)
    return None


def server_mode(config: pytest.Config) -> str:
    """`process` (the default) or `thread`: the flag, else the ini option."""
    mode = str(config.getoption(SERVER_MODE) or config.getini(SERVER_MODE) or "process").strip()
    if mode not in SERVER_MODES:
        raise pytest.UsageError(f"mockllm: {SERVER_MODE} must be process or thread, not {mode!r}")
    return mode


def serve_options(config: pytest.Config) -> dict[str, Any]:
    """The serve options given by flag or ini, by field name (what `mockllm.Server` takes)."""
    return _serve_options(config, config.getoption)


def _serve_options(config: pytest.Config, flag: Callable[[str], Any]) -> dict[str, Any]:
    """The serve options given by flag (`flag(dest)`: the flag's value, None or [] when not given)
    or ini, by field name."""
    options: dict[str, Any] = {}
    for _, kwargs in argument_specs(PREFIX):
        dest, name = kwargs["dest"], kwargs["dest"].removeprefix(PREFIX.replace("-", "_"))
        given = flag(dest) or config.getini(dest)
        if given not in (None, "", []):
            options[name] = kwargs["type"](given) if "type" in kwargs and isinstance(given, str) else given
    return options


def likely_to_serve(config: pytest.Config) -> bool:
    """Whether the session will likely launch a server process, judged before the command line's
    mockllm options are parsed (the ini file and pytest's own options are read by then). A wrong
    guess costs a spare's imports, on an idle core, and it is stopped as the session starts."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not hasattr(socket, "send_fds"):
        return False  # a worker uses its controller's server; the spare needs to be passed a socket
    try:
        known = config.known_args_namespace
        if known.collectonly or known.help or known.version:
            return False
        if str(config.getini(SERVER_MODE) or "process").strip() != "process":
            return False
        folder = _recordings_path(config, None)
    except (AttributeError, ValueError):
        return False  # registered before pytest read its configuration: no guess
    given = any(arg.startswith("--mockllm-recordings") for arg in config.invocation_params.args)
    return given or folder.is_dir()


class _Guess(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ValueError(message)  # not argparse's exit: a guess that cannot be made is no guess


def expected_orders(config: pytest.Config) -> tuple[Path, ServeOptions] | None:
    """What the session's launch will likely order the server process to serve: the recordings
    folder (resolved) and the serve options, from the ini file and the command line read as pytest
    will read them (it has not yet: its plugins are loading). None when they cannot be told."""
    parser = _Guess(add_help=False, allow_abbrev=False)
    parser.add_argument("--mockllm-recordings", dest=RECORDINGS, default=None)
    for flag, kwargs in serve_flags():
        parser.add_argument(flag, **{**kwargs, "help": argparse.SUPPRESS})
    # In pytest's order (`Config._preparse`): the ini's addopts, then PYTEST_ADDOPTS, then the command line.
    args = [*config.getini("addopts"), *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
            *config.invocation_params.args]
    try:
        given, _ = parser.parse_known_args(args)
        options = in_process(**_serve_options(config, lambda dest: getattr(given, dest)))
    except (TypeError, ValueError):
        return None
    return _recordings_path(config, getattr(given, RECORDINGS)).resolve(), options
