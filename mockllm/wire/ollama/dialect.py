"""Ollama: `POST …/api/chat` (NDJSON stream and `stream: false`), `GET …/api/tags`, `POST …/api/show`.

The official client's host is a base root, not a `/v1` base: `http://host:port`, `…/scenarios/{name}`,
`…/runs/{run}` (it appends `/api/chat`). A streamed answer is `application/x-ndjson`: one JSON object
a line, each line one wire event (what `--pace` schedules and a `cut_after` fault counts).

How an entry is sent (one recorded delta is one line, fragment boundaries are data):
- each line is `{"model","created_at","message":{"role":"assistant","content":…},"done":false}`:
  text as `message.content`, reasoning as `message.thinking` (content "");
- a tool call as `message.tool_calls[{"id"?, "function":{"index","name","arguments":{…}}}]`, whole:
  Ollama sends calls whole, so a recorded call's fragments are joined and the call is one line,
  when its block ends (`whole_calls`); the recorded id rides along when there is one (the official
  client ignores it); arguments that are not a JSON object (a call cut mid-arguments when
  recorded) go out as `{}`, as the official client accepts only an object;
- the last line is `done: true` with `done_reason` (`stop` for a stop and for tool calls, as Ollama
  says; `length` for max tokens; an `error` finish's code lowercased, `EMPTY_RESPONSE` a bare stop)
  and, when recorded, `prompt_eval_count` (input + cache reads) and `eval_count` (output);
- a `throw` with no chunks is an HTTP error with Ollama's body `{"error": message}`; with chunks, the
  lines, then an `{"error": …}` line (the client raises `ResponseError`); `STREAM_CLOSED` a bare cut;
  a `CONTEXT_WINDOW_EXCEEDED` finish an HTTP 400; a hang one text line `partial`, then held.
- `stream: false`: one object, the message assembled, `done: true` and the same counts.

Mock-made errors are `{"error": "<code>: <message>", "code": "<code>"}` (the client shows `error`).
`/api/tags` lists the scenario's models (the recorded one, then side routes'), `/api/show` answers
any model (the client checks a model exists; the mock serves whatever it is called).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import msgspec

from mockllm.dsh.chunks import FinishChunk, TokenUsage
from mockllm.script.entries import ThrowEntry
from mockllm.wire import render
from mockllm.wire.dialect import Dialect, FrameReader, InfoRoute, SSEEvent, StreamDecoder
from mockllm.wire.envelope import Envelope
from mockllm.wire.ollama.ndjson import NDJSON, NDJSONReader, line
from mockllm.wire.ollama.request import decode_request
from mockllm.wire.ollama.stream import OllamaStreamDecoder
from mockllm.wire.render import Ended, Reading, Run
from mockllm.wire.reply import Reply
from mockllm.wire.request import Request
from mockllm.wire.sse import run_pieces
from mockllm.wire.whole_calls import WholeCall, WholeCallRender

_encode = msgspec.json.encode


def provider_error(message: str) -> bytes:
    """Ollama's own error body, as a replayed error is sent."""
    return _encode({"error": message})


def error_body(message: str, code: str | None, status: int) -> bytes:
    """A mock-made error: Ollama's shape, the mockllm code heading the message and in `code`."""
    if code is None:
        return provider_error(message)
    return _encode({"error": f"{code}: {message}", "code": code})


# Remembered: strftime cost a third of a first render, and a scenario's replies share a few
# creation times (one per session).
@lru_cache(maxsize=256)
def created_at(created: int) -> str:
    """Ollama's timestamp (RFC 3339, UTC) for a reply's creation time."""
    return datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def counts(usage: TokenUsage | None) -> dict[str, int]:
    """dsh's usage as Ollama's counts: prompt tokens include cache reads (Ollama reports no cache)."""
    if usage is None:
        return {}
    return {"prompt_eval_count": usage.inputTokens + (usage.cacheReadTokens or 0), "eval_count": usage.outputTokens}


def done_reason(finish: FinishChunk | None) -> str | None:
    if finish is None:
        return None
    reason = finish.reason
    if reason.kind in ("stop", "tool-calls"):
        return "stop"
    if reason.kind == "max-tokens":
        return "length"
    if reason.kind == "error":
        code = reason.error_code or "error"
        return "stop" if code == "EMPTY_RESPONSE" else code.lower()
    return reason.kind.replace("-", "_")


def tool_call(call: WholeCall) -> dict[str, Any]:
    wire: dict[str, Any] = {"function": {"index": call.ordinal, "name": call.name or "", "arguments": call.arguments}}
    if call.call_id is not None:
        wire = {"id": call.call_id, **wire}
    return wire


_DETAILS = {"parent_model": "", "format": "gguf", "family": "mockllm", "families": ["mockllm"],
            "parameter_size": "", "quantization_level": ""}
_MODIFIED = "1970-01-01T00:00:00Z"


def tags(models: Sequence[str], body: bytes) -> tuple[int, bytes]:
    """`GET /api/tags`: the scenario's models, as installed local models."""
    listed = [{"name": m, "model": m, "modified_at": _MODIFIED, "size": 0, "digest": "mockllm", "details": _DETAILS}
              for m in dict.fromkeys(models)]
    return 200, _encode({"models": listed})


def show(models: Sequence[str], body: bytes) -> tuple[int, bytes]:
    """`POST /api/show`: any model exists (the mock answers whatever model it is called with)."""
    return 200, _encode({"modelfile": "", "parameters": "", "template": "", "details": _DETAILS, "model_info": {},
                         "capabilities": ["completion", "tools", "thinking"], "modified_at": _MODIFIED})


def version(models: Sequence[str], body: bytes) -> tuple[int, bytes]:
    """`GET /api/version`: some clients check the server before the first chat."""
    return 200, b'{"version":"0.12.0"}'


class Ollama(Dialect):
    name = "ollama"
    whole_calls = True
    path = "/api/chat"  # not under /v1: see routes
    stream_type = NDJSON
    info_routes = (InfoRoute("GET", "/api/tags", tags), InfoRoute("POST", "/api/show", show),
                   InfoRoute("GET", "/api/version", version))

    @property
    def routes(self) -> tuple[str, ...]:
        return ("/api/chat",)

    @property
    def prefixes(self) -> tuple[str, ...]:
        return ("/api/",)

    def decode_request(self, body: bytes) -> Request:
        return decode_request(body)

    def reply_id(self, script: int, call: int) -> str:
        return f"ollama-mockllm-{script}-{call}"  # not on the wire: Ollama answers carry no id

    def render(self, reading: Reading, envelope: Envelope) -> Reply:
        return render.render_entry(_OllamaCall, reading, envelope)

    def error_body(self, message: str, code: str | None, status: int) -> bytes:
        return error_body(message, code, status)

    def stream_decoder(self) -> StreamDecoder:
        return OllamaStreamDecoder()

    def frame_reader(self) -> FrameReader:
        return NDJSONReader()

    def frame(self, name: str | None, data: bytes) -> bytes:
        return line(data)

    def body_events(self, body: bytes) -> list[SSEEvent] | None:
        # A whole answer is the one object a stream's lines add up to: the decoder reads it as a line.
        return [(None, body.strip())] if body.strip().startswith(b"{") else None


# A line's end after its message, and a text and a thinking delta's message before its text: every
# delta's line is these around its encoded text (what `_line` makes of the same message).
_LINE_END = line(b',"done":false}')
_CONTENT = b'{"role":"assistant","content":'
_THINKING = b'{"role":"assistant","content":"","thinking":'


class _OllamaCall(WholeCallRender):
    """One call as NDJSON lines and its whole answer."""

    event_end = b"\n"  # a line

    def opening(self) -> None:
        envelope = self.envelope
        # Every line opens with the same fields: encoded once per reply.
        self._prefix = (b'{"model":' + _encode(envelope.model) + b',"created_at":'
                        + _encode(created_at(envelope.created)) + b',"message":')
        self._content: list[str] = []
        self._thinking: list[str] = []
        self._tail = b"}" + _LINE_END

    def text_text(self, index: int, text: str) -> None:
        self._content.append(text)
        self.frames.append(self._prefix + _CONTENT + _encode(text) + self._tail)

    def reasoning_text(self, index: int, text: str) -> None:
        self._thinking.append(text)
        self.frames.append(self._prefix + _THINKING + _encode(text) + self._tail)

    def text_run(self, index: int, run: Run) -> None:
        self._content.append(run.text)
        self.frames.run(run_pieces(self._prefix + _CONTENT, run.values, self._tail), run.count)

    def reasoning_run(self, index: int, run: Run) -> None:
        self._thinking.append(run.text)
        self.frames.run(run_pieces(self._prefix + _THINKING, run.values, self._tail), run.count)

    def send_call(self, call: WholeCall) -> None:
        self._line({"role": "assistant", "content": "", "tool_calls": [tool_call(call)]})

    def end(self) -> Ended:
        self.flush_calls()
        done = self._done()[1:]  # its fields, after the message, close the last line and the whole answer
        last = self._prefix + b'{"role":"assistant","content":""},' + done
        return None, (line(last),), self._prefix + _encode(self.message()) + b"," + done

    def held(self) -> Ended:
        self.flush_calls()
        return None, (), b""

    def error_event(self, entry: ThrowEntry, status: int, body: bytes) -> bytes:
        return line(body)

    @staticmethod
    def throw_body(message: str, code: str, status: int) -> bytes:
        return provider_error(message)

    @staticmethod
    def context_window_body(message: str | None) -> bytes:
        return provider_error(message or "the input exceeds the context window")

    def _line(self, message: dict[str, Any]) -> None:
        self.frames.append(self._prefix + _encode(message) + _LINE_END)

    def _done(self) -> bytes:
        """`{"done":true,"done_reason":…,counts}`: the last line's tail and the whole answer's."""
        done: dict[str, Any] = {"done": True, "done_reason": done_reason(self.finish), **counts(self.usage)}
        return _encode(done)

    def message(self) -> dict[str, Any]:
        """The non-streaming answer's message: `{"model","created_at","message",…done}` as the
        lines' prefix and the last line's fields, around it."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._content)}
        if self._thinking:
            message["thinking"] = "".join(self._thinking)
        if self.whole_calls:
            message["tool_calls"] = [tool_call(c) for c in self.whole_calls]
        return message
