"""What a run decides one model call gets (`Run.answer`); the server only writes it.

- `Refusal`: a mock-made error (unrecorded session, script exhausted, diverged under strict, an
  unmatched template), in the dialect's error shape, never retried.
- `Whole`: one body with its status: a non-streaming answer, or a replayed provider error.
- `Stream`: a reply's frames, burst or on a pacing `Schedule`, ending as the reply says; `held`
  is set when it then holds the connection (a hang, an aborted finish) until the client leaves.
- `Hold`: a non-streaming request for a hang: nothing to send, held until the server shuts down.

Every outcome carries the call's journal record, which the writer stamps when the answer is out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mockllm.replay.journal import CallRecord
from mockllm.replay.pacing import Schedule
from mockllm.wire.reply import Reply

# A held call, as the run's report lists it: live session, file, call, and its ready file if any.
HeldCall = dict[str, Any]


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


@dataclass(frozen=True, slots=True)
class Stream:
    record: CallRecord
    reply: Reply
    include_usage: bool
    schedule: Schedule | None  # None: burst
    held: HeldCall | None = None  # set: hold the connection once the frames are out
    ready_file: str | None = None  # a hang's ready file, written (under `cwd`) once its first delta is out
    cwd: str | None = None


@dataclass(frozen=True, slots=True)
class Hold:
    record: CallRecord
    held: HeldCall


Outcome = Refusal | Whole | Stream | Hold
