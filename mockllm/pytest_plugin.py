"""The pytest plugin (entry point `pytest11`): one mockllm server per test session, one run per test.

Glue only, over the Python API (`mockllm.api`):
- `mockllm_server` (session scope) serves `--mockllm-recordings DIR`, else the ini option
  `mockllm_recordings` (relative to the ini file), else `recordings/` under the rootdir. It starts
  on first use; if it cannot, the test session stops with the reason.
- `mockllm_run` (per test) is a fresh run of the scenario named by `@pytest.mark.mockllm("name")`;
  a marker that names none (`@pytest.mark.mockllm()`, or options only) means the scenario named
  after the test, `{file stem}/{test}` (DESIGN.md §6). At teardown it ends the run, and the test
  errors (pytest's word for failing at teardown) when the run recorded any failure or, unless
  `consume=False`, left recorded calls unrequested; the message ends with the command that
  records that test again.
- Record modes (`--mockllm-record-mode`, `--mockllm-upstream`): a run that records keeps its
  recording only if its test passed; the test's report (a `mockllm` section, and the session's
  summary) says what was recorded, or why not. With `CI` set a record mode is refused unless
  `--mockllm-record-in-ci` is given: recording in CI is almost always a mistake that burns keys.
- The server runs in a process of its own beside the test process (`--mockllm-server-mode
  process`, ini `mockllm_server_mode`, the default), so it does not share the tests' interpreter
  lock; when the recordings folder exists it is launched as the session starts, so it loads while
  pytest collects, and stopped after collection if no collected test uses it; `thread` runs it in
  a thread of the test process, as `mockllm.Server` does by default. Earlier still, as pytest
  loads its plugins, a spare server process is started when the session will likely need one (see
  `pytest_plugin_registered`): it makes the server's imports on a core pytest leaves idle, and the
  session's server is that process.
- Every serve option is also `--mockllm-<flag>` and ini `mockllm_<name>`, generated from
  `ServeOptions`; the command line wins over the ini file. The port defaults to 0 (a free one).
- A test whose run fails leaves the run's one-file HTML report (the inspector's view of it) in
  `--mockllm-report-dir` (ini `mockllm_report_dir`; default `mockllm/` under pytest's cache
  folder), and the failure message names the file.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from mockllm.options import RUN_FIELDS
from mockllm.plugin_config import (
    PREFIX,
    RECORD_IN_CI,
    RECORDINGS,
    REPORT_DIR,
    SERVER_MODE,
    SERVER_MODES,
    expected_orders,
    likely_to_serve,
    recordings_path,
    report_dir,
    serve_flags,
    serve_options,
    server_mode,
)
from mockllm.plugin_names import report_name, scenario_for

if TYPE_CHECKING:
    from mockllm.api import RunHandle, Server
    from mockllm.replay.report import RecordingReport
    from mockllm.shared_server import SharedServer  # noqa: F401  (named in a StashKey's type)

MARKER = ("mockllm(scenario, consume=True): the scenario `mockllm_run` replays (none: the one named after the test, "
          "{file stem}/{test}); consume=False allows calls left over; keywords such as bind=, strict=, ignore_input=, "
          "divergence=, faults=, pace=, record_mode= set this test's run")
# Each test's reports by phase, for its run's teardown: a recording is kept only if the test passed.
REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()
# What each test's run recorded (or why not), for the session's summary.
RECORDED = pytest.StashKey[list[tuple[str, "RecordingReport"]]]()
# The server process launched while pytest collects (see pytest_sessionstart), until a test asks for it.
LAUNCHED = pytest.StashKey["Server"]()
FIXTURES = ("mockllm_run", "mockllm_server")
# The test pytest runs after each one (None after the last), for its run to be created ahead.
NEXT = pytest.StashKey["pytest.Item | None"]()
# Under xdist, the controller's server, shared by every worker (mockllm.shared_server).
SHARED = pytest.StashKey["SharedServer"]()
# The recordings folder, made absolute once: collection asks about every path it meets.
RECORDINGS_ROOT = pytest.StashKey[Path]()
URL_KEY = "mockllm_url"  # its address, in each worker's `workerinput`
# The names of the scenarios the session's server serves, for tests with no marker (see _served).
SERVED = pytest.StashKey[frozenset[str]]()



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
    group.addoption("--mockllm-server-mode", dest=SERVER_MODE, choices=SERVER_MODES, default=None,
                    help="where mockllm_server runs: a process of its own beside the test process (process, the "
                         "default: the server does not share the tests' interpreter lock) or a thread in it (thread)")
    parser.addini(SERVER_MODE, "where mockllm_server runs: process (default) or thread")
    group.addoption("--mockllm-record-in-ci", dest=RECORD_IN_CI, action="store_true", default=False,
                    help="allow a record mode other than none when the CI environment variable is set")
    for flag, kwargs in serve_flags():
        group.addoption(flag, **{**kwargs, "help": "mockllm: " + kwargs["help"]})
        if kwargs.get("action") == "append":
            parser.addini(kwargs["dest"], "mockllm: " + kwargs["help"], type="args")
        else:
            parser.addini(kwargs["dest"], "mockllm: " + kwargs["help"], type="string")


def pytest_plugin_registered(plugin: object) -> None:
    """pytest's configuration, as soon as this plugin sees it: while pytest loads its plugins (it
    registers this one among them), long before it reads conftests, configures, and starts the
    session. When the session will likely launch a server process (`pytest_sessionstart`), a spare
    one starts now and makes the server's imports (most of its start) on a core that pytest, busy
    with its own start, leaves idle; the launch then takes it. Measured on 2 x 200 x 5 (-n 2): the
    server's start no longer delays xdist's workers (see docs/benchmarks.md). The spare is also told
    what the launch will likely order (`plugin_config.expected_orders`), and loads it meanwhile: the launch's
    orders are served from that load only if they are the same and the folder has not changed."""
    if isinstance(plugin, pytest.Config) and likely_to_serve(plugin):
        from mockllm.process import start_spare

        with contextlib.suppress(OSError):
            start_spare(expected_orders(plugin))  # else the session launches its server as ever


def _drop_spare() -> None:
    """Stop a spare server process the session did not take (there is none if its module was never imported)."""
    process = sys.modules.get("mockllm.process")
    if process is not None:
        process.drop_spare()


def pytest_unconfigure(config: pytest.Config) -> None:
    _drop_spare()  # a session that never started (--help, a usage error)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)
    config.stash[RECORDED] = []
    server_mode(config)  # a bad ini value is a usage error now, not at the first test
    mode = serve_options(config).get("record_mode", "none")
    if mode != "none" and in_ci() and not config.getoption(RECORD_IN_CI):
        raise pytest.UsageError(_ci_refusal(mode))


def pytest_sessionstart(session: pytest.Session) -> None:
    """Launch the server process now, when this project has recordings to serve: it starts (a
    Python start, its imports, loading the recordings) while pytest collects, instead of while the
    first test waits. Stopped again after collection if no collected test uses it. The launch
    takes the spare started as pytest loaded its plugins; a spare it did not take is stopped."""
    try:
        _launch(session.config)
    finally:
        _drop_spare()


def _launch(config: pytest.Config) -> None:
    if server_mode(config) != "process" or config.option.collectonly or _shared_url(config):
        return  # a worker of xdist's: the controller's server is its own
    path = recordings_path(config)
    if not path.is_dir():
        return
    from mockllm.api import Server
    from mockllm.errors import MockllmError

    if config.pluginmanager.has_plugin("dsession"):  # xdist's controller: one server for every worker
        from mockllm.shared_server import SharedServer

        # If it cannot even be launched, each worker starts its own, and says what is wrong where a test needs it.
        with contextlib.suppress(MockllmError, TypeError, ValueError, OSError):
            config.stash[SHARED] = SharedServer(path, serve_options(config))
        return
    try:
        config.stash[LAUNCHED] = Server(path, process=True, **serve_options(config)).launch()
    except (MockllmError, TypeError, ValueError, OSError):
        return  # the fixture starts it again, and reports what is wrong where a test needs it


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist's controller, before a worker starts: the shared server's address goes with it."""
    shared = node.config.stash.get(SHARED, None)
    if shared is not None:
        node.workerinput[URL_KEY] = shared.url


def _shared_url(config: pytest.Config) -> str | None:
    """In an xdist worker, the address of the server its controller shares with every worker."""
    url = getattr(config, "workerinput", {}).get(URL_KEY)
    return url if isinstance(url, str) else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    item.stash[NEXT] = nextitem  # for mockllm_run's teardown: it prepares the next test's run
    return (yield)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """The server process's log records of the test's calls, logged in the test's process as its call
    ends: they come back at admin calls (`Server.relay_logs`), and the next is the teardown's, whose
    captured log the report of a failed call does not show. Last of the wrappers, so the innermost:
    inside the call's log capture. The server logs a call once its answer is written, which may be
    after the test has read it: a failed call makes one admin call first (it relays, as each does),
    which the server answers after that, so its report shows every record of its calls. A passed
    call's may come at its teardown instead, where nothing shows them either way."""
    passed = False
    try:
        result = yield
        passed = True
        return result
    finally:
        server = getattr(item, "funcargs", {}).get("mockllm_server")
        if server is not None:
            if passed:
                server.relay_logs()
            else:
                with contextlib.suppress(Exception):  # only a help: the test's own failure is the story
                    server.admin("GET", f"{server.url}/_mockllm/health")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Never look for tests in a recorded scenario's folder under the recordings folder: it holds
    logs, not tests, and pytest made a directory node of each (its conftest lookups, its listing),
    0.3 ms per recording: a third of a second of every run of a suite with 1,000 recordings. Only
    folders that look like a recording (a file every recording has) under the recordings folder are
    left out; anything else is pytest's to decide."""
    root = config.stash.get(RECORDINGS_ROOT, None)
    if root is None:
        root = config.stash[RECORDINGS_ROOT] = Path(os.path.abspath(recordings_path(config)))
    if collection_path.is_relative_to(root) and collection_path != root and _recorded_here(collection_path):
        return True
    return None


def _recorded_here(folder: Path) -> bool:
    """Whether `folder` holds a file every recording has (cheap: a few stats, no scenario loaded)."""
    from mockllm.dsh.names import EMBEDDINGS_FILE, MANIFEST_FILE, PRIMARY_FILE, SIDECAR_FILE

    return any((folder / name).is_file() for name in (PRIMARY_FILE, MANIFEST_FILE, SIDECAR_FILE, EMBEDDINGS_FILE))


def pytest_collection_finish(session: pytest.Session) -> None:
    if not any(name in getattr(item, "fixturenames", ()) for item in session.items for name in FIXTURES):
        _stop_launched(session.config)


def pytest_sessionfinish(session: pytest.Session) -> None:
    _stop_launched(session.config)
    shared = session.config.stash.get(SHARED, None)
    if shared is not None:  # the controller, once every worker is done
        shared.stop()


def _stop_launched(config: pytest.Config) -> None:
    launched = config.stash.get(LAUNCHED, None)
    if launched is not None:
        del config.stash[LAUNCHED]
        launched.stop()


def in_ci() -> bool:
    """Whether the `CI` environment variable says this is a CI run (set, and not false or 0)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _ci_refusal(mode: str) -> str:
    return (f"mockllm: record mode {mode} refused: CI is set, and recording in CI is almost always a mistake "
            "that burns keys. Replay in CI (record mode none, the default); pass --mockllm-record-in-ci to record "
            "anyway")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    shared = config.stash.get(SHARED, None)
    if shared is not None and shared.failure is not None:
        terminalreporter.section("mockllm")
        terminalreporter.line(f"the server shared by xdist's workers did not start: {shared.failure}")
    recorded = config.stash.get(RECORDED, [])
    if recorded:
        terminalreporter.section("mockllm recordings")
        for nodeid, recording in recorded:
            terminalreporter.line(f"{'recorded' if recording.written else 'not recorded'}: {nodeid}: "
                                  f"{recording.message}")


@pytest.fixture(scope="session")
def mockllm_server(pytestconfig: pytest.Config) -> Iterator[Server]:
    """The running server (`.url`, `.run(name)`, `.scenarios`), shared by the whole session."""
    from mockllm.api import Server
    from mockllm.errors import MockllmError

    path = recordings_path(pytestconfig)
    launched = pytestconfig.stash.get(LAUNCHED, None)
    if launched is not None:
        del pytestconfig.stash[LAUNCHED]
    shared = _shared_url(pytestconfig)
    refused: str | None = None
    try:
        if shared is not None:  # an xdist worker: its controller's server
            from mockllm.shared_server import attach

            server = attach(shared, path, serve_options(pytestconfig))
        else:
            server = (launched or Server(path, process=server_mode(pytestconfig) == "process",
                                         **serve_options(pytestconfig))).start()
    except (MockllmError, TypeError, ValueError) as exc:
        refused = str(exc) if shared is not None else f"the server for {path} did not start: {exc}"
    if refused is not None:  # outside the except clause: the exception's traceback says nothing more
        _cannot_serve(pytestconfig, f"mockllm: {refused}")
    try:
        yield server
    finally:
        server.stop()


def _cannot_serve(config: pytest.Config, message: str) -> NoReturn:
    """A server that cannot start fails every test that needs it the same way: the session stops at
    once, except in an xdist worker, where pytest.exit breaks xdist (an INTERNALERROR): there each
    test fails with the message instead."""
    if hasattr(config, "workerinput"):
        pytest.fail(message, pytrace=False)
    pytest.exit(message, returncode=pytest.ExitCode.USAGE_ERROR)


@pytest.fixture
def mockllm_run(request: pytest.FixtureRequest, mockllm_server: Server) -> Iterator[RunHandle]:
    """A fresh run of the marker's scenario (`.base_url`, `.headers(session_id)`, `.report()`);
    checked at teardown."""
    from mockllm.api import AdminError

    node = request.node
    scenario, consume, settings = _marker(node.get_closest_marker("mockllm"), mockllm_server, node)
    mode = settings.get("record_mode", mockllm_server.options.record_mode)
    if mode != "none" and in_ci() and not request.config.getoption(RECORD_IN_CI):
        pytest.fail(_ci_refusal(mode), pytrace=False)
    try:
        run = mockllm_server.run(scenario, **settings)
    except AdminError as exc:  # an unknown or broken scenario: the server's reason is the whole story
        pytest.fail(f"mockllm: no run of scenario {scenario!r}: {exc}\n{_again(request, 'once')}", pytrace=False)
    yield run
    reports = node.stash.get(REPORTS, {})
    passed = "call" in reports and reports["call"].passed
    _prepare_next(node, mockllm_server)  # goes behind the run's end, in the same write
    report = run.end(discard=None if passed else "the test did not pass")
    if report.recording is not None:
        if report.recording.written and SERVED in request.config.stash:
            del request.config.stash[SERVED]  # the server serves it from now on: ask again
        node.add_report_section("teardown", "mockllm", report.recording.message)
        request.config.stash[RECORDED].append((node.nodeid, report.recording))
    if report.problems(require_consumed=consume):
        where = "" if consume else " (consume=False: calls left over are allowed)"
        pytest.fail(f"{node.nodeid}: the mockllm run did not go as recorded{where}\n"
                    + report.describe(require_consumed=consume) + "\n" + save_report(request, run) + "\n"
                    + _again(request, "rewrite"), pytrace=False)


def _prepare_next(node: pytest.Item, server: Server) -> None:
    """Create the next test's run behind this test's run's end, its answer read when that test asks
    for it (`Server.prepare`): pytest's work between the two tests hides the round trip, and the
    server reads both calls in one wake-up. Only a replay (record mode none): a run that records
    depends on what the tests before it left."""
    following = node.stash.get(NEXT, None)
    if following is None or "mockllm_run" not in getattr(following, "fixturenames", ()):
        return
    try:
        scenario, _, settings = _marker(following.get_closest_marker("mockllm"), server, following)
        if settings.get("record_mode", server.options.record_mode) == "none":
            server.prepare(scenario, behind_next_call=True, **settings)
    except (pytest.fail.Exception, Exception):
        # Only a head start: the next test's own setup meets whatever went wrong, and says so there,
        # not in this test's teardown.
        return


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                               call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A test that failed on its own (its run may be fine: an assertion on the agent's answer) also
    leaves its run's report, named in a section of its failure. Each phase's report is kept for the
    run's teardown: a recording is kept only if the test passed."""
    report: pytest.TestReport = yield
    item.stash.setdefault(REPORTS, {})[report.when] = report
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


def _again(request: pytest.FixtureRequest, mode: str) -> str:
    """The command that records this test again (`mode`: once for a test with no recording)."""
    from mockllm.server.advice import EXAMPLE_UPSTREAM, upstream_note

    config = request.config
    command = ["pytest", _invoked_path(config, request.node.nodeid), "--mockllm-record-mode", mode]
    # Upstreams from the ini are read again when the command runs; flags are not: repeat those.
    flags = config.getoption(PREFIX.replace("-", "_") + "upstream") or []
    given = bool(flags or serve_options(config).get("upstream"))
    for upstream in flags if given else [EXAMPLE_UPSTREAM]:
        command += ["--mockllm-upstream", upstream]
    if in_ci() and not config.getoption(RECORD_IN_CI):
        command.append("--mockllm-record-in-ci")
    return "record this test again: " + shlex.join(command) + (upstream_note(()) if not given else "")


def _invoked_path(config: pytest.Config, nodeid: str) -> str:
    """`nodeid` as a path from the folder pytest was started in (a node id is relative to the
    rootdir, and the two differ when pytest runs from a sub-folder), so the command pastes there."""
    file, sep, rest = nodeid.partition("::")
    path = os.path.relpath(config.rootpath / file, config.invocation_params.dir)
    return Path(path).as_posix() + sep + rest


def _marker(marker: pytest.Mark | None, server: Server, item: pytest.Item) -> tuple[str, bool, dict[str, Any]]:
    """The marker's scenario, `consume`, and the run settings it gives this test (DESIGN.md §6)."""
    if marker is None:
        if server.options.record_mode != "none":
            return scenario_for(item), True, {}
        names = _served(item.config, server)
        if len(names) == 1:  # naming it adds nothing
            return next(iter(names)), True, {}
        if scenario_for(item) in names:
            return scenario_for(item), True, {}
        pytest.fail(f'mockllm_run needs @pytest.mark.mockllm("scenario"); loaded: {", ".join(sorted(names))}. '
                    f"@pytest.mark.mockllm() names the scenario after the test: {scenario_for(item)}", pytrace=False)
    args, kwargs = marker.args or (scenario_for(item),), dict(marker.kwargs)
    consume = kwargs.pop("consume", True)
    unknown = sorted(set(kwargs) - set(RUN_FIELDS))
    if len(args) != 1 or not isinstance(args[0], str) or unknown or not isinstance(consume, bool):
        why = f"; unknown: {', '.join(unknown)}" if unknown else ""
        pytest.fail(f'expected @pytest.mark.mockllm("scenario", consume=True), got {marker}{why}; run settings '
                    f"it takes: {', '.join(RUN_FIELDS)}", pytrace=False)
    return args[0], consume, kwargs


def _served(config: pytest.Config, server: Server) -> frozenset[str]:
    """The names of the scenarios `server` serves, asked once per session: each ask is an admin
    call that lists every scenario (5 ms at 200 scenarios, 24 ms at 1,000), and every test with no
    marker asked twice (its setup, and the test before it preparing its run). Asked again after a
    run recorded one (`mockllm_run`'s teardown): a test's marker may record in a replaying session.
    Under xdist each worker asks once; a recording made in another worker is not seen (a test
    named after a scenario another test records is a contrived case)."""
    served = config.stash.get(SERVED, None)
    if served is None:
        served = config.stash[SERVED] = frozenset(server.scenarios)
    return served
