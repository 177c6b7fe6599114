"""Gemini: `POST …/v1beta/models/{model}:generateContent` and `…:streamGenerateContent?alt=sse`, and
the same under `…/v1/models/…` (google-genai 3.x calls `v1` by default).

The SDK's base URL is a base root, not a `/v1` base: `http://host:port`, `…/scenarios/{name}`,
`…/runs/{run}` (it appends its version and `models/…`). The model and whether to stream are in the
path; a stream is always SSE (`alt=sse`, what the SDK asks for), each event a whole
`GenerateContentResponse` JSON.

How an entry is sent (one recorded delta is one SSE event, fragment boundaries are data):
- each event is `{"candidates":[{"content":{"parts":[…],"role":"model"},"index":0}],
  "modelVersion","responseId"}`: text as a `text` part, reasoning as a `text` part with
  `thought: true`, a tool call as a `functionCall` part `{"id"?, "name", "args":{…}}`, whole:
  Gemini sends calls whole, so a recorded call's fragments are joined and it is sent when its
  block ends (`whole_calls`); `id` only when recorded; arguments that are not a JSON object (a call
  cut mid-arguments when recorded) go out as `{}`, as the SDK accepts only an object;
- the last event carries an empty text part, `finishReason` and `usageMetadata`: `STOP` for a stop
  and for tool calls (as Gemini says), `MAX_TOKENS`, `SAFETY` for a `CONTENT_FILTER` error, a
  Gemini finish reason recorded as an error code as itself, any other error `OTHER`
  (`EMPTY_RESPONSE` a bare `STOP`); usage, when recorded: `promptTokenCount` (input + cache reads),
  `candidatesTokenCount` (output less reasoning), `thoughtsTokenCount` (reasoning),
  `cachedContentTokenCount` (cache reads), `totalTokenCount`;
- a `throw` with no chunks is an HTTP error in Google's shape `{"error":{"code","message","status"}}`
  (its status name the recorded code when that is one, else by HTTP status); with chunks, the events,
  then `data: {"error":…}` (the SDK raises its APIError subclass for the error's code);
  `STREAM_CLOSED` a bare cut; a `CONTEXT_WINDOW_EXCEEDED` finish an HTTP 400 `INVALID_ARGUMENT`;
  a hang one text event `partial`, then held.
- not streaming: one `GenerateContentResponse`, one part per recorded block in order.

Mock-made errors keep Google's shape, the mockllm code heading the message and as the reason of a
`google.rpc.ErrorInfo` detail (`domain: mockllm`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from mockllm.dsh.chunks import FinishChunk, TokenUsage
from mockllm.script.entries import ThrowEntry
from mockllm.wire import render
from mockllm.wire.dialect import Dialect, SSEEvent, StreamDecoder
from mockllm.wire.envelope import Envelope
from mockllm.wire.gemini.request import decode_request, decode_routed
from mockllm.wire.gemini.stream import FINISH_REASONS, GeminiStreamDecoder
from mockllm.wire.render import Ended, Reading, Run
from mockllm.wire.reply import Reply
from mockllm.wire.request import Request
from mockllm.wire.sse import HOLE, data_event, run_pieces
from mockllm.wire.whole_calls import WholeCall, WholeCallRender

_encode = msgspec.json.encode

_STATUS_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                 409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL",
                 501: "UNIMPLEMENTED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
STATUS_NAMES = frozenset(_STATUS_NAMES.values()) | {"FAILED_PRECONDITION", "OUT_OF_RANGE", "UNKNOWN",
                                                    "ALREADY_EXISTS", "DATA_LOSS"}


def status_name(status: int) -> str:
    """Google's status name for an HTTP status (a mock's 410 and 422 are failed preconditions)."""
    return _STATUS_NAMES.get(status, "INTERNAL" if status >= 500 else "FAILED_PRECONDITION")


def provider_error(message: str, status: int, code: str | None = None) -> bytes:
    """Google's own error body, as a replayed error is sent: a recorded status name stays itself."""
    name = code if code in STATUS_NAMES else status_name(status)
    return _encode({"error": {"code": status, "message": message, "status": name}})


def error_body(message: str, code: str | None, status: int) -> bytes:
    """A mock-made error: Google's shape, the mockllm code heading the message and in an ErrorInfo."""
    if code is None:
        return provider_error(message, status)
    detail = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": code, "domain": "mockllm"}
    return _encode({"error": {"code": status, "message": f"{code}: {message}", "status": status_name(status),
                              "details": [detail]}})


def usage_metadata(usage: TokenUsage) -> dict[str, int]:
    """dsh's counts as Gemini's: prompt includes cache reads, candidates exclude thoughts."""
    cached = usage.cacheReadTokens
    prompt = usage.inputTokens + (cached or 0)
    thoughts = usage.reasoningTokens
    out = {"promptTokenCount": prompt, "candidatesTokenCount": usage.outputTokens - (thoughts or 0),
           "totalTokenCount": prompt + usage.outputTokens}
    if thoughts is not None:
        out["thoughtsTokenCount"] = thoughts
    if cached is not None:
        out["cachedContentTokenCount"] = cached
    return out


def finish_reason(finish: FinishChunk | None) -> str | None:
    if finish is None:
        return None
    reason = finish.reason
    if reason.kind in ("stop", "tool-calls"):
        return "STOP"
    if reason.kind == "max-tokens":
        return "MAX_TOKENS"
    if reason.kind == "error":
        code = reason.error_code or "OTHER"
        if code == "EMPTY_RESPONSE":
            return "STOP"
        if code == "CONTENT_FILTER":
            return "SAFETY"
        return code if code in FINISH_REASONS else "OTHER"  # the SDK warns on a reason it does not know
    return "OTHER"


def function_call(call: WholeCall) -> dict[str, Any]:
    wire: dict[str, Any] = {"name": call.name or "", "args": call.arguments}
    if call.call_id is not None:
        wire = {"id": call.call_id, **wire}
    return {"functionCall": wire}


class Gemini(Dialect):
    name = "gemini"
    whole_calls = True
    path = "/models/{model}:{verb}"  # under /v1 and /v1beta: see routes

    @property
    def routes(self) -> tuple[str, ...]:
        return ("/v1beta/models/{model}:{verb}", "/v1/models/{model}:{verb}")

    @property
    def prefixes(self) -> tuple[str, ...]:
        return ("/v1beta/", "/v1/models/")

    def decode_request(self, body: bytes) -> Request:
        return decode_request(body)

    def decode_routed(self, body: bytes, params: Mapping[str, str]) -> Request:
        return decode_routed(body, params)

    def reply_id(self, script: int, call: int) -> str:
        return f"mockllm-{script}-{call}"

    def render(self, reading: Reading, envelope: Envelope) -> Reply:
        return render.render_entry(_GeminiCall, reading, envelope)

    def error_body(self, message: str, code: str | None, status: int) -> bytes:
        return error_body(message, code, status)

    def stream_decoder(self) -> StreamDecoder:
        return GeminiStreamDecoder()

    def body_events(self, body: bytes) -> list[SSEEvent] | None:
        # A whole answer has the shape of one stream event holding everything.
        return [(None, body.strip())] if body.strip().startswith(b"{") else None


_EVENT_HEAD = b'data: {"candidates":[{"content":{"parts":['
_EVENT_MIDDLE = b'],"role":"model"},"index":0}]'
# A text and a thought part around their text, encoded once (sse.py's templates).
_TEXT_PART = _encode({"text": HOLE}).split(b"\x00")
_THOUGHT_PART = _encode({"text": HOLE, "thought": True}).split(b"\x00")


class _GeminiCall(WholeCallRender):
    """One call as `GenerateContentResponse` SSE events and its whole answer."""

    def opening(self) -> None:
        envelope = self.envelope
        # Every event closes with the same fields: encoded once per reply.
        self._suffix = b',"modelVersion":' + _encode(envelope.model) + b',"responseId":' + _encode(envelope.reply_id)
        self._blocks: dict[int, dict[str, Any]] = {}  # recorded block index -> its whole part, in order
        # A text and a thought delta's event around its encoded text: what every delta costs is a join.
        tail = _EVENT_MIDDLE + self._suffix + b"}\n\n"
        self._text = (_EVENT_HEAD + _TEXT_PART[0], _TEXT_PART[1] + tail)
        self._thought = (_EVENT_HEAD + _THOUGHT_PART[0], _THOUGHT_PART[1] + tail)

    def text_text(self, index: int, text: str) -> None:
        self._assemble(index, text, thought=False)
        head, tail = self._text
        self.frames.append(head + _encode(text) + tail)

    def reasoning_text(self, index: int, text: str) -> None:
        self._assemble(index, text, thought=True)
        head, tail = self._thought
        self.frames.append(head + _encode(text) + tail)

    def text_run(self, index: int, run: Run) -> None:
        self._assemble(index, run.text, thought=False)
        head, tail = self._text
        self.frames.run(run_pieces(head, run.values, tail), run.count)

    def reasoning_run(self, index: int, run: Run) -> None:
        self._assemble(index, run.text, thought=True)
        head, tail = self._thought
        self.frames.run(run_pieces(head, run.values, tail), run.count)

    def send_call(self, call: WholeCall) -> None:
        part = function_call(call)
        self._blocks[call.index] = part
        self._event(part)

    def end(self) -> Ended:
        self.flush_calls()
        candidate: dict[str, Any] = {"content": {"parts": [{"text": ""}], "role": "model"}}
        reason = finish_reason(self.finish)
        if reason is not None:
            candidate["finishReason"] = reason
        candidate["index"] = 0
        last: dict[str, Any] = {"candidates": [candidate]}
        if self.usage is not None:
            last["usageMetadata"] = usage_metadata(self.usage)
        self.frames.append(data_event(_encode(last)[:-1] + self._suffix + b"}"))
        return None, (), _encode(self.body(reason))

    def held(self) -> Ended:
        self.flush_calls()
        return None, (), b""

    def error_event(self, entry: ThrowEntry, status: int, body: bytes) -> bytes:
        return data_event(body)

    @staticmethod
    def throw_body(message: str, code: str, status: int) -> bytes:
        return provider_error(message, status, code)

    @staticmethod
    def context_window_body(message: str | None) -> bytes:
        return provider_error(message or "The input token count exceeds the maximum number of tokens allowed.", 400)

    def _assemble(self, index: int, text: str, thought: bool) -> None:
        """Keep a delta for the whole answer: one part per recorded block, in first-sight order."""
        part = self._blocks.get(index)
        if part is None:
            part = self._blocks[index] = {"text": "", "thought": True} if thought else {"text": ""}
        part["text"] += text

    def _event(self, part: dict[str, Any]) -> None:
        # Only the part varies: the envelope around it is bytes, not a dict encoded every event.
        self.frames.append(_EVENT_HEAD + _encode(part) + _EVENT_MIDDLE + self._suffix + b"}\n\n")

    def body(self, reason: str | None) -> dict[str, Any]:
        """The non-streaming `GenerateContentResponse` for the same call."""
        candidate: dict[str, Any] = {"content": {"parts": list(self._blocks.values()), "role": "model"}}
        if reason is not None:
            candidate["finishReason"] = reason
        candidate["index"] = 0
        out: dict[str, Any] = {"candidates": [candidate]}
        if self.usage is not None:
            out["usageMetadata"] = usage_metadata(self.usage)
        out["modelVersion"] = self.envelope.model
        out["responseId"] = self.envelope.reply_id
        return out
