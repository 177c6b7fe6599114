"""One root exception; each subclass carries where the problem is (file:line, run, session)."""

from __future__ import annotations

import re
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


class HeaderError(MockllmError, ValueError):
    """The header (a line, or the values a header is made of) is not a v0 session header; the
    message says what is wrong."""


class TemplateError(MockllmError):
    """A `{{fromRequest:…}}` matched nothing or its pattern is invalid."""


class ScenarioError(MockllmError):
    """A scenario failed to load; `problems` holds one error per broken file."""

    def __init__(self, name: str, problems: list[RecordingError]) -> None:
        self.name = name
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class ReplayFailure(MockllmError):
    """A request the script cannot answer; recorded in the run's failures and answered with `status`."""

    def __init__(self, status: int, code: str, message: str, session: str | None, call: int | None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.session = session
        self.call = call


class RequestError(MockllmError):
    """A request body that is not a valid request of its dialect; the message says what was expected."""


# JSON nested deeper than the decoder's recursion limit raises RecursionError (msgspec, json): no
# agent sends that, so it is the client's mistake, answered as one.
TOO_DEEP = "the JSON body is nested too deeply (over ~1000 levels): no model API accepts that"


class RecordError(MockllmError):
    """Record mode cannot record as asked; the message names what (a folder, a pattern, a log) and
    what to do."""


class AlreadyRecorded(RecordError, FileExistsError):
    """A recording would overwrite one: the output folder holds logs, or a log (or the `.partial` a
    crashed recording left) is already where a log is to be written. Also a FileExistsError, as it
    was before it had a class of its own."""


class BadRedaction(RecordError, re.error):
    """A `--redact` pattern is not a regular expression. Also an re.error, as it was before."""


class WriterClosed(RecordError, ValueError):
    """A session log written to (or closed) after it was closed or abandoned. Also a ValueError, as
    it was before."""
