"""mockllm: replay recorded LLM agent session trees over OpenAI-compatible SSE, offline."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mockllm.errors import MockllmError, NotAScenarioError, RecordingError, ScenarioError

if TYPE_CHECKING:
    from mockllm.api import AdminError, AsyncServer, Server, ServerStartError
    from mockllm.api import AsyncRunHandle as AsyncRun
    from mockllm.api import RunHandle as Run
    from mockllm.dsh.header import InheritedEventCount, SessionHeader, encode_header, parse_header
    from mockllm.dsh.reader import Event, SessionLog, read_log
    from mockllm.replay.report import Failure, RunNotClean, RunReport, SessionReport
    from mockllm.scenario.load import Scenario, SessionScript, Suite, load_scenario, load_suite

# Every name but the errors is imported on first use: the pytest plugin (`mockllm.pytest_plugin`)
# is imported by every pytest start where mockllm is installed, and that import goes through this
# package; the server API pulls in aiohttp and the whole server, the format layer msgspec and the
# scenario loader, none of which a suite that never asks for a server should pay for.
_LAZY = {
    "InheritedEventCount": "mockllm.dsh.header", "SessionHeader": "mockllm.dsh.header",
    "encode_header": "mockllm.dsh.header", "parse_header": "mockllm.dsh.header",
    "Event": "mockllm.dsh.reader", "SessionLog": "mockllm.dsh.reader", "read_log": "mockllm.dsh.reader",
    "Scenario": "mockllm.scenario.load", "SessionScript": "mockllm.scenario.load", "Suite": "mockllm.scenario.load",
    "load_scenario": "mockllm.scenario.load", "load_suite": "mockllm.scenario.load",
    "AdminError": "mockllm.api", "AsyncRun": "mockllm.api", "AsyncServer": "mockllm.api", "Run": "mockllm.api",
    "Server": "mockllm.api", "ServerStartError": "mockllm.api", "Failure": "mockllm.replay.report",
    "RunNotClean": "mockllm.replay.report", "RunReport": "mockllm.replay.report",
    "SessionReport": "mockllm.replay.report",
}


# The API's handles on a server's runs keep their public names; inside the package a `Run` is the
# replay state (mockllm.replay.run), and these are handles on one.
_RENAMED = {"Run": "RunHandle", "AsyncRun": "AsyncRunHandle"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), _RENAMED.get(name, name))
    raise AttributeError(f"module 'mockllm' has no attribute {name!r}")


__all__ = [
    "AdminError",
    "AsyncRun",
    "AsyncServer",
    "Event",
    "Failure",
    "InheritedEventCount",
    "MockllmError",
    "NotAScenarioError",
    "RecordingError",
    "Run",
    "RunNotClean",
    "RunReport",
    "Scenario",
    "ScenarioError",
    "Server",
    "ServerStartError",
    "SessionHeader",
    "SessionLog",
    "SessionReport",
    "SessionScript",
    "Suite",
    "encode_header",
    "load_scenario",
    "load_suite",
    "parse_header",
    "read_log",
]
