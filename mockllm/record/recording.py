"""A run's recording, in the server's record modes: its live calls forwarded to the upstream as
`mockllm record` forwards them, and the scenario written when the run ends cleanly.

- `TreeRecording` (`once` for a scenario with no recording, `rewrite`, `new_episodes` with nothing
  to replay): the run records from scratch. Its calls are routed, and the tree's lineage read, by
  `mockllm record`'s own code (`proxy.Recorder`, `tree.SessionTree`), into a hidden folder beside
  the scenario's.
- `EpisodeRecording` (`new_episodes`, in `episode_recording`): the run routed each call; those the
  recording could not serve came here with their live session, and at the end the scenario is
  rewritten (`episodes`).

Anthropic's `count_tokens` calls of a recording run go upstream too (under `new_episodes`, those
the recording has no count for): the answer is passed back as it came, and each count the upstream
gave is written with the recording, in its `count_tokens.json`.

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
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from aiohttp import web

from mockllm.dsh.names import EMBEDDINGS_FILE, MANIFEST_FILE, PRIMARY_FILE, SIDECAR_FILE
from mockllm.errors import AlreadyRecorded, RecordError
from mockllm.options import parse_upstream
from mockllm.record.forward import Forwarder, OnFailure
from mockllm.record.proxy import Recorder, counted_pair, embedded_pair, upstream_url
from mockllm.record.redact import Redactor
from mockllm.record.side import write_json
from mockllm.record.tree import Caller, SessionTree
from mockllm.record.upstream import Exchange, Upstream
from mockllm.replay.outcome import Live
from mockllm.replay.report import RecordingReport
from mockllm.scenario.embeddings import RecordedEmbedding
from mockllm.scenario.side_routes import SideRouteSpec
from mockllm.wire import DIALECTS
from mockllm.wire.dialect import Dialect
from mockllm.wire.embeddings import EmbeddingsAPI
from mockllm.wire.request import Request

ANTHROPIC = next(d for d in DIALECTS if d.name == "anthropic")  # count_tokens is Anthropic's
# Which `--upstream PROVIDER=URL` a dialect's calls go to; any other dialect speaks OpenAI's.
DIALECT_PROVIDERS = {"chat": "openai", "responses": "openai", "anthropic": "anthropic", "gemini": "gemini",
                     "ollama": "ollama", "bedrock": "bedrock"}


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


class Beside(Protocol):
    """Something a run records beside its model calls, written into its recording's folder."""

    @property
    def recorded(self) -> bool: ...

    def write(self, folder: Path) -> str:
        """Write into `folder` (blocking file work); what was written, in words (starting with "; ")."""


class RunRecording(ABC):
    """One run's recording: `call` forwards a live call, `finish` writes (or discards) the scenario."""

    def __init__(self, mode: str, name: str, folder: Path, upstreams: Upstreams, client: Upstream,
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
        # What the run recorded beside the model (its MCP servers' exchanges): written into the folder too.
        self.beside: list[Beside] = []

    def send_early(self, request: web.Request, path: str, body: bytes, dialect: Dialect) -> Exchange | None:
        """Begin forwarding a call before it is routed (`path` as for `call`); None: no upstream for it."""
        url = self._url(dialect, path)
        return self.forwarder.start(request, url, body, dialect) if url is not None else None

    async def call(self, request: web.Request, path: str, body: bytes, dialect: Dialect, neutral: Request,
                   live: Live, early: Exchange | None = None) -> web.StreamResponse:
        """Forward one live call to its upstream (`path`: under the base root, query included), or take
        the `early` exchange `send_early` began for it."""
        url = self._url(dialect, path)
        if url is None:
            self.on_failure(Caller(live.live_id or ""), 502, no_upstream(dialect))
            return _no_upstream_response(dialect)
        self.live_calls += 1
        self._calling += 1
        try:
            return await self._forward(request, url, body, dialect, neutral, live, early)
        finally:
            self._calling -= 1

    async def count_tokens(self, request: web.Request, path: str, body: bytes) -> web.StreamResponse:
        """Forward Anthropic's `count_tokens` (`path` as for `call`); a count the upstream gave is kept
        (`_keep_count`) and written with the recording. Not one of the run's model calls: a failed
        count is passed back and not kept, and fails nothing (clients then count locally)."""
        url = self._url(ANTHROPIC, path)
        if url is None:
            return _no_upstream_response(ANTHROPIC)
        self._calling += 1  # a count still in flight when the run ends would be lost: then nothing is written
        try:
            response = await self.forwarder.forward(request, url, body, None, None)
            pair = counted_pair(body, response)
            if pair is not None:
                self._keep_count(*pair)
            return response
        finally:
            self._calling -= 1

    async def embeddings(self, request: web.Request, path: str, body: bytes, api: EmbeddingsAPI) -> web.StreamResponse:
        """Forward an embeddings call (`path` as for `call`) to its provider's upstream; an answer it
        gave is kept (`_keep_embedding`) and written with the recording. A failed one is passed back
        and not kept: the client sees the upstream's error, as it would have without mockllm."""
        url = self._url(api.dialect, path)
        if url is None:
            return _no_upstream_response(api.dialect)
        self._calling += 1
        try:
            response = await self.forwarder.forward(request, url, body, None, None)
            pair = embedded_pair(api, request.match_info, body, response)
            if pair is not None:
                self._keep_embedding(pair)
            return response
        finally:
            self._calling -= 1

    def _url(self, dialect: Dialect, path: str) -> str | None:
        """Where a call under the base root goes upstream; None when no upstream is given for it."""
        base = self.upstreams.base_for(dialect)
        if base is None:
            return None
        if base not in self.hosts:
            self.hosts[base] = host_of(base)
        return upstream_url(base, path)

    @abstractmethod
    def _keep_count(self, request: Any, response: Any) -> None:
        """Keep a `count_tokens` request and the upstream's count for the recording."""

    @abstractmethod
    def _keep_embedding(self, pair: RecordedEmbedding) -> None:
        """Keep an embeddings call the upstream answered for the recording."""

    @abstractmethod
    async def _forward(self, request: web.Request, url: str, body: bytes, dialect: Dialect, neutral: Request,
                       live: Live, early: Exchange | None) -> web.StreamResponse: ...

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
        if problem is None and not (self.recorded or any(b.recorded for b in self.beside)):
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
        self.staging.mkdir(parents=True, exist_ok=True)
        what += "".join(beside.write(self.staging) for beside in self.beside)
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

    def __init__(self, mode: str, name: str, folder: Path, upstreams: Upstreams, client: Upstream,
                 on_failure: OnFailure, cwd: str | None, session_headers: tuple[str, ...],
                 side_routes: Sequence[SideRouteSpec] = ()) -> None:
        """`side_routes`: the server's and the scenario's; their models' calls are written as side routes'
        scripts (`side.MODEL.json`, declared in `mockllm.json`), as `mockllm record --side-route` writes them."""
        super().__init__(mode, name, folder, upstreams, client, on_failure, cwd)
        self.make_parents()
        # Not durable call by call: the folder is renamed into place only once complete and closed.
        self.tree = SessionTree(self.staging, redactor=self.redactor, cwd=bool(cwd), durable=False,
                                side_routes=tuple(r.model for r in side_routes),
                                repeating=frozenset(r.model for r in side_routes if r.repeat))
        # Written when the run ends: its calls are decoded then, off every client's path.
        self.recorder = Recorder.into(self.tree, "", client, session_headers, on_failure, defer=True)

    @property
    def forwarder(self) -> Forwarder:
        return self.recorder.forwarder

    async def _forward(self, request: web.Request, url: str, body: bytes, dialect: Dialect, neutral: Request,
                       live: Live, early: Exchange | None) -> web.StreamResponse:
        return await self.recorder.forward(request, dialect, body=body, neutral=neutral, url=url, exchange=early)

    def _keep_count(self, request: Any, response: Any) -> None:
        self.tree.record_count(request, response)

    def _keep_embedding(self, pair: RecordedEmbedding) -> None:
        self.tree.record_embedding(pair)

    @property
    def recorded(self) -> bool:
        return bool(self.tree.sessions) or bool(self.tree.side.files) or bool(self.tree.embeddings)

    def _write(self) -> str:
        self.tree.close()
        if self.tree.failures:
            raise RecordError(f"{len(self.tree.failures)} write(s) failed: {self.tree.failures[0]}")
        sessions = [s.file for s in self.tree.sessions.values()]
        side = f" and side route(s) {', '.join(self.tree.side.files)}" if self.tree.side.files else ""
        embedded = f", {len(self.tree.embeddings)} embeddings call(s)" if self.tree.embeddings else ""
        return f"recorded {len(sessions)} session(s) ({', '.join(sessions)}){side}, {self.live_calls} call(s)" \
               f"{embedded}, in {self.folder}"

    def discard(self) -> None:
        self.tree.abandon()
        super().discard()


def no_upstream(dialect: Dialect) -> str:
    return (f"no upstream for {dialect.name} calls to record; give one with --upstream URL (or "
            f"{DIALECT_PROVIDERS.get(dialect.name, 'openai')}=URL)")


def _no_upstream_response(dialect: Dialect) -> web.Response:
    body = dialect.error_body(no_upstream(dialect), "no_upstream", 502)
    return web.Response(status=502, body=body, content_type="application/json",
                        headers={"x-should-retry": "false", **(dialect.error_headers(body) or {})})


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
    if not any((staging / name).is_file() for name in (PRIMARY_FILE, SIDECAR_FILE, EMBEDDINGS_FILE)):
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
