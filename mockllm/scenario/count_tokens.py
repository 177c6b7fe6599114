"""Recorded token counts: Anthropic's `POST …/v1/messages/count_tokens`, replayed by request.

Claude Code and the Anthropic SDK ask for a count beside their model calls. Record mode keeps each
request with its answer in the scenario's `count_tokens.json` (`[{"request": {...}, "response":
{...}}, ...]`); replay answers a request equal to a recorded one (keys in any order) with that
answer. Anything else is a 404 in Anthropic's error shape, on which clients count locally.

A recording made with `--cwd` (or a run's `cwd`) writes `{{cwd}}` for the agent's folder, in counted
requests as everywhere: replay puts the run's folder back before comparing, as divergence does for
recorded inputs, so a request from the new folder still finds its count.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from mockllm.dsh.names import COUNT_TOKENS_FILE
from mockllm.dsh.writer import partial_path
from mockllm.errors import RecordingError
from mockllm.script.templates import CWD


class CountedRequest(msgspec.Struct, frozen=True):
    request: Any
    response: Any


def request_key(request: Any) -> bytes:
    """A request's comparison form: its JSON with keys sorted, so key order never matters."""
    return msgspec.json.encode(request, order="sorted")


def read_counts(folder: Path) -> list[CountedRequest]:
    """The (request, answer) pairs of a scenario folder, as written; none when it has no file."""
    path = folder / COUNT_TOKENS_FILE
    if not path.is_file():
        return []
    try:
        return msgspec.json.decode(path.read_bytes(), type=list[CountedRequest])
    except msgspec.DecodeError as exc:
        raise RecordingError(path, None, f"not a list of {{\"request\", \"response\"}} objects: {exc}") from None


def load_counts(folder: Path, cwd: str | None = None) -> dict[bytes, bytes]:
    """The recorded counts of a scenario folder, by request key (`{{cwd}}` in a recorded request
    read as `cwd`, when given); none when it has no file."""
    return {request_key(with_cwd(p.request, cwd) if cwd else p.request): msgspec.json.encode(p.response)
            for p in read_counts(folder)}


def write_counts(folder: Path, pairs: list[tuple[Any, Any]], *, durable: bool = False) -> None:
    """Write the counts a recording saw; nothing when it saw none. Rewritten whole and renamed into
    place (a recorder rewrites it on every new count: never half a file); `durable`: fsync'd first,
    as `mockllm record` keeps each call of its tree."""
    if not pairs:
        return
    body = [CountedRequest(request, response) for request, response in pairs]
    path = folder / COUNT_TOKENS_FILE
    partial = partial_path(path)
    with partial.open("wb") as out:
        out.write(msgspec.json.format(msgspec.json.encode(body), indent=1))
        if durable:
            out.flush()
            os.fsync(out.fileno())
    os.replace(partial, path)


def with_cwd(value: Any, cwd: str) -> Any:
    if isinstance(value, str):
        return value.replace(CWD, cwd)
    if isinstance(value, list):
        return [with_cwd(v, cwd) for v in value]
    if isinstance(value, dict):
        return {k: with_cwd(v, cwd) for k, v in value.items()}
    return value
