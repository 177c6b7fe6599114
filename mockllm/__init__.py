"""mockllm: replay recorded LLM agent session trees over OpenAI-compatible SSE, offline."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mockllm.dsh.header import InheritedEventCount, SessionHeader, encode_header, parse_header
from mockllm.dsh.reader import Event, SessionLog, read_log
from mockllm.errors import MockllmError, NotAScenarioError, RecordingError, ScenarioError
from mockllm.scenario.load import Scenario, SessionScript, Suite, load_scenario, load_suite

if TYPE_CHECKING:
    from mockllm.api import AdminError, AsyncServer, Server, ServerStartError
    from mockllm.api import AsyncRunHandle as AsyncRun
    from mockllm.api import RunHandle as Run
    from mockllm.replay.report import Failure, RunNotClean, RunReport, SessionReport

# The server API pulls in aiohttp and the whole server; `mockllm inspect` and the pure layers
# need neither, so these names are imported on first use.
_LAZY = {
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
