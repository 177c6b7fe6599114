"""The session tree being recorded: its sessions, their lineage, their logs and the primary's sidecar.

A session exists from its first recorded call (a call the upstream never answered creates
nothing, so a replay never binds a session with no calls). The first is the primary
(`session.jsonl`); the others are children (`session.1.jsonl`, ... in creation order), each
naming its parent: the one its first call named in `x-mockllm-parent`, else the primary. A fork
child's log starts with its parent's completed-turn prefix as it stands when the child is created
(every event up to the parent's last `turn/end`, copied as written), and its header states that
prefix's length as `seedLength`: the recorder knows the cut, so it writes it, never leaves it to
inference.

Every call is appended to its log as one fsync'd batch when it ends (`SessionWriter`): a crash
loses at most the calls in flight, and logs keep their `.partial` names until `close()`. The file
work runs on one writer thread, in order: an fsync takes milliseconds, and on the event loop it
would hold back every stream the proxy is forwarding meanwhile (the next call's first byte too).
The tree's state (numbering, turns, seeds) is decided on the loop, when the call ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from mockllm.dsh.chunks import Failure, FinishChunk, FinishReason, StreamChunk
from mockllm.dsh.header import InheritedEventCount, SessionHeader
from mockllm.dsh.names import LOG_PREFIX, PRIMARY_FILE, SIDECAR_FILE, child_file
from mockllm.dsh.reader import Event
from mockllm.dsh.writer import EventLike, SessionWriter, partial_path
from mockllm.errors import AlreadyRecorded, RecordError
from mockllm.record.call import ObservedCall, TimedChunk
from mockllm.record.events import SessionEvents
from mockllm.record.redact import Redactor, redact_chunks
from mockllm.script.entries import ThrowEntry

log = logging.getLogger("mockllm.record.command")


@dataclass(frozen=True, slots=True)
class Lineage:
    """What a session's first call says about where it comes from."""

    parent: str | None = None
    fork: bool = False


@dataclass(slots=True)
class RecordedSession:
    id: str
    file: str
    header: SessionHeader
    events: SessionEvents
    rows: list[EventLike] = field(default_factory=list)  # everything written: a fork's seed is cut from it
    writer: SessionWriter | None = None  # opened by the writer thread


@dataclass(frozen=True, slots=True)
class Failed:
    """An upstream HTTP error, recorded so that the replay fails the same way."""

    status: int
    message: str
    code: str


class SessionTree:
    def __init__(self, out: Path, *, pack: bool = False, redactor: Redactor | None = None) -> None:
        self.out = out
        self.pack = pack
        self.redactor = redactor or Redactor()
        self.sessions: dict[str, RecordedSession] = {}  # by recorded id, in creation order
        self.patches: list[dict[str, Any]] = []  # the primary's sidecar patches
        self.closed = False
        self.failures: list[BaseException] = []  # file work that failed on the writer thread
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mockllm-record")
        try:
            out.mkdir(parents=True, exist_ok=True)
            taken = [p.name for p in out.iterdir() if p.name.startswith(LOG_PREFIX) or p.name == SIDECAR_FILE]
        except OSError as exc:
            raise RecordError(f"{out}: cannot record there ({exc.strerror or exc}); name a folder that can be "
                              "created, or a new or empty one") from None
        if taken:
            raise AlreadyRecorded(f"{out} already holds a recording ({', '.join(sorted(taken))}); "
                                  "record into a new or empty folder")

    @property
    def primary(self) -> RecordedSession | None:
        return next(iter(self.sessions.values()), None)

    def new_id(self) -> str:
        """An id for a session its agent does not name (header-less calls)."""
        return str(uuid.uuid4())

    def record(self, session_id: str, lineage: Lineage, call: ObservedCall) -> None:
        """Append one ended call to its session's log (creating the session on its first call)."""
        session = self._session(session_id, lineage, call.started)
        self._append(session, session.events.call(call, self.redactor))

    def record_failure(self, session_id: str, lineage: Lineage, call: ObservedCall, failed: Failed) -> None:
        """An upstream HTTP error: the log gets a call ending in an error finish where it happened, and
        the primary's sidecar a `throw` patch replacing that call, so its replay fails as the upstream did.

        Sidecars are the primary's only (DESIGN §1): a child's failure replays as its error finish.
        """
        message = self.redactor.text(failed.message)
        call.chunks = [TimedChunk(call.started, FinishChunk(FinishReason(
            "error", failure=Failure(message=message, code=failed.code))))]
        self.record(session_id, lineage, call)
        session = self.sessions[session_id]
        if session is not self.primary:
            log.warning("session %s (%s): upstream HTTP %d recorded as an error finish; only the primary's "
                        "sidecar can replay it as the same HTTP error", session.id, session.file, failed.status)
            return
        self._patch(session, ThrowEntry(message=message, code=failed.code, status=failed.status))

    def record_cut(self, session_id: str, lineage: Lineage, call: ObservedCall, failure: Failure) -> None:
        """A stream that broke off or ended in an error event: recorded as it came; in the primary, also
        a `throw` patch with the chunks streamed first, so the replay breaks off the same way."""
        self.record(session_id, lineage, call)
        session = self.sessions[session_id]
        if session is self.primary:
            chunks: list[StreamChunk] = [c.chunk for c in call.chunks if not isinstance(c.chunk, FinishChunk)]
            self._patch(session, ThrowEntry(message=self.redactor.text(failure.message or "the stream failed"),
                                            code=self.redactor.text(failure.code or "STREAM_CLOSED"),
                                            chunks=redact_chunks(self.redactor, chunks)))

    async def flushed(self) -> None:
        """Wait until everything recorded so far is on disk."""
        await asyncio.wrap_future(self._io.submit(lambda: None))

    def close(self) -> None:
        """End every log (open steps and turns closed) and give each its name; idempotent.

        Blocks until the writer thread is done: it runs when the proxy has stopped.
        """
        if self.closed:
            return
        self.closed = True
        for session in self.sessions.values():
            self._append(session, session.events.closing(_last_time(session.rows)))
            self._submit(_close_writer, session)
        self._io.shutdown(wait=True)
        if self.failures:
            log.error("%s: %d write(s) failed; the logs concerned keep their .partial names",
                      self.out, len(self.failures))

    def abandon(self) -> None:
        """Stop without naming the logs (they keep `.partial`, as after a crash)."""
        self.closed = True
        self._io.shutdown(wait=True)
        for session in self.sessions.values():
            if session.writer is not None:
                session.writer.abandon()

    def _append(self, session: RecordedSession, rows: list[EventLike]) -> None:
        session.rows.extend(rows)
        self._submit(_append_rows, session, rows)

    def _submit(self, work: Callable[..., None], *args: Any) -> None:
        self._io.submit(self._guarded, work, *args)

    def _guarded(self, work: Callable[..., None], *args: Any) -> None:
        try:
            work(*args)
        except Exception as exc:  # a full disk must not end the recording of the other sessions
            log.error("%s: recording failed: %s", self.out, exc)
            self.failures.append(exc)

    def _session(self, session_id: str, lineage: Lineage, created: int) -> RecordedSession:
        session = self.sessions.get(session_id)
        if session is not None:
            return session
        if self.closed:
            raise RecordError(f"{self.out}: the recording is closed; a call that ends after it is not recorded")
        primary = self.primary
        file = PRIMARY_FILE if primary is None else child_file(len(self.sessions))
        parent_id = None if primary is None else (lineage.parent or primary.id)
        parent = self.sessions.get(parent_id) if parent_id is not None else None
        if parent_id is not None and parent is None:
            log.warning("session %s names parent %s, which has recorded no call", session_id, parent_id)
        seed: list[EventLike] = []
        events = SessionEvents()
        if lineage.fork and parent_id is not None:
            if parent is not None:
                seed = parent.rows[: parent.events.completed]
                events = SessionEvents(first_seq=len(seed), turn=parent.events.completed_turn)
            header = SessionHeader(session_id, created, parent_session=parent_id, is_seeded=True,
                                   inherited=InheritedEventCount(len(seed)))
        else:
            header = SessionHeader(session_id, created, parent_session=parent_id)
        session = self.sessions[session_id] = RecordedSession(session_id, file, header, events)
        self._submit(self._open_writer, session)
        if seed:
            self._append(session, seed)
        return session

    def _open_writer(self, session: RecordedSession) -> None:
        session.writer = SessionWriter(self.out / session.file, session.header, pack=self.pack)

    def _patch(self, session: RecordedSession, entry: ThrowEntry) -> None:
        # The call just recorded is the one the patch replaces.
        self.patches.append({"at": session.events.calls - 1, "entry": msgspec.to_builtins(entry)})
        self._submit(_write_sidecar, self.out / SIDECAR_FILE, list(self.patches))


def _append_rows(session: RecordedSession, rows: list[EventLike]) -> None:
    if session.writer is None:
        raise RecordError(f"{session.file}: its log could not be opened (see the error logged before)")
    session.writer.append(rows)


def _close_writer(session: RecordedSession) -> None:
    if session.writer is not None:
        session.writer.close()


def _write_sidecar(path: Path, patches: list[dict[str, Any]]) -> None:
    """Rewritten whole on every patch (it is small), renamed into place: never half a file."""
    partial = partial_path(path)
    partial.write_text(json.dumps({"patches": patches}, indent=2) + "\n", encoding="utf-8")
    os.replace(partial, path)


def _last_time(rows: list[EventLike]) -> int:
    for row in reversed(rows):
        time = row.time if isinstance(row, Event) else row.get("time")
        if isinstance(time, int):
            return time
    return 0
