"""The pytest plugin (entry point `pytest11`): one mockllm server per test session, one run per test.

Glue only, over the Python API (`mockllm.api`):
- `mockllm_server` (session scope) serves `--mockllm-recordings DIR`, else the ini option
  `mockllm_recordings` (relative to the ini file), else `recordings/` under the rootdir. It starts
  on first use; if it cannot, the test session stops with the reason.
- `mockllm_run` (per test) is a fresh run of the scenario named by `@pytest.mark.mockllm("name")`.
  At teardown it ends the run, and the test errors (pytest's word for failing at teardown) when
  the run recorded any failure or, unless `consume=False`, left recorded calls unrequested.
- Every serve option is also `--mockllm-<flag>` and ini `mockllm_<name>`, generated from
  `ServeOptions`; the command line wins over the ini file. The port defaults to 0 (a free one).
- A test whose run fails leaves the run's one-file HTML report (the inspector's view of it) in
  `--mockllm-report-dir` (ini `mockllm_report_dir`; default `mockllm/` under pytest's cache
  folder), and the failure message names the file.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from mockllm.options import RUN_FIELDS, argument_specs

if TYPE_CHECKING:
    from mockllm.api import RunHandle, Server

RECORDINGS = "mockllm_recordings"
REPORT_DIR = "mockllm_report_dir"
NAME_KEPT = 180  # characters of a node id in a report's file name: file systems allow 255 bytes
PREFIX = "mockllm-"
MARKER = ("mockllm(scenario, consume=True): the scenario `mockllm_run` replays; consume=False allows calls left "
          "over; keywords such as bind=, strict=, ignore_input=, divergence=, faults=, pace= set this test's run")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mockllm", "mockllm replay server")
    group.addoption("--mockllm-recordings", dest=RECORDINGS, metavar="DIR", default=None,
                    help="scenario or suite folder the mockllm_server fixture serves (default: recordings/ "
                         "under the rootdir)")
    parser.addini(RECORDINGS, "scenario or suite folder mockllm_server serves, relative to this file")
    group.addoption("--mockllm-report-dir", dest=REPORT_DIR, metavar="DIR", default=None,
                    help="where a test whose mockllm run fails leaves the run's HTML report (default: mockllm/ "
                         "under pytest's cache folder)")
    parser.addini(REPORT_DIR, "where failing tests' mockllm HTML reports go, relative to this file")
    for flag, kwargs in argument_specs(PREFIX):
        repeat = kwargs.get("action") == "append"
        # None, not the field's default: an option not given on the command line falls back to the ini.
        group.addoption(flag, **{**kwargs, "default": [] if repeat else None, "help": "mockllm: " + kwargs["help"]})
        if repeat:
            parser.addini(kwargs["dest"], "mockllm: " + kwargs["help"], type="args")
        else:
            parser.addini(kwargs["dest"], "mockllm: " + kwargs["help"], type="string")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)


def recordings_path(config: pytest.Config) -> Path:
    """Where the recordings are: the flag (relative to the invocation folder), the ini option
    (relative to the ini file), else `recordings/` under the rootdir."""
    flag = config.getoption(RECORDINGS)
    if flag:
        return Path(config.invocation_params.dir, flag)
    ini = config.getini(RECORDINGS)
    if ini:
        return Path(config.inipath.parent if config.inipath else config.rootpath, ini)
    return config.rootpath / "recordings"


def serve_options(config: pytest.Config) -> dict[str, Any]:
    """The serve options given by flag or ini, by field name (what `mockllm.Server` takes)."""
    options: dict[str, Any] = {}
    for _, kwargs in argument_specs(PREFIX):
        dest, name = kwargs["dest"], kwargs["dest"].removeprefix(PREFIX.replace("-", "_"))
        given = config.getoption(dest) or config.getini(dest)
        if given not in (None, "", []):
            options[name] = kwargs["type"](given) if "type" in kwargs and isinstance(given, str) else given
    return options


@pytest.fixture(scope="session")
def mockllm_server(pytestconfig: pytest.Config) -> Iterator[Server]:
    """The running server (`.url`, `.run(name)`, `.scenarios`), shared by the whole session."""
    from mockllm.api import Server
    from mockllm.errors import MockllmError

    path = recordings_path(pytestconfig)
    try:
        server = Server(path, **serve_options(pytestconfig)).start()
    except (MockllmError, TypeError, ValueError) as exc:
        # A server that cannot start fails every test that needs it the same way: stop at once.
        pytest.exit(f"mockllm: the server for {path} did not start: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def mockllm_run(request: pytest.FixtureRequest, mockllm_server: Server) -> Iterator[RunHandle]:
    """A fresh run of the marker's scenario (`.base_url`, `.headers(session_id)`, `.report()`);
    checked at teardown."""
    from mockllm.api import AdminError

    scenario, consume, settings = _marker(request.node.get_closest_marker("mockllm"), mockllm_server)
    try:
        run = mockllm_server.run(scenario, **settings)
    except AdminError as exc:  # an unknown or broken scenario: the server's reason is the whole story
        pytest.fail(f"mockllm: no run of scenario {scenario!r}: {exc}", pytrace=False)
    yield run
    report = run.end()
    if report.problems(require_consumed=consume):
        where = "" if consume else " (consume=False: calls left over are allowed)"
        pytest.fail(f"{request.node.nodeid}: the mockllm run did not go as recorded{where}\n"
                    + report.describe(require_consumed=consume) + "\n" + save_report(request, run), pytrace=False)


def report_dir(config: pytest.Config) -> Path:
    """Where failing tests' reports go: the flag (relative to the invocation folder), the ini option
    (relative to the ini file), else `mockllm/` under pytest's cache folder."""
    flag = config.getoption(REPORT_DIR)
    if flag:
        return Path(config.invocation_params.dir, flag)
    ini = config.getini(REPORT_DIR)
    if ini:
        return Path(config.inipath.parent if config.inipath else config.rootpath, ini)
    try:
        cache = str(config.getini("cache_dir"))
    except ValueError:  # the cache provider is off (-p no:cacheprovider): its usual folder all the same
        cache = ".pytest_cache"
    return config.rootpath / os.path.expandvars(os.path.expanduser(cache)) / "mockllm"


def report_name(nodeid: str) -> str:
    """A file name for a test's report: its node id with `/`, `\\`, `:` and control characters as `_`
    (a long one cut, with a digest of the whole id to keep it unique)."""
    name = re.sub(r"[/\\:\x00-\x1f\x7f]", "_", nodeid)
    if len(name) > NAME_KEPT:
        name = name[:NAME_KEPT] + "-" + hashlib.blake2b(nodeid.encode(), digest_size=6).hexdigest()
    return name + ".html"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                               call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A test that failed on its own (its run may be fine: an assertion on the agent's answer) also
    leaves its run's report, named in a section of its failure."""
    report: pytest.TestReport = yield
    run = getattr(item, "funcargs", {}).get("mockllm_run")
    if report.when == "call" and report.failed and run is not None:
        report.sections.append(("mockllm", save_report(item, run)))
    return report


def save_report(item: pytest.Item | pytest.FixtureRequest, run: RunHandle) -> str:
    """Save the run's HTML report for a failed test; the line that names the file (or why there is none)."""
    from mockllm.errors import MockllmError

    node = item.node if isinstance(item, pytest.FixtureRequest) else item
    path = report_dir(node.config) / report_name(node.nodeid)
    try:
        html = run.report_html()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html, encoding="utf-8")
    except (MockllmError, OSError) as exc:  # the report is a help: its absence must not hide the failure
        return f"mockllm report: not saved ({exc})"
    return f"mockllm report: {path}"


def _marker(marker: pytest.Mark | None, server: Server) -> tuple[str, bool, dict[str, Any]]:
    """The marker's scenario, `consume`, and the run settings it gives this test (DESIGN.md §6)."""
    if marker is None:
        if len(server.scenarios) == 1:  # one scenario loaded: naming it adds nothing
            return server.scenarios[0], True, {}
        pytest.fail(f'mockllm_run needs @pytest.mark.mockllm("scenario"); loaded: {", ".join(server.scenarios)}',
                    pytrace=False)
    args, kwargs = marker.args, dict(marker.kwargs)
    consume = kwargs.pop("consume", True)
    unknown = sorted(set(kwargs) - set(RUN_FIELDS))
    if len(args) != 1 or not isinstance(args[0], str) or unknown or not isinstance(consume, bool):
        why = f"; unknown: {', '.join(unknown)}" if unknown else ""
        pytest.fail(f'expected @pytest.mark.mockllm("scenario", consume=True), got {marker}{why}; run settings '
                    f"it takes: {', '.join(RUN_FIELDS)}", pytrace=False)
    return args[0], consume, kwargs
