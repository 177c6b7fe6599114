"""What a run decides one model call gets (`Run.answer`); the server only writes it.

- `Refusal`: a mock-made error (unrecorded session, script exhausted, diverged under strict, an
  unmatched template), in the dialect's error shape, never retried.
- `Whole`: one body with its status: a non-streaming answer, a replayed provider error, or a
  fault's provider error (with its headers: `retry-after`, `x-should-retry`).
- `Stream`: a reply's frames, burst or on a pacing `Schedule`, ending as the reply says; `held`
  is set when it then holds the connection (a hang, an aborted finish) until the client leaves;
  `cut_after` when a fault drops the connection after that many events.
- `Hold`: a non-streaming request for a hang: nothing to send, held until the server shuts down.
- `Live`: a record mode sends the call to the upstream (a run that records from scratch, or under
  `new_episodes` a call the recording cannot serve); the server forwards it with record mode's code.

Every outcome carries the call's journal record, which the writer stamps when the answer is out.
`delay` (seconds, a fault's `delay_ms`) is waited before the first byte.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mockllm.replay.journal import CallRecord
from mockllm.replay.pacing import Schedule
from mockllm.scenario.load import SessionScript
from mockllm.wire.reply import Reply

# A held call, as the run's report lists it: live session, file, call, and its ready file if any.
HeldInfo = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Refusal:
    record: CallRecord
    status: int
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Whole:
    record: CallRecord
    status: int
    body: bytes
    headers: Mapping[str, str] | None = None
    delay: float = 0.0


@dataclass(frozen=True, slots=True)
class Stream:
    record: CallRecord
    reply: Reply
    include_usage: bool
    schedule: Schedule | None  # None: burst
    held: HeldInfo | None = None  # set: hold the connection once the frames are out
    ready_file: str | None = None  # a hang's ready file, written (under `cwd`) once its first delta is out
    cwd: str | None = None
    cut_after: int | None = None  # a fault: drop the connection after this many events
    delay: float = 0.0
    # The request's body, for the retry rule when the client leaves before the stream's end
    # (`Run.left_early`); kept only as long as the answer is being written.
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class Hold:
    record: CallRecord
    held: HeldInfo


@dataclass(frozen=True, slots=True)
class Live:
    record: CallRecord
    # The live session the call belongs to, when the run routed it (new_episodes); None when the
    # run records from scratch (the recording routes its calls as `mockllm record` does).
    live_id: str | None = None
    session: SessionScript | None = None  # the recorded session it continues; None: one the recording lacks
    served: int = 0  # the recorded calls that session was served before it went live
    named: bool = False  # its live id came in a session header (else conversation routing made it up)


Outcome = Refusal | Whole | Stream | Hold | Live
