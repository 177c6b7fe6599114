"""mockllm: replay recorded LLM agent session trees over OpenAI-compatible SSE, offline."""

from mockllm.errors import MockllmError, NotAScenarioError, RecordingError, ScenarioError
from mockllm.header import InheritedEventCount, SessionHeader, encode_header, parse_header
from mockllm.recording import Event, SessionLog, read_log
from mockllm.scenario import Scenario, SessionScript, Suite, load_scenario, load_suite

__all__ = [
    "Event",
    "InheritedEventCount",
    "MockllmError",
    "NotAScenarioError",
    "RecordingError",
    "Scenario",
    "ScenarioError",
    "SessionHeader",
    "SessionLog",
    "SessionScript",
    "Suite",
    "encode_header",
    "load_scenario",
    "load_suite",
    "parse_header",
    "read_log",
]
