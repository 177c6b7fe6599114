"""Faults on demand: a provider error, a stream cut, or a slow first byte at a chosen call.

A run's `faults` (DESIGN.md §6: run field `"faults"`, `--fault JSON`, marker `faults=[…]`) each
name where they hit and what they do:

- targeted: `{"session"?, "call", ...}`: call N (0-based) of a session's script; `session` is a
  recorded session id or file, the primary when left out. `times` (default 1) is how many
  consecutive attempts at that call it hits.
- seeded: `{"rate", "seed", ...}`: every call position (session file, call) is hit or not by a
  draw from the seed and the position alone, so the same calls are hit on every run and in every
  process; a hit applies to that call's first attempt only.

What a fault does: `status` (a 4xx/5xx in the dialect's provider error shape, `retry_after`
seconds sent as `retry-after`), `cut_after` (K wire events of the recorded answer, then the
connection is dropped), `delay_ms` (a wait before the first byte). A status or cut fault does not
consume the entry: the attempt after it gets the recorded answer, as a provider's retry would.
A delay alone serves the entry, late.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from mockllm.errors import MockllmError


class FaultError(MockllmError, ValueError):
    """A fault that cannot be: the message names the field and what it must be."""


class Fault(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    call: int | None = None
    session: str | None = None
    status: int | None = None
    retry_after: float | None = None
    cut_after: int | None = None
    delay_ms: float | None = None
    times: int = 1
    rate: float | None = None
    seed: int | None = None

    @property
    def seeded(self) -> bool:
        return self.rate is not None

    @property
    def consumes(self) -> bool:
        """Whether the call it hits is served its entry (a delay alone), or kept for the retry."""
        return self.status is None and self.cut_after is None

    def describe(self) -> str:
        """How the journal and the report name what it did: `status 429`, `cut after 3 events`."""
        parts = []
        if self.delay_ms is not None:
            parts.append(f"delay {self.delay_ms:g} ms")
        if self.status is not None:
            parts.append(f"status {self.status}" + (f" retry-after {self.retry_after:g}s"
                                                     if self.retry_after is not None else ""))
        if self.cut_after is not None:
            parts.append(f"cut after {self.cut_after} events")
        return ", ".join(parts)

    def hits_seeded(self, file: str, call: int) -> bool:
        """Whether a seeded fault hits call `call` of `file`: one draw from the seed and the position.

        `random.Random` seeded with a string hashes it with SHA-512, not Python's salted `hash`, so
        every process draws alike."""
        assert self.rate is not None
        return random.Random(f"{self.seed}:{file}:{call}").random() < self.rate


_decode = msgspec.json.Decoder(Fault)


def parse_fault(value: str | bytes | dict[str, Any] | Fault) -> Fault:
    """A fault from its JSON text or object; a FaultError says what is wrong with it."""
    if isinstance(value, Fault):
        fault = value
    else:
        try:
            fault = _decode.decode(value) if isinstance(value, str | bytes) else msgspec.convert(value, Fault)
        except msgspec.ValidationError as exc:
            raise FaultError(f"fault {_shown(value)}: {exc}") from None
        except msgspec.DecodeError as exc:
            raise FaultError(f"fault {_shown(value)} is not JSON: {exc}") from None
    problem = _problem(fault)
    if problem is not None:
        raise FaultError(f"fault {_shown(value)}: {problem}")
    return fault


def parse_faults(values: Iterable[str | bytes | dict[str, Any] | Fault] | str | dict[str, Any]) -> tuple[Fault, ...]:
    """Faults from a list of JSON texts or objects (one alone counts as a list of one)."""
    if isinstance(values, str | dict):
        values = [values]
    return tuple(parse_fault(v) for v in values)


def _problem(fault: Fault) -> str | None:
    if fault.seeded:
        if fault.call is not None or fault.session is not None:
            return 'a seeded fault ("rate", "seed") hits any call: it takes no "call" or "session"'
        if fault.seed is None:
            return 'a seeded fault needs "seed" beside "rate"'
        if not 0 <= fault.rate <= 1:  # type: ignore[operator]
            return f'"rate" must be between 0 and 1, not {fault.rate}'
    elif fault.call is None:
        return 'give "call" (0-based, in the session\'s script), or "rate" and "seed" for a seeded fault'
    elif fault.call < 0:
        return f'"call" is 0-based: it cannot be {fault.call}'
    if fault.status is None and fault.cut_after is None and fault.delay_ms is None:
        return 'it does nothing: give "status", "cut_after" or "delay_ms"'
    if fault.status is not None and not 400 <= fault.status <= 599:
        return f'"status" must be a 4xx or 5xx, not {fault.status}'
    if fault.status is not None and fault.cut_after is not None:
        return '"status" and "cut_after" cannot both be given: a call either fails or is cut'
    if fault.retry_after is not None and (fault.status is None or fault.retry_after < 0):
        return '"retry_after" goes with a "status", in seconds (0 or more)'
    if fault.cut_after is not None and fault.cut_after < 0:
        return f'"cut_after" counts events: it cannot be {fault.cut_after}'
    if fault.delay_ms is not None and fault.delay_ms < 0:
        return f'"delay_ms" cannot be negative ({fault.delay_ms})'
    if fault.times < 1:
        return f'"times" must be at least 1, not {fault.times}'
    return None


def _shown(value: object) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) else msgspec.json.encode(value).decode()


class FaultPlan:
    """A run's faults, and the attempts seen at each call position, to decide which attempt a fault hits."""

    def __init__(self, faults: Sequence[Fault], sessions: Sequence[tuple[str, str]]) -> None:
        """`sessions`: each script's (recorded id, file), in script order (the first is the primary)."""
        self.faults = tuple(faults)
        self._sessions = sessions
        self._attempts: dict[tuple[int, int], int] = {}

    def attempt(self, script: int, call: int) -> tuple[int, Fault | None]:
        """Count one more attempt at call `call` of script `script`: its 0-based number, and the fault
        it meets, if any (the first that applies)."""
        key = (script, call)
        attempt = self._attempts.get(key, 0)
        self._attempts[key] = attempt + 1
        if not self.faults:
            return attempt, None
        session_id, file = self._sessions[script]
        for fault in self.faults:
            if fault.seeded:
                if attempt == 0 and fault.hits_seeded(file, call):
                    return attempt, fault
            elif (fault.call == call and attempt < fault.times
                  and (script == 0 if fault.session is None else fault.session in (session_id, file))):
                return attempt, fault
        return attempt, None

    def unmatched(self) -> list[Fault]:
        """Targeted faults whose session names no recorded session (the report says so)."""
        known = {name for pair in self._sessions for name in pair}
        return [f for f in self.faults if not f.seeded and f.session is not None and f.session not in known]
