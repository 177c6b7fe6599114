"""Recorded token counts: Anthropic's `POST …/v1/messages/count_tokens`, replayed by request.

Claude Code and the Anthropic SDK ask for a count beside their model calls. Record mode keeps each
request with its answer in the scenario's `count_tokens.json` (`[{"request": {...}, "response":
{...}}, ...]`); replay answers a request equal to a recorded one (keys in any order) with that
answer. Anything else is a 404 in Anthropic's error shape, on which clients count locally.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from mockllm.dsh.names import COUNT_TOKENS_FILE
from mockllm.errors import RecordingError


class CountedRequest(msgspec.Struct, frozen=True):
    request: Any
    response: Any


def request_key(request: Any) -> bytes:
    """A request's comparison form: its JSON with keys sorted, so key order never matters."""
    return msgspec.json.encode(request, order="sorted")


def load_counts(folder: Path) -> dict[bytes, bytes]:
    """The recorded counts of a scenario folder, by request key; none when it has no file."""
    path = folder / COUNT_TOKENS_FILE
    if not path.is_file():
        return {}
    try:
        pairs = msgspec.json.decode(path.read_bytes(), type=list[CountedRequest])
    except msgspec.DecodeError as exc:
        raise RecordingError(path, None, f"not a list of {{\"request\", \"response\"}} objects: {exc}") from None
    return {request_key(p.request): msgspec.json.encode(p.response) for p in pairs}


def write_counts(folder: Path, pairs: list[tuple[Any, Any]]) -> None:
    """Write the counts a recording saw (record mode); nothing when it saw none."""
    if pairs:
        body = [CountedRequest(request, response) for request, response in pairs]
        (folder / COUNT_TOKENS_FILE).write_bytes(msgspec.json.format(msgspec.json.encode(body), indent=1))
