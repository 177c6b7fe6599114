"""The embeddings routes' handler, beside the model routes: a recorded answer for a request with the
same content; else, in a run that records, the upstream's (kept for its recording); else a 404 in
the provider's error shape naming the nearest recorded input, noted as a divergence of the run.

| the run | a recorded answer | none |
| --- | --- | --- |
| replays (`none`, `once` with a recording) | served | 404 `unrecorded_embedding`, a divergence |
| `new_episodes` | served | sent upstream, kept |
| records from scratch (`once` with none, `rewrite`) | sent upstream, kept | sent upstream, kept |
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from mockllm.dsh.names import EMBEDDINGS_FILE
from mockllm.errors import RequestError
from mockllm.hosting.bodies import read_body
from mockllm.replay.journal import CallRecord, RawHeaders
from mockllm.replay.run import Run
from mockllm.scenario.embeddings import EmbeddingCall, input_text, short
from mockllm.server.events import Hub
from mockllm.server.live import LiveCalls
from mockllm.server.mock_errors import PASSED_ON, internal_error, mock_error, too_large
from mockllm.wire.dialect import Dialect
from mockllm.wire.embeddings import EmbeddingsAPI

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
RunFor = Callable[[web.Request, Dialect], "Run | web.Response"]


class EmbeddingsRoutes:
    def __init__(self, run_for: RunFor, live: LiveCalls, max_body: int, hub: Hub) -> None:
        self.run_for = run_for  # the run a request's base names, or the error to answer
        self.live = live
        self.max_body = max_body
        self.hub = hub  # an open inspector page hears of each call

    def handler(self, api: EmbeddingsAPI) -> Handler:
        """The handler of `api`'s routes under every base."""

        async def answer(request: web.Request) -> web.StreamResponse:
            try:
                return await self._answer(request, api)
            except PASSED_ON:
                raise
            except Exception as exc:
                return mock_error(500, "mockllm_internal_error", internal_error(request, exc), dialect=api.dialect)

        return answer

    async def _answer(self, request: web.Request, api: EmbeddingsAPI) -> web.StreamResponse:
        dialect = api.dialect
        run = self.run_for(request, dialect)
        if not isinstance(run, Run):
            return run
        body = await read_body(request, self.max_body)
        if body is None:
            return too_large(self.max_body, dialect)
        record = _journaled(api, run, request.raw_headers, body)
        try:
            response = await self._served(request, api, run, body, record)
        finally:
            record.done()
        self._answered(run, record, response)
        return response

    def at_once(self, api: EmbeddingsAPI, run: Run, body: bytes, match_info: Mapping[str, str],
                raw_headers: RawHeaders) -> web.Response:
        """The answer for a run that records nothing (the recorded answer, or the miss), journaled as
        the handler journals it: what the fast lane writes (`fast_calls`)."""
        record = _journaled(api, run, raw_headers, body)
        try:
            decoded = self._decoded(api, run, body, match_info, record)
            if isinstance(decoded, web.Response):
                response = decoded
            else:
                call, request_body = decoded
                response = self._recorded(api, run, call, request_body, record) or self._missed(api, run, call, record)
        finally:
            record.done()
        self._answered(run, record, response)
        return response

    def _answered(self, run: Run, record: CallRecord, response: web.StreamResponse) -> None:
        record.status = response.status
        if self.hub.watched:
            self.hub.touched(run.id)

    async def _served(self, request: web.Request, api: EmbeddingsAPI, run: Run, body: bytes,
                      record: CallRecord) -> web.StreamResponse:
        decoded = self._decoded(api, run, body, request.match_info, record)
        if isinstance(decoded, web.Response):
            return decoded
        call, request_body = decoded
        if not run.recording:  # a run recording from scratch asks the upstream every time
            recorded = self._recorded(api, run, call, request_body, record)
            if recorded is not None:
                return recorded
        live = await self.live.embeddings(request, run, body, api)
        if live is not None:
            record.kind = "live"
            return live
        return self._missed(api, run, call, record)

    @staticmethod
    def _decoded(api: EmbeddingsAPI, run: Run, body: bytes, match_info: Mapping[str, str],
                 record: CallRecord) -> tuple[EmbeddingCall, Any] | web.Response:
        try:
            return api.read(body, match_info)
        except RequestError as exc:
            record.error = "invalid_request"
            return mock_error(400, "invalid_request", f"run {run.id}: {exc}", dialect=api.dialect)

    @staticmethod
    def _recorded(api: EmbeddingsAPI, run: Run, call: EmbeddingCall, decoded: Any,
                  record: CallRecord) -> web.Response | None:
        store = run.scenario.embeddings
        number = store.find(call, run.cwd) if store is not None else None
        if store is None or number is None:
            return None
        record.call = number
        return web.Response(body=api.answer(store.recorded[number], decoded), content_type="application/json")

    @staticmethod
    def _missed(api: EmbeddingsAPI, run: Run, call: EmbeddingCall, record: CallRecord) -> web.Response:
        store = run.scenario.embeddings
        texts = [input_text(i) for i in call.inputs]
        got = short(" | ".join(texts))
        if store is None:
            nearest, where = "", f"scenario {run.scenario.name} has no {EMBEDDINGS_FILE}"
        else:
            nearest, where = store.nearest(call)
        miss = run.embedding_missed(api.name, call.model, got, nearest, EMBEDDINGS_FILE)
        # `call`: a hit names the recorded pair, a miss its number among the run's misses (as its divergence does,
        # so the inspector links the two).
        record.call, record.error, record.diverged = miss.call, "unrecorded_embedding", miss.what
        hint = f"nearest recorded input: {nearest!r} ({where})" if nearest else where
        return mock_error(404, "unrecorded_embedding", (
            f"run {run.id}: no recorded {api.name} request of scenario {run.scenario.name} has model {call.model} "
            f"and these {len(texts)} input(s): {got!r}; {hint}. Record it (mockllm record, or a run with "
            "record_mode new_episodes)"), dialect=api.dialect)


def _journaled(api: EmbeddingsAPI, run: Run, raw_headers: RawHeaders, body: bytes) -> CallRecord:
    """The call's record in the run's journal, beside its model calls (the inspector lists them in
    a lane of their own)."""
    record = run.journal.record(api.name, "embeddings", False, raw_headers, body)
    record.script, record.kind = EMBEDDINGS_FILE, "embedding"
    return record
