"""A run's recording, in the server's record modes: its live calls forwarded to the upstream as
`mockllm record` forwards them, and the scenario written when the run ends cleanly.

- `TreeRecording` (`once` for a scenario with no recording, `rewrite`, `new_episodes` with nothing
  to replay): the run records from scratch. Its calls are routed, and the tree's lineage read, by
  `mockllm record`'s own code (`proxy.Recorder`, `tree.SessionTree`), into a hidden folder beside
  the scenario's.
- `EpisodeRecording` (`new_episodes`): the run routed each call; those the recording could not
  serve came here with their live session, and at the end the scenario is rewritten (`episodes`).

Either way the recording is written into a new hidden folder, stamped in its `mockllm.json` with
when it was recorded, by which mockllm, in which mode and from which upstream host (never a URL's
credentials, path or query), and renamed into place (a scenario it replaces is renamed away first,
then removed). A run that ended with failures (an unreachable upstream, a 5xx, ...), with live
calls still in flight, or whose recording its caller declined (the pytest plugin, for a failed
test) writes nothing, and its report says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import os
import shutil
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from mockllm.dsh.chunks import Failure
from mockllm.dsh.header import SessionHeader
from mockllm.dsh.names import MANIFEST_FILE, PRIMARY_FILE, SIDECAR_FILE
from mockllm.errors import AlreadyRecorded, RecordError
from mockllm.options import parse_upstream
from mockllm.record.call import ObservedCall
from mockllm.record.episodes import LiveSession, continued_log, next_child_number, trim_sidecar, write_new_session
from mockllm.record.forward import Forwarder, OnFailure, Target, now_ms
from mockllm.record.proxy import Recorder, lineage_of, upstream_url
from mockllm.record.redact import Redactor
from mockllm.record.side import write_json
from mockllm.record.tree import Caller, Failed, SessionTree
from mockllm.replay.outcome import Live
from mockllm.replay.report import RecordingReport
from mockllm.scenario.load import Scenario
from mockllm.wire.dialect import Dialect
from mockllm.wire.request import Request

# Which `--upstream PROVIDER=URL` a dialect's calls go to; any other dialect speaks OpenAI's.
DIALECT_PROVIDERS = {"chat": "openai", "responses": "openai", "anthropic": "anthropic", "gemini": "gemini",
                     "ollama": "ollama"}


class Upstreams:
    """Where live calls go: `--upstream URL` for every provider not given its own `PROVIDER=URL`."""

    def __init__(self, specs: tuple[str, ...]) -> None:
        self.bases = dict(parse_upstream(spec) for spec in specs)  # provider ("" the default) -> base URL

    def __bool__(self) -> bool:
        return bool(self.bases)

    def base_for(self, dialect: Dialect) -> str | None:
        """The base a dialect's paths go under (its `/v1`), or None when none is configured."""
        provider = DIALECT_PROVIDERS.get(dialect.name, "openai")
        base = self.bases.get(provider)
        if base is None:
            return self.bases.get("")
        # The Anthropic SDK's base has no /v1 (it adds it): accept the base as users know it.
        if provider == "anthropic" and not urlsplit(base).path.endswith("/v1"):
            base += "/v1"
        return base


def host_of(url: str) -> str:
    """What a recording keeps of an upstream: its host and port, never credentials, path or query."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)


def mockllm_version() -> str:
    try:
        return importlib.metadata.version("mockllm-replay")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class RunRecording(ABC):
    """One run's recording: `call` forwards a live call, `finish` writes (or discards) the scenario."""

    def __init__(self, mode: str, name: str, folder: Path, upstreams: Upstreams, client: aiohttp.ClientSession,
                 on_failure: OnFailure, cwd: str | None) -> None:
        self.mode = mode
        self.name = name
        self.folder = folder
        self.upstreams = upstreams
        self.client = client
        self.on_failure = on_failure
        self.redactor = Redactor(cwd=cwd)
        self.cwd = cwd
        self.staging = folder.parent / f".{folder.name}.recording-{uuid.uuid4().hex[:8]}"
        self.hosts: dict[str, str] = {}  # upstream base -> its host, in first-call order
        self.live_calls = 0
        self._calling = 0  # calls being forwarded now
        # Folders made for the staging folder (a group folder, the recordings folder): removed again
        # when nothing is written, so a failed first recording leaves no trace.
        self._made: list[Path] = []

    async def call(self, request: web.Request, path: str, body: bytes, dialect: Dialect, neutral: Request,
                   live: Live) -> web.StreamResponse:
        """Forward one live call to its upstream (`path`: under the base root, query included)."""
        base = self.upstreams.base_for(dialect)
        if base is None:
            message = (f"no upstream for {dialect.name} calls to record; give one with --upstream URL (or "
                       f"{DIALECT_PROVIDERS.get(dialect.name, 'openai')}=URL)")
            self.on_failure(Caller(live.live_id or ""), 502, message)
            return web.Response(status=502, body=dialect.error_body(message, "no_upstream", 502),
                                content_type="application/json", headers={"x-should-retry": "false"})
        url = upstream_url(base, path)
        if base not in self.hosts:
            self.hosts[base] = host_of(base)
        self.live_calls += 1
        self._calling += 1
        try:
            return await self._forward(request, url, body, dialect, neutral, live)
        finally:
            self._calling -= 1

    @abstractmethod
    async def _forward(self, request: web.Request, url: str, body: bytes, dialect: Dialect, neutral: Request,
                       live: Live) -> web.StreamResponse: ...

    @property
    @abstractmethod
    def forwarder(self) -> Forwarder: ...

    @property
    @abstractmethod
    def recorded(self) -> bool:
        """Whether anything was recorded that writing would keep."""

    @abstractmethod
    def _write(self) -> str:
        """Write the recording into `staging` (blocking file work); what was recorded, in words."""

    async def finish(self, *, keep: bool, failures: Callable[[], str | None], why_not: str = "") -> RecordingReport:
        """The run ended: write the recording into place, unless `keep` is false (`why_not` says why)
        or the run had failures (`failures()` says which, once every call is recorded); the report
        says what was written, or why nothing was."""
        await self.forwarder.settled()  # calls that ended are recorded (and their failures known) first
        failed = failures()
        problem = (why_not or "its caller asked not to keep it") if not keep else None
        if problem is None and failed:
            problem = f"the run ended with failures ({failed}): record it again"
        if problem is None and self._calling:
            problem = f"{self._calling} live call(s) were still in flight when the run ended"
        if problem is None and not self.recorded:
            problem = "the run made no model call to record"
        if problem is None:
            try:
                what = await asyncio.to_thread(self._write_and_publish)
            except (OSError, RecordError) as exc:
                problem = f"writing it failed: {exc}"
            else:
                return self._report(True, what)
        await asyncio.to_thread(self.discard)
        return self._report(False, f"nothing written to {self.folder}: {problem}")

    def _report(self, written: bool, message: str) -> RecordingReport:
        return RecordingReport(self.mode, written, self.name, str(self.folder), message, self.live_calls)

    def _write_and_publish(self) -> str:
        what = self._write()
        stamp(self.staging, self.mode, list(dict.fromkeys(self.hosts.values())))
        publish(self.staging, self.folder, replace=self.mode != "once")
        self._remove_made(keep=self.folder.parent)
        return what

    def discard(self) -> None:
        """Nothing is written: the staging folder (and folders made for it) go."""
        shutil.rmtree(self.staging, ignore_errors=True)
        self._remove_made()

    def make_parents(self) -> None:
        missing = [p for p in reversed(self.staging.parents) if not p.exists()]
        self.staging.parent.mkdir(parents=True, exist_ok=True)
        self._made = missing

    def _remove_made(self, keep: Path | None = None) -> None:
        for folder in reversed(self._made):
            if keep is not None and (folder == keep or folder in keep.parents):
                continue
            with contextlib.suppress(OSError):
                folder.rmdir()  # only if empty: another recording may have written beside it


class TreeRecording(RunRecording):
    """A run that records from scratch, as `mockllm record` does (routing, lineage, secrets)."""

    def __init__(self, mode: str, name: str, folder: Path, upstreams: Upstreams, client: aiohttp.ClientSession,
                 on_failure: OnFailure, cwd: str | None, session_headers: tuple[str, ...]) -> None:
        super().__init__(mode, name, folder, upstreams, client, on_failure, cwd)
        self.make_parents()
        # Not durable call by call: the folder is renamed into place only once complete and closed.
        self.tree = SessionTree(self.staging, redactor=self.redactor, cwd=bool(cwd), durable=False)
        # Written when the run ends: its calls are decoded then, off every client's path.
        self.recorder = Recorder.into(self.tree, "", client, session_headers, on_failure, defer=True)

    @property
    def forwarder(self) -> Forwarder:
        return self.recorder.forwarder

    async def _forward(self, request: web.Request, url: str, body: bytes, dialect: Dialect, neutral: Request,
                       live: Live) -> web.StreamResponse:
        return await self.recorder.forward(request, dialect, body=body, neutral=neutral, url=url)

    @property
    def recorded(self) -> bool:
        return bool(self.tree.sessions) or bool(self.tree.side.files)

    def _write(self) -> str:
        self.tree.close()
        if self.tree.failures:
            raise RecordError(f"{len(self.tree.failures)} write(s) failed: {self.tree.failures[0]}")
        sessions = [s.file for s in self.tree.sessions.values()]
        return f"recorded {len(sessions)} session(s) ({', '.join(sessions)}), {self.live_calls} call(s), in " \
               f"{self.folder}"

    def discard(self) -> None:
        self.tree.abandon()
        super().discard()


class EpisodeRecording(RunRecording):
    """A new_episodes run: the calls its recording could not serve, per live session."""

    def __init__(self, scenario: Scenario, upstreams: Upstreams, client: aiohttp.ClientSession,
                 on_failure: OnFailure, cwd: str | None) -> None:
        super().__init__("new_episodes", scenario.name, scenario.path, upstreams, client, on_failure, cwd)
        self.scenario = scenario
        self.sessions: dict[str, LiveSession] = {}  # by live id, in the order they went live
        self._forwarder = Forwarder(client, self, on_failure, defer=True)
        self._arrivals = 0

    @property
    def forwarder(self) -> Forwarder:
        return self._forwarder

    async def _forward(self, request: web.Request, url: str, body: bytes, dialect: Dialect, neutral: Request,
                       live: Live) -> web.StreamResponse:
        live_id = live.live_id or ""
        session = self.sessions.get(live_id)
        if session is None:
            script = live.session
            session = self.sessions[live_id] = LiveSession(
                live_id, script.file if script else None, script.path if script else None, live.served,
                lineage_of(request.headers).parent,
                recorded_id=live_id if live.named else str(uuid.uuid4()))
        self._arrivals += 1
        call = ObservedCall([], False, now_ms(), arrival=self._arrivals)  # its inputs are read when it is recorded
        return await self._forwarder.forward(request, url, body, dialect, Target(Caller(live_id), call, neutral))

    # -- the Sink the forwarder records into ------------------------------------------------------

    def record(self, caller: Caller, call: ObservedCall) -> None:
        self.sessions[caller.session].calls.append(call)

    def record_failure(self, caller: Caller, call: ObservedCall, failed: Failed) -> None:
        # Statuses the forwarder let through (a 400, say) are still not an episode worth keeping.
        if failed.status < 500 and failed.status not in (401, 403, 407, 429):
            self.on_failure(caller, failed.status, f"the upstream answered {failed.status} {failed.code}: "
                            f"{failed.message}")

    def record_cut(self, caller: Caller, call: ObservedCall, failure: Failure) -> None:
        """Told to `on_failure` by the forwarder already: nothing to keep."""

    @property
    def recorded(self) -> bool:
        return any(s.calls for s in self.sessions.values())

    def _write(self) -> str:
        shutil.copytree(self.folder, self.staging, copy_function=shutil.copy2)
        primary = self.scenario.primary
        continued, added = [], []
        for session in self.sessions.values():
            if not session.calls or session.path is None:
                continue
            calls = sorted(session.calls, key=lambda c: c.arrival)
            (self.staging / session.path.name).write_bytes(
                continued_log(session.path, session.served, calls, self.redactor))
            if session.file == primary.file and (self.staging / SIDECAR_FILE).is_file():
                trim_sidecar(self.staging / SIDECAR_FILE, session.served)
            continued.append(f"{session.file} from call {session.served + 1}")
        number = next_child_number(self.staging)
        created = max((s.created_at for s in self.scenario.sessions), default=0)
        for session in self.sessions.values():
            if session.path is not None or not session.calls:
                continue
            created = max(created + 1, session.calls[0].started)
            header = SessionHeader(session.recorded_id, created, cwd=self._cwd_field(),
                                   parent_session=self._parent_of(session))
            added.append(write_new_session(self.staging, session, number, header, self.redactor))
            number += 1
        parts = [f"continued {', '.join(continued)}" if continued else "",
                 f"added {', '.join(added)}" if added else ""]
        return f"rewrote {self.folder} with {self.live_calls} live call(s): " + "; ".join(p for p in parts if p)

    def _parent_of(self, session: LiveSession) -> str:
        """A new session's parent: the session its first call named (by its recorded id), else the primary."""
        named = self.sessions.get(session.parent or "")
        if named is not None:
            return named.recorded_id if named.path is None else next(
                s.id for s in self.scenario.sessions if s.file == named.file)
        recorded = next((s.id for s in self.scenario.sessions if s.id == session.parent), None)
        return recorded or self.scenario.primary.id

    def _cwd_field(self) -> str | None:
        header = self.scenario.primary.header
        return header.cwd if header is not None else None


def stamp(folder: Path, mode: str, hosts: list[str]) -> None:
    """Say in the scenario's `mockllm.json` when, by what and from where it was recorded."""
    path = folder / MANIFEST_FILE
    doc: dict[str, Any] = {}
    if path.is_file():
        loaded = json.loads(path.read_text(encoding="utf-8"))
        doc = loaded if isinstance(loaded, dict) else {}
    doc["recorded"] = {"at": datetime.now(UTC).isoformat(timespec="seconds"), "by": f"mockllm {mockllm_version()}",
                       "mode": mode, "upstream": ", ".join(hosts)}
    write_json(path, doc)


def publish(staging: Path, folder: Path, *, replace: bool) -> None:
    """Rename a written recording into place; a scenario already there is renamed away first (then
    removed) when `replace`, else it stays and this is AlreadyRecorded."""
    if not (staging / PRIMARY_FILE).is_file() and not (staging / SIDECAR_FILE).is_file():
        raise RecordError(f"{staging}: the recording holds no {PRIMARY_FILE}")
    if not folder.exists():
        os.replace(staging, folder)
        return
    if not replace:
        raise AlreadyRecorded(f"{folder} was recorded by another run meanwhile; it is kept as it is")
    old = folder.parent / f".{folder.name}.replaced-{uuid.uuid4().hex[:8]}"
    os.replace(folder, old)
    os.replace(staging, folder)
    shutil.rmtree(old, ignore_errors=True)
