"""A new_episodes run's recording: the calls its recording could not serve, per live session, and
the count_tokens calls it had no count for; at the end the scenario is rewritten with them.

The run routed each call (`replay.run`); a call it could not serve came here with its live session
(`Live`) and went upstream, as `mockllm record` forwards it. The scenario is then written anew
(`episodes` says how each session is continued or added), in a staging folder published as
`recording.RunRecording` publishes every recording. `count_tokens.json` keeps the counts it had,
then the new ones.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from mockllm.dsh.chunks import Failure
from mockllm.dsh.header import InheritedEventCount, SessionHeader
from mockllm.dsh.names import SIDECAR_FILE
from mockllm.numbering import call_name
from mockllm.record.call import ObservedCall
from mockllm.record.episodes import (
    LiveSession,
    Seed,
    continued_log,
    fork_seed,
    next_child_number,
    trim_sidecar,
    write_new_session,
)
from mockllm.record.forward import Forwarder, OnFailure, Target, now_ms
from mockllm.record.proxy import lineage_of
from mockllm.record.recording import RunRecording, Upstreams
from mockllm.record.redact import redact_chunks
from mockllm.record.side import continue_route
from mockllm.record.tree import Caller, Failed
from mockllm.record.upstream import Exchange, Upstream
from mockllm.record.wire import continue_wires, kept_wire
from mockllm.replay.binding import Binding
from mockllm.replay.outcome import Live
from mockllm.scenario.count_tokens import read_counts, request_key, write_counts
from mockllm.scenario.embeddings import RecordedEmbedding, call_of, read_embeddings, write_embeddings
from mockllm.scenario.envelopes import WireCall
from mockllm.scenario.load import Scenario
from mockllm.script.entries import ChunksEntry, Entry
from mockllm.wire.dialect import Dialect
from mockllm.wire.request import Request


class EpisodeRecording(RunRecording):
    """A new_episodes run: the calls its recording could not serve, per live session."""

    def __init__(self, scenario: Scenario, upstreams: Upstreams, client: Upstream,
                 on_failure: OnFailure, cwd: str | None, bindings: Mapping[str, Binding]) -> None:
        """`bindings`: the run's, by live id (live: a fork's parent's calls so far are read from it)."""
        super().__init__("new_episodes", scenario.name, scenario.path, upstreams, client, on_failure, cwd)
        self.scenario = scenario
        self.bindings = bindings
        self.sessions: dict[str, LiveSession] = {}  # by live id, in the order they went live
        self._forwarder = Forwarder(client, self, on_failure, defer=True)
        self._arrivals = 0
        self.counts: dict[bytes, tuple[Any, Any]] = {}  # new count_tokens (request, answer) by request, masked
        self.side_calls: dict[str, list[ObservedCall]] = {}  # by side route model: calls past its script's end
        self.embedded: dict[bytes, RecordedEmbedding] = {}  # new embeddings calls by content, masked

    @property
    def forwarder(self) -> Forwarder:
        return self._forwarder

    async def _forward(self, request: web.Request, url: str, body: bytes, dialect: Dialect, neutral: Request,
                       live: Live, early: Exchange | None) -> web.StreamResponse:
        # `early` is always None: a new_episodes run decides what goes upstream only once it has routed it.
        self._arrivals += 1
        call = ObservedCall([], False, now_ms(), arrival=self._arrivals)  # its inputs are read when it is recorded
        if live.side_route is not None:  # no session's: the route's script is continued
            return await self._forwarder.forward(request, url, body, dialect,
                                                 Target(Caller(side_route=live.side_route), call, neutral))
        live_id = live.live_id or ""
        session = self.sessions.get(live_id)
        if session is None:
            script = live.session
            lineage = lineage_of(request.headers)
            session = self.sessions[live_id] = LiveSession(
                live_id, script.file if script else None, script.path if script else None, live.served,
                lineage.parent, recorded_id=live_id if live.named else str(uuid.uuid4()))
            if script is None and lineage.fork:  # its seed is its parent's turns as they stand now
                session.fork = True
                session.forked_after = self._calls_made(lineage.parent or self.scenario.primary.id)
        session.arrived += 1
        return await self._forwarder.forward(request, url, body, dialect, Target(Caller(live_id), call, neutral))

    # -- the Sink the forwarder records into ------------------------------------------------------

    def record(self, caller: Caller, call: ObservedCall) -> None:
        if caller.side_route is not None:
            self.side_calls.setdefault(caller.side_route, []).append(call)
        else:
            self.sessions[caller.session].calls.append(call)

    def record_failure(self, caller: Caller, call: ObservedCall, failed: Failed) -> None:
        # Statuses the forwarder let through (a 400, say) are still not an episode worth keeping.
        if failed.status < 500 and failed.status not in (401, 403, 407, 429):
            self.on_failure(caller, failed.status, self.redactor.text(
                f"the upstream answered {failed.status} {failed.code}: {failed.message}"))

    def record_cut(self, caller: Caller, call: ObservedCall, failure: Failure) -> None:
        """Told to `on_failure` by the forwarder already: nothing to keep."""

    def _keep_count(self, request: Any, response: Any) -> None:
        request, response = self.redactor.value(request), self.redactor.value(response)
        self.counts.setdefault(request_key(request), (request, response))  # asked again: the first answer serves

    def _keep_embedding(self, pair: RecordedEmbedding) -> None:
        pair = RecordedEmbedding(pair.api, pair.model, self.redactor.value(pair.request), pair.response)
        self.embedded.setdefault(call_of(pair.api, pair.model, pair.request).key, pair)

    @property
    def recorded(self) -> bool:
        return (any(s.calls for s in self.sessions.values()) or bool(self.counts) or bool(self.side_calls)
                or bool(self.embedded))

    def _write(self) -> str:
        shutil.copytree(self.folder, self.staging, copy_function=shutil.copy2)
        primary = self.scenario.primary
        continued, added = [], []
        cut: dict[str, int] = {}  # recorded session id -> where its log was continued
        wires: list[WireCall] = []  # what the provider sent for each new call (`wire.recorded`)
        for session in self.sessions.values():
            if not session.calls or session.path is None:
                continue
            calls = sorted(session.calls, key=lambda c: c.arrival)
            recorded_id = next(s.id for s in self.scenario.sessions if s.file == session.file)
            cut[recorded_id] = session.served
            wires += self._wires(recorded_id, session.served, calls)
            (self.staging / session.path.name).write_bytes(
                continued_log(session.path, session.served, calls, self.redactor))
            if session.file == primary.file and self._primarys_sidecar():
                trim_sidecar(self.staging / SIDECAR_FILE, session.served)
            continued.append(f"{session.file} from {call_name(session.served)}")
        number = next_child_number(self.staging)
        created = max((s.created_at for s in self.scenario.sessions), default=0)
        written: dict[str, Path] = {}  # a new session's live id -> its log, for the forks made of it
        for session in self.sessions.values():
            if session.path is not None or not session.calls:
                continue
            created = max(created + 1, session.calls[0].started)
            parent, parent_log = self._parent_of(session, written)
            seed = fork_seed(parent_log, session.forked_after) if session.fork and parent_log else Seed()
            header = SessionHeader(session.recorded_id, created, cwd=self._cwd_field(), parent_session=parent,
                                   is_seeded=session.fork, inherited=InheritedEventCount(len(seed.events)))
            file = write_new_session(self.staging, session, number, header, self.redactor, seed)
            wires += self._wires(session.recorded_id, 0, sorted(session.calls, key=lambda c: c.arrival))
            written[session.live_id] = self.staging / file
            added.append(f"{file} (a fork of {parent})" if session.fork else file)
            number += 1
        if wires or cut:
            continue_wires(self.staging, cut, wires)
        for model, calls in self.side_calls.items():
            route = next(r for r in self.scenario.side_routes if r.model == model)
            entries: list[Entry] = [ChunksEntry(redact_chunks(self.redactor, [c.chunk for c in call.chunks]))
                                    for call in sorted(calls, key=lambda c: c.arrival)]
            file = continue_route(self.staging, self.folder, route, entries)
            continued.append(f"side route {model} ({file}) from {call_name(len(route.entries))}")
        if self.counts:  # the counts it had, then the new ones (a request it had is never sent upstream)
            kept = {request_key(p.request): (p.request, p.response) for p in read_counts(self.staging)}
            new = {k: pair for k, pair in self.counts.items() if k not in kept}
            write_counts(self.staging, list({**kept, **new}.values()))
        if self.embedded:  # the calls it had, then the new ones
            had = read_embeddings(self.staging)
            pairs = list(had.recorded) if had is not None else []
            known = {call_of(p.api, p.model, p.request).key for p in pairs}
            write_embeddings(self.staging, pairs + [p for k, p in self.embedded.items() if k not in known])
        parts = [f"continued {', '.join(continued)}" if continued else "",
                 f"added {', '.join(added)}" if added else "",
                 f"added {len(self.counts)} count_tokens answer(s)" if self.counts else "",
                 f"added {len(self.embedded)} embeddings call(s)" if self.embedded else ""]
        return f"rewrote {self.folder} with {self.live_calls} live call(s): " + "; ".join(p for p in parts if p)

    def _wires(self, session: str, first: int, calls: list[ObservedCall]) -> list[WireCall]:
        """The `envelopes.jsonl` lines of a session's new calls, numbered from `first`."""
        kept = (kept_wire(session, first + k, call, self.redactor) for k, call in enumerate(calls))
        return [wire for wire in kept if wire is not None]

    def _parent_of(self, session: LiveSession, written: Mapping[str, Path]) -> tuple[str, Path | None]:
        """A new session's parent: the session its first call named, else the primary; its recorded id
        and its log in the staging folder (None: it has none, or none written yet)."""
        named = self.sessions.get(session.parent or "")
        if named is not None and named.path is None:
            return named.recorded_id, written.get(named.live_id)
        if named is not None:  # a recorded session that went live
            recorded = next(s for s in self.scenario.sessions if s.file == named.file)
        else:
            recorded = next((s for s in self.scenario.sessions if s.id == session.parent), self.scenario.primary)
        return recorded.id, self.staging / recorded.path.name if recorded.path is not None else None

    def _primarys_sidecar(self) -> bool:
        """Whether the scenario has a sidecar and it is the primary's (one named as a side route's
        script is that route's, and stays as it is)."""
        return (self.staging / SIDECAR_FILE).is_file() and all(
            r.path != self.folder / SIDECAR_FILE for r in self.scenario.side_routes)

    def _calls_made(self, parent: str) -> int:
        """The calls session `parent` (a live id, or a recorded id) has made in this run so far: those
        served from the recording, then its live ones."""
        live = self.sessions.get(parent)
        if live is not None:
            return live.served + live.arrived
        binding = self.bindings.get(parent) or next(
            (b for b in self.bindings.values() if self.scenario.sessions[b.script].id == parent), None)
        return binding.cursor if binding is not None else 0

    def _cwd_field(self) -> str | None:
        header = self.scenario.primary.header
        return header.cwd if header is not None else None
