"""The session tree being recorded: its sessions, their lineage, their logs, the primary's sidecar,
the side routes and Anthropic's token counts (`count_tokens.json`, rewritten whole on each new count).

A session exists from its first recorded call (a call the upstream never answered creates
nothing, so a replay never binds a session with no calls). Where it goes in the tree is decided
when the recording ends (`close()`), by `lineage`: the primary, each child's parent (the one its
first call named in `x-mockllm-parent`, else the one whose next request answered it, else the
primary), children numbered and `createdAt` stamped in the order first calls arrived. A fork child
(`x-mockllm-fork`) gets its seed when it is created: its log starts with its parent's
completed-turn prefix as it stands then (every event up to the parent's last `turn/end`, copied as
written), and its header states that prefix's length as `seedLength`: the recorder knows the cut,
so it writes it, never leaves it to inference.

Crash safety. Until then each log is written under a provisional name and header: the shape a
recording had before lineage was read (the first session to end a call is `session.jsonl`, every
other its child, numbered as they were created). Every call is appended to its log as one fsync'd
batch when it ends (`SessionWriter`): a crash loses at most the calls in flight, and logs keep
their `.partial` names, which `dsh.writer.recover` turns into that provisional tree (flat, but
valid). On `close()` every log whose place differs is written anew under its final name and header
(`SessionWriter.close(path=, header=)`), the others are renamed, and the sidecar is rewritten for
the final primary. A crash in those few milliseconds can leave some logs finished and others
partial: such a folder does not load (`scenario.load.unfinished_logs`), never a tree with sessions
missing. The file work runs on one writer thread, in order: an fsync takes milliseconds, and on the
event loop it would hold back every stream the proxy is forwarding meanwhile. The tree's state
(turns, seeds, what lineage reads) is kept on the loop, when each call ends.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from mockllm.dsh.chunks import Failure, FinishChunk, FinishReason, StreamChunk
from mockllm.dsh.header import InheritedEventCount, SessionHeader
from mockllm.dsh.names import (
    COUNT_TOKENS_FILE,
    EMBEDDINGS_FILE,
    LOG_PREFIX,
    MANIFEST_FILE,
    PRIMARY_FILE,
    SIDECAR_FILE,
    child_file,
)
from mockllm.dsh.reader import Event
from mockllm.dsh.writer import EventLike, SessionWriter
from mockllm.errors import AlreadyRecorded, RecordError
from mockllm.record.call import ObservedCall, TimedChunk
from mockllm.record.events import SessionEvents
from mockllm.record.lineage import Layout, SessionFacts, facts_of, lay_out
from mockllm.record.redact import Redactor, redact_chunks
from mockllm.record.side import SIDE_PREFIX, SideRoutes, write_json
from mockllm.record.wire import keep_wire
from mockllm.scenario.count_tokens import request_key, write_counts
from mockllm.scenario.embeddings import RecordedEmbedding, call_of, write_embeddings
from mockllm.scenario.envelopes import ENVELOPES_FILE
from mockllm.scenario.load import is_scenario
from mockllm.script.entries import ChunksEntry, Entry, ThrowEntry
from mockllm.script.templates import CWD

log = logging.getLogger("mockllm.record.command")


@dataclass(frozen=True, slots=True)
class Lineage:
    """What a session's first call says about where it comes from."""

    parent: str | None = None
    fork: bool = False


@dataclass(frozen=True, slots=True)
class Caller:
    """Where a call is recorded: its session (and what its headers say of its lineage), or, for a
    `--side-route` model, that side route and no session at all."""

    session: str = ""
    lineage: Lineage = Lineage()
    side_route: str | None = None


@dataclass(slots=True)
class RecordedSession:
    id: str
    file: str  # provisional until the tree is finished
    header: SessionHeader
    events: SessionEvents
    facts: SessionFacts  # what lineage reads
    rows: list[EventLike] = field(default_factory=list)  # everything written: a fork's seed is cut from it
    writer: SessionWriter | None = None  # opened by the writer thread
    patches: list[dict[str, Any]] = field(default_factory=list)  # sidecar patches, if it ends up the primary


@dataclass(frozen=True, slots=True)
class Failed:
    """An upstream HTTP error, recorded so that the replay fails the same way."""

    status: int
    message: str
    code: str


class SessionTree:
    def __init__(self, out: Path, *, pack: bool = False, redactor: Redactor | None = None,
                 side_routes: tuple[str, ...] = (), cwd: bool = False, durable: bool = True,
                 repeating: frozenset[str] = frozenset()) -> None:
        """`side_routes`: the models recorded as side routes (`repeating`: those declared to repeat their
        last entry); `cwd`: the redactor writes `{{cwd}}` for
        the agent's folder, so headers say `"cwd": "{{cwd}}"` as dsh's do; `durable=False`: calls are
        not fsync'd one by one (a tree renamed into place when complete: see SessionWriter)."""
        self.out = out
        self.pack = pack
        self.durable = durable
        self.redactor = redactor or Redactor()
        self.cwd = CWD if cwd else None
        # By recorded id: in creation order while recording, in file order once finished.
        self.sessions: dict[str, RecordedSession] = {}
        self.closed = False
        self.failures: list[BaseException] = []  # file work that failed on the writer thread
        self.layout: Layout | None = None  # the finished tree's shape, once closed
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mockllm-record")
        self._arrivals = 0
        self._submitted = 0  # file work submitted, on the loop
        self._written = 0  # file work done, on the writer thread
        self.side = SideRoutes(out, side_routes, self._submit, repeating)
        self.counts: dict[bytes, tuple[Any, Any]] = {}  # count_tokens (request, answer) by request, as written
        self.embeddings: dict[bytes, RecordedEmbedding] = {}  # embeddings calls by content, as written
        try:
            out.mkdir(parents=True, exist_ok=True)
            taken = [p.name for p in out.iterdir() if p.name.startswith((LOG_PREFIX, SIDE_PREFIX))
                     or p.name in (SIDECAR_FILE, MANIFEST_FILE, COUNT_TOKENS_FILE, EMBEDDINGS_FILE, ENVELOPES_FILE)]
        except OSError as exc:
            raise RecordError(f"{out}: cannot record there ({exc.strerror or exc}); name a folder that can be "
                              "created, or a new or empty one") from None
        if taken:
            raise AlreadyRecorded(f"{out} already holds a recording ({', '.join(sorted(taken))}); "
                                  "record into a new or empty folder")
        held = scenarios_under(out)
        if held:  # a log beside them would make the whole suite load as one scenario
            raise AlreadyRecorded(f"{out} is a suite: it holds scenario(s) {', '.join(held[:5])}; record into a "
                                  f"new folder inside it (--out {out / 'NEW_SCENARIO'})")

    @property
    def primary(self) -> RecordedSession | None:
        """The provisional primary while recording (the first session created), the final one once closed."""
        return next(iter(self.sessions.values()), None)

    def new_id(self) -> str:
        """An id for a session its agent does not name (header-less calls)."""
        return str(uuid.uuid4())

    def arrived(self) -> int:
        """The next request's place in arrival order: taken when it reaches the recorder, before it is
        forwarded, so answers that end in another order do not reorder the tree."""
        self._arrivals += 1
        return self._arrivals

    def record(self, caller: Caller, call: ObservedCall) -> None:
        """Record one ended call: in its session's log (creating the session on its first call), or
        as its side route's next entry."""
        if caller.side_route is not None:
            self._open()
            self.side.record(caller.side_route, call.arrival, ChunksEntry(redact_chunks(
                self.redactor, [c.chunk for c in call.chunks])))
            return
        session = self._session(caller.session, caller.lineage, call.started)
        if session.facts.calls:
            name_results(call, session.facts.last.tool_calls)
        session.facts.calls.append(facts_of(call))
        self._append(session, session.events.call(call, self.redactor))
        self._keep_wire(session.id, session.events.calls - 1, call)

    def _keep_wire(self, session: str, number: int, call: ObservedCall) -> None:
        """What the provider sent for a call that ended as it should (`wire.recorded`): one line of
        `envelopes.jsonl`, made and appended on the writer thread, in order with the logs (decoding
        a long answer's events again would hold the loop, and every stream it forwards, for it)."""
        if call.dialect is not None:
            self._submit(keep_wire, self.out / ENVELOPES_FILE, session, number, call, self.redactor, self.durable)

    def record_failure(self, caller: Caller, call: ObservedCall, failed: Failed) -> None:
        """An upstream HTTP error: the log gets a call ending in an error finish where it happened, and
        the session a `throw` patch replacing that call, written to the sidecar if it is the primary,
        so its replay fails as the upstream did. In a side route it is a `throw` entry.

        Sidecars are the primary's only (DESIGN §1): a child's failure replays as its error finish.
        """
        message = self.redactor.text(failed.message)
        entry = ThrowEntry(message=message, code=failed.code, status=failed.status)
        if caller.side_route is not None:
            self._open()
            self.side.record(caller.side_route, call.arrival, entry)
            return
        call.chunks = [TimedChunk(call.started, FinishChunk(FinishReason(
            "error", failure=Failure(message=message, code=failed.code))))]
        self.record(caller, call)
        self._patch(self.sessions[caller.session], entry)

    def record_cut(self, caller: Caller, call: ObservedCall, failure: Failure) -> None:
        """A stream that broke off or ended in an error event: recorded as it came, and as a `throw`
        patch with the chunks streamed first (the primary's sidecar replays it breaking off the same
        way); in a side route, that `throw` is its entry."""
        chunks: list[StreamChunk] = [c.chunk for c in call.chunks if not isinstance(c.chunk, FinishChunk)]
        entry = ThrowEntry(message=self.redactor.text(failure.message or "the stream failed"),
                           code=self.redactor.text(failure.code or "STREAM_CLOSED"),
                           chunks=redact_chunks(self.redactor, chunks))
        if caller.side_route is not None:
            self._open()
            self.side.record(caller.side_route, call.arrival, entry)
            return
        self.record(caller, call)
        self._patch(self.sessions[caller.session], entry)

    def record_count(self, request: Any, response: Any) -> None:
        """A `count_tokens` request the upstream counted, with its answer: kept once per request (as
        written, secrets masked), and `count_tokens.json` rewritten on the writer thread, in order
        with the logs, so a crash keeps every count recorded before it."""
        self._open()
        request, response = self.redactor.value(request), self.redactor.value(response)
        key = request_key(request)
        if key in self.counts:  # an agent asks again for the same count: its first answer serves both
            return
        self.counts[key] = (request, response)
        self._submit(functools.partial(write_counts, durable=self.durable), self.out, list(self.counts.values()))

    def record_embedding(self, pair: RecordedEmbedding) -> None:
        """An embeddings call the upstream answered: kept once per content (the request's secrets masked,
        the answer as sent), and `embeddings.json` rewritten on the writer thread, as counts are."""
        self._open()
        pair = RecordedEmbedding(pair.api, pair.model, self.redactor.value(pair.request), pair.response)
        key = call_of(pair.api, pair.model, pair.request).key
        if key in self.embeddings:  # asked again (a query embedded twice): its first answer serves both
            return
        self.embeddings[key] = pair
        self._submit(functools.partial(write_embeddings, durable=self.durable), self.out,
                     list(self.embeddings.values()))

    async def flushed(self) -> None:
        """Wait until everything recorded so far is on disk."""
        await asyncio.wrap_future(self._io.submit(lambda: None))

    def close(self) -> None:
        """Finish the tree: end every log (open steps and turns closed), decide its shape (`lineage`),
        give each log its final name and header, and write the final primary's sidecar; idempotent.

        Blocks until the writer thread is done: it runs when the proxy has stopped.
        """
        if self.closed:
            return
        self.closed = True
        for session in self.sessions.values():
            self._append(session, session.events.closing(_last_time(session.rows)))
        if self.sessions:
            self._finish(lay_out([s.facts for s in self.sessions.values()]))
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

    @property
    def unwritten(self) -> int:
        """File work submitted and not yet done (each counter is written by one thread only)."""
        return self._submitted - self._written

    def _submit(self, work: Callable[..., None], *args: Any) -> None:
        self._submitted += 1
        self._io.submit(self._guarded, work, *args)

    def _guarded(self, work: Callable[..., None], *args: Any) -> None:
        try:
            work(*args)
        except Exception as exc:  # a full disk must not end the recording of the other sessions
            log.error("%s: recording failed: %s", self.out, exc)
            self.failures.append(exc)
        finally:
            self._written += 1

    def _finish(self, layout: Layout) -> None:
        """Give every session its place in the finished tree, and its log its final name and header."""
        self.layout = layout
        provisional = self.primary
        primary = self.sessions[layout.primary]
        # The final sidecar first: until every log is renamed the folder holds `.partial` logs and does
        # not load, so a crash in between never leaves finished logs beside the provisional sidecar.
        if primary is not provisional and (primary.patches or (provisional is not None and provisional.patches)):
            self._submit(_write_sidecar, self.out / SIDECAR_FILE, primary.patches)
        numbers = {child: number for number, child in enumerate(layout.children, 1)}
        for session in self.sessions.values():
            file = PRIMARY_FILE if session.id == layout.primary else child_file(numbers[session.id])
            old = session.header
            session.header = SessionHeader(session.id, layout.created[session.id], cwd=self.cwd,
                                           parent_session=layout.parents.get(session.id),
                                           is_seeded=old.is_seeded, inherited=old.inherited)
            session.file = file
            self._submit(_close_writer, session, self.out / file, session.header)
        if layout.inferred:
            log.info("%s: lineage read from the answers: %s", self.out, ", ".join(
                f"{self.sessions[c].file} is {self.sessions[layout.parents[c]].file}'s child"
                for c in layout.children if c in layout.inferred))
        self.sessions = {s: self.sessions[s] for s in (layout.primary, *layout.children)}
        for session in self.sessions.values():
            if session is not primary and session.patches:
                log.warning("session %s (%s): %d upstream failure(s) recorded as error finishes; only the "
                            "primary's sidecar can replay them as the same HTTP errors or cuts",
                            session.id, session.file, len(session.patches))

    def _open(self) -> None:
        if self.closed:
            raise RecordError(f"{self.out}: the recording is closed; a call that ends after it is not recorded")

    def _session(self, session_id: str, lineage: Lineage, created: int) -> RecordedSession:
        session = self.sessions.get(session_id)
        if session is not None:
            return session
        self._open()
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
            header = SessionHeader(session_id, created, cwd=self.cwd, parent_session=parent_id, is_seeded=True,
                                   inherited=InheritedEventCount(len(seed)))
        else:
            header = SessionHeader(session_id, created, cwd=self.cwd, parent_session=parent_id)
        session = self.sessions[session_id] = RecordedSession(session_id, file, header, events,
                                                              SessionFacts(session_id, lineage.parent))
        # Its provisional name and header as they are now: finishing the tree changes both, and the
        # writer thread may get to this after that.
        self._submit(self._open_writer, session, self.out / file, header)
        if seed:
            self._append(session, seed)
        return session

    def _open_writer(self, session: RecordedSession, path: Path, header: SessionHeader) -> None:
        session.writer = SessionWriter(path, header, pack=self.pack, durable=self.durable)

    def _patch(self, session: RecordedSession, entry: Entry) -> None:
        # The call just recorded is the one the patch replaces. Only the provisional primary's sidecar
        # is on disk while recording; the final primary's replaces it when the tree is finished.
        session.patches.append({"at": session.events.calls - 1, "entry": msgspec.to_builtins(entry)})
        if session is self.primary:
            self._submit(_write_sidecar, self.out / SIDECAR_FILE, list(session.patches))


def scenarios_under(folder: Path) -> list[str]:
    """The scenarios a folder holds, one or two levels down (a suite's groups: DESIGN §6), by name."""
    found = []
    for child in sorted(folder.iterdir()):
        if not child.is_dir() or child.name.startswith("."):
            continue
        if is_scenario(child):
            found.append(child.name)
        else:
            found += [f"{child.name}/{g.name}" for g in sorted(child.iterdir()) if g.is_dir() and is_scenario(g)]
    return found


def _append_rows(session: RecordedSession, rows: list[EventLike]) -> None:
    if session.writer is None:
        raise RecordError(f"{session.file}: its log could not be opened (see the error logged before)")
    session.writer.append(rows)


def _close_writer(session: RecordedSession, path: Path, header: SessionHeader) -> None:
    if session.writer is not None:
        session.writer.close(path=path, header=header)


def _write_sidecar(path: Path, patches: list[dict[str, Any]]) -> None:
    """Rewritten whole on every patch (it is small), renamed into place: never half a file. With no
    patches (the final primary recorded no failure) there is no sidecar."""
    if patches:
        write_json(path, {"patches": patches})
    else:
        path.unlink(missing_ok=True)


def _last_time(rows: list[EventLike]) -> int:
    for row in reversed(rows):
        time = row.time if isinstance(row, Event) else row.get("time")
        if isinstance(time, int):
            return time
    return 0


def name_results(call: ObservedCall, answered: tuple[str | None, ...]) -> None:
    """Tool results that name no call (a wire without tool-call ids: Ollama) answer the session's
    previous answer's tool calls in order, as the agent runs them: each gets that call's id, so the
    log's `tool/result` names its call as a provider with ids would have, and lineage and
    divergence match it by id."""
    results = [k for k, i in enumerate(call.inputs) if i.role == "tool"]
    if not results or any(call.inputs[k].tool_call_id is not None for k in results):
        return
    for k, call_id in zip(results, answered, strict=False):
        call.inputs[k] = call.inputs[k]._replace(tool_call_id=call_id)
