"""The session header (line 0 of a log), modelled logically and written back byte-for-byte.

Logically a session is seeded or not, and a seeded one names how many leading events it inherited.
Physically (dsh v0) that is one optional `seedLength` field: absent for primaries and spawn
children, present for forks. Writing an unseeded header therefore emits no `seedLength` at all,
so a v0 header read and written again is byte-identical.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from mockllm.dsh.names import HEADER_TYPE
from mockllm.errors import HeaderError

SessionKind = Literal["primary", "spawn", "fork"]

FORMAT_VERSION = 0

# Fields the model owns, in the order dsh writes them; every other field is kept verbatim.
_KNOWN = ("type", "version", "id", "createdAt", "cwd", "parentSession", "seedLength")


@dataclass(frozen=True, slots=True)
class InheritedEventCount:
    """How many leading logical events a fork child inherited from its parent (its seed).

    It is stated by the recorder, never derived from content or line counts.
    """

    value: int

    def __post_init__(self) -> None:
        if isinstance(self.value, bool) or not isinstance(self.value, int) or self.value < 0:
            raise HeaderError(f"inherited event count must be a whole number >= 0, not {self.value!r}")


NOTHING_INHERITED = InheritedEventCount(0)


@dataclass(frozen=True, slots=True)
class SessionHeader:
    id: str
    created_at: int | float = 0
    cwd: str | None = None
    parent_session: str | None = None
    is_seeded: bool = False
    inherited: InheritedEventCount = NOTHING_INHERITED
    extra: dict[str, Any] = field(default_factory=dict)
    # Key order as read, so that writing reproduces the recorder's bytes.
    key_order: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.is_seeded and self.inherited.value != 0:
            raise HeaderError("an unseeded session inherits no events")

    @property
    def kind(self) -> SessionKind:
        if self.parent_session is None:
            return "primary"
        return "fork" if self.is_seeded else "spawn"

    @property
    def cut(self) -> int:
        """Index of the first event this session produced itself."""
        return self.inherited.value


def parse_header(line: bytes) -> SessionHeader:
    """Read a physical v0 header line; raises HeaderError with a readable reason."""
    try:
        raw = msgspec.json.decode(line)
    except msgspec.DecodeError as exc:
        raise HeaderError(f"malformed JSON in the session header: {exc}") from None
    if not isinstance(raw, dict) or raw.get("type") != HEADER_TYPE:
        raise HeaderError('expected a session header {"type":"session","version":0,"id":…}')
    version = raw.get("version")
    if version != FORMAT_VERSION:
        raise HeaderError(
            f"unsupported session log version {version!r}: this mockllm reads version 0; "
            # The distribution is mockllm-replay: `pip install -U mockllm` would fetch another project.
            "re-record with a dsh that writes v0, or upgrade mockllm: pip install --upgrade mockllm-replay"
        )
    session_id = raw.get("id")
    if not isinstance(session_id, str):
        raise HeaderError('the header has no string "id"')
    created_at = raw.get("createdAt", 0)
    if isinstance(created_at, bool) or not isinstance(created_at, int | float):
        raise HeaderError(f'"createdAt" must be epoch milliseconds, not {created_at!r}')
    cwd = raw.get("cwd")
    parent = raw.get("parentSession")
    if cwd is not None and not isinstance(cwd, str):
        raise HeaderError(f'"cwd" must be a string, not {cwd!r}')
    if parent is not None and not isinstance(parent, str):
        raise HeaderError(f'"parentSession" must be a string, not {parent!r}')
    is_seeded = "seedLength" in raw
    try:
        inherited = InheritedEventCount(raw["seedLength"]) if is_seeded else NOTHING_INHERITED
    except HeaderError:
        raise HeaderError(f'"seedLength" must be a whole number >= 0, not {raw["seedLength"]!r}') from None
    return SessionHeader(
        id=session_id,
        created_at=created_at,
        cwd=cwd,
        parent_session=parent,
        is_seeded=is_seeded,
        inherited=inherited,
        extra={k: v for k, v in raw.items() if k not in _KNOWN},
        key_order=tuple(raw),
    )


def encode_header(header: SessionHeader) -> bytes:
    """Write the physical v0 header line (no trailing newline)."""
    known: dict[str, Any] = {"type": HEADER_TYPE, "version": FORMAT_VERSION, "id": header.id,
                             "createdAt": header.created_at}
    if header.cwd is not None:
        known["cwd"] = header.cwd
    if header.parent_session is not None:
        known["parentSession"] = header.parent_session
    if header.is_seeded:
        known["seedLength"] = header.inherited.value
    out: dict[str, Any] = {}
    for key in header.key_order:
        if key in known:
            out[key] = known.pop(key)
        elif key in header.extra:
            out[key] = header.extra[key]
    # Fields that were not in the original line: known ones in dsh's order, then extras.
    for key in _KNOWN:
        if key in known:
            out[key] = known[key]
    for key, value in header.extra.items():
        out.setdefault(key, value)
    return msgspec.json.encode(out)
