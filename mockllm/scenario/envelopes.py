"""`envelopes.jsonl`: what the provider sent for each recorded call, beside the session logs.

A dsh log keeps a call's content, provider-neutral; a recorder (`mockllm record`, the record
modes) also keeps, per call, the provider's own answer as it came: one `WireCall` a line, keyed by
the session's header id (which no renaming of its log changes) and the call's number among that
session's own calls (as the override sidecar counts them). The file is optional: a tree without
it (every dsh corpus, anything recorded before it existed) replays exactly as before, and deleting
it gives that replay back. How a replay uses it: `mockllm.wire.recorded`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from mockllm.errors import RecordingError

ENVELOPES_FILE = "envelopes.jsonl"


class WireCall(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One line of `envelopes.jsonl`: recorded call `call` (0-based, the session's own calls, as
    the sidecar counts them) of session `session` (its header id, which no renaming changes), in
    `dialect`, as the provider answered it: `stream`, its events in order (`[event name or null,
    data]`, data JSON-decoded, or the text where it is not JSON, such as `[DONE]`), or `body`, its
    whole answer. `model` is the model the provider said it answered with."""

    session: str
    call: int
    dialect: str
    model: str | None = None
    stream: list[tuple[str | None, Any]] | None = None
    body: Any = None

    @property
    def reply_id(self) -> str | None:
        """The provider's id for the answer (chat's `id`, Anthropic's `message.id`, Responses'
        `response.id`, Gemini's `responseId`), where it said one."""
        value = field_at(self._first(), ("id", "message.id", "response.id", "responseId"))
        return value if isinstance(value, str) else None

    @property
    def created(self) -> int | None:
        value = field_at(self._first(), ("created", "response.created_at"))
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def _first(self) -> Any:
        if self.body is not None:
            return self.body
        return next((data for _, data in self.stream or () if isinstance(data, dict)), None)


def field_at(value: Any, paths: Sequence[str]) -> Any:
    """The first of `paths` (dotted keys) that `value` holds, or None."""
    for path in paths:
        here = value
        for key in path.split("."):
            here = here.get(key) if isinstance(here, dict) else None
        if here is not None:
            return here
    return None


_decoder = msgspec.json.Decoder(WireCall)


def load_envelopes(folder: Path) -> dict[tuple[str, int], WireCall]:
    """The folder's recorded calls by (session id, call number); {} without the file. A line that
    is not a WireCall is a RecordingError naming it (`mockllm check` reports it)."""
    path = folder / ENVELOPES_FILE
    try:
        buf = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise RecordingError(path, None, f"cannot read it: {exc.strerror or exc}") from None
    out: dict[tuple[str, int], WireCall] = {}
    for number, line in enumerate(buf.splitlines(), 1):
        if not line.strip():
            continue
        try:
            wire = _decoder.decode(line)
        except msgspec.DecodeError as exc:
            raise RecordingError(path, number, f"not a recorded call: {exc}") from None
        out[(wire.session, wire.call)] = wire
    return out
