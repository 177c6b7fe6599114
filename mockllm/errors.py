"""One root exception; each subclass carries where the problem is (file:line, run, session)."""

from __future__ import annotations

from pathlib import Path


class MockllmError(Exception):
    """Root of every error mockllm raises on purpose."""


class RecordingError(MockllmError):
    """A recorded file is broken: names the file and, where known, the 1-based line."""

    def __init__(self, path: Path | str, line: int | None, message: str) -> None:
        self.path = Path(path)
        self.line = line
        self.message = message
        super().__init__(self.location + ": " + message)

    @property
    def location(self) -> str:
        return f"{self.path}:{self.line}" if self.line is not None else str(self.path)


class NotAScenarioError(MockllmError):
    """A folder holds neither `session.jsonl` nor `replay.override.json`."""
