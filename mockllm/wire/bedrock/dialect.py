"""Amazon Bedrock Converse: `POST …/model/{modelId}/converse` and `…/model/{modelId}/converse-stream`.

A boto3 `bedrock-runtime` client's `endpoint_url` is a base root, not a `/v1` base:
`http://host:port`, `…/scenarios/{name}`, `…/runs/{run}` (botocore appends `/model/…`). botocore
percent-encodes the model id (`anthropic.claude-3-5-sonnet-20240620-v1%3A0`, an inference
profile's ARN with `%2F`): the route takes it decoded, slashes and all. The SigV4 signature the
client sends is accepted and never checked. A streamed answer is `application/vnd.amazon.eventstream`
(`eventstream`: binary messages, each one wire event, what `--pace` schedules and `cut_after` counts).

How an entry is sent (one recorded delta is one event, fragment boundaries are data):
- `messageStart` `{"role":"assistant"}` opens the stream; each recorded block is one content block,
  numbered on the wire by first sight and sent one after another, as Bedrock does: a block stops
  (`contentBlockStop`) at its recorded `block-end` or when the next block starts. Text is
  `contentBlockDelta` `{"delta":{"text"}}`; reasoning `{"delta":{"reasoningContent":{"text"}}}`,
  then a `{"reasoningContent":{"signature"}}` delta before its stop (dsh records no signature:
  the placeholder `mockllm-unsigned`, as in Anthropic's dialect); a tool call opens with
  `contentBlockStart` `{"start":{"toolUse":{"toolUseId","name"}}}` (its recorded id and name) and
  sends its argument fragments as `{"delta":{"toolUse":{"input"}}}`. Text and reasoning blocks
  have no `contentBlockStart`, as on Bedrock. A block recorded with no deltas is one delta.
- `messageStop` `{"stopReason"}`: `end_turn` for a stop (and a call recorded with no finish),
  `tool_use`, `max_tokens`; an `error` finish: `EMPTY_RESPONSE` `end_turn`, `CONTENT_FILTER`
  `content_filtered`, any other code lowercased (`GUARDRAIL_INTERVENED` -> `guardrail_intervened`).
- `metadata` `{"usage","metrics"}` ends the stream: usage maps dsh's disjoint counts one to one
  (inputTokens -> `inputTokens`, outputTokens -> `outputTokens`, cacheReadTokens ->
  `cacheReadInputTokens`, cacheWriteTokens -> `cacheWriteInputTokens`, `totalTokens` their sum;
  Bedrock reports no reasoning count); no recorded usage: zeros. `metrics.latencyMs` is 0: dsh
  records no latency and Bedrock's clients require the field.
- A `throw` with no chunks is an HTTP error in Bedrock's shape: a JSON body `{"message"}` and the
  error type in the `x-amzn-errortype` header (and in the body's `__type`, which botocore also
  reads), so boto3 raises its own class (`ThrottlingException` for a 429, retried as boto3 does);
  the type is the recorded code when that is a Bedrock exception name, else by status. With
  chunks, they are streamed and then an exception message (`:message-type: exception`,
  `:exception-type` e.g. `throttlingException`): botocore raises an `EventStreamError`.
  `STREAM_CLOSED` is a bare cut; a `CONTEXT_WINDOW_EXCEEDED` finish an HTTP 400
  `ValidationException` "Input is too long for requested model." (what clients such as Strands
  match on); a hang one text delta `partial`, then held.
- `converse` (not streaming): `{"output":{"message":{"role","content":[…]}},"stopReason","usage",
  "metrics"}`, one content block per recorded block (`text`, `reasoningContent.reasoningText`,
  `toolUse` with `input` parsed from the recorded arguments).

Mock-made errors keep Bedrock's shape, the mockllm code heading the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from mockllm.dsh.chunks import (
    FinishChunk,
    TokenUsage,
)
from mockllm.script.entries import ThrowEntry
from mockllm.wire import render
from mockllm.wire.bedrock.eventstream import (
    EVENT_STREAM,
    EventStreamFrames,
    Leads,
    event_headers,
    exception_headers,
    kept_message,
    message,
)
from mockllm.wire.bedrock.request import decode_request, decode_routed
from mockllm.wire.bedrock.stream import BedrockStreamDecoder, EventStreamReader
from mockllm.wire.blocks import BlockByBlock, finish_stop_reason
from mockllm.wire.dialect import Dialect, FrameReader, SSEEvent, StreamDecoder
from mockllm.wire.envelope import Envelope
from mockllm.wire.render import Ended, Reading
from mockllm.wire.reply import Reply
from mockllm.wire.request import Request

_encode = msgspec.json.encode

SIGNATURE = "mockllm-unsigned"  # every replayed reasoning block's signature (see the module doc)

_EXCEPTIONS = {400: "ValidationException", 401: "UnrecognizedClientException", 403: "AccessDeniedException",
               404: "ResourceNotFoundException", 408: "ModelTimeoutException", 424: "ModelErrorException",
               429: "ThrottlingException", 500: "InternalServerException", 503: "ServiceUnavailableException"}
# An error in a stream is one of the ConverseStreamOutput union's exception members.
_STREAM_EXCEPTIONS = {400: "validationException", 429: "throttlingException", 500: "internalServerException",
                      503: "serviceUnavailableException"}


def exception_name(status: int, code: str | None = None) -> str:
    """Bedrock's exception type: a recorded code that is one, else by HTTP status."""
    if code and code.endswith("Exception") and code.isalnum():
        return code
    return _EXCEPTIONS.get(status, "InternalServerException" if status >= 500 else "ValidationException")


def provider_error(message: str, status: int, code: str | None = None) -> bytes:
    """Bedrock's error body; its type rides in `__type` too, where `error_headers` finds it."""
    return _encode({"message": message, "__type": exception_name(status, code)})


def error_body(message: str, code: str | None, status: int) -> bytes:
    """A mock-made error: Bedrock's shape, the mockllm code heading the message."""
    return provider_error(message if code is None else f"{code}: {message}", status)


def usage_object(usage: TokenUsage | None) -> dict[str, int]:
    """dsh's disjoint counts as Bedrock's (also disjoint: input excludes cache reads and writes)."""
    if usage is None:
        return {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}
    cached, written = usage.cacheReadTokens, usage.cacheWriteTokens
    out = {"inputTokens": usage.inputTokens, "outputTokens": usage.outputTokens,
           "totalTokens": usage.inputTokens + usage.outputTokens + (cached or 0) + (written or 0)}
    if cached is not None:
        out["cacheReadInputTokens"] = cached
    if written is not None:
        out["cacheWriteInputTokens"] = written
    return out


_ERROR_STOPS = {"EMPTY_RESPONSE": "end_turn", "CONTENT_FILTER": "content_filtered"}


def stop_reason(finish: FinishChunk | None) -> str:
    return "end_turn" if finish is None else finish_stop_reason(finish.reason, _ERROR_STOPS)


def context_window_message(message: str | None) -> str:
    """The 400's message: Bedrock's wording first, since clients detect the overflow by it."""
    if message and message.startswith("Input is too long"):
        return message
    return f"Input is too long for requested model. {message or 'The context window was exceeded.'}"


def tool_input(arguments: str) -> Any:
    """A tool call's recorded arguments as Bedrock's `input`; text that is not JSON stays as is."""
    if not arguments.strip():
        return {}
    try:
        return msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return arguments


class BedrockConverse(Dialect):
    name = "bedrock"
    path = "/model/{modelId}/{verb}"  # beside /v1: see routes
    stream_type = EVENT_STREAM

    @property
    def routes(self) -> tuple[str, ...]:
        # `.+`: an inference profile's ARN holds a `/` once decoded.
        return ("/model/{modelId:.+}/{verb:converse(?:-stream)?}",)

    @property
    def prefixes(self) -> tuple[str, ...]:
        return ("/model/",)

    def decode_request(self, body: bytes) -> Request:
        return decode_request(body)

    def decode_routed(self, body: bytes, params: Mapping[str, str]) -> Request:
        return decode_routed(body, params)

    def reply_id(self, script: int, call: int) -> str:
        return f"mockllm-{script}-{call}"

    def render(self, reading: Reading, envelope: Envelope) -> Reply:
        return render.render_entry(_ConverseCall, reading, envelope)

    def error_body(self, message: str, code: str | None, status: int) -> bytes:
        return error_body(message, code, status)

    def error_headers(self, body: bytes) -> Mapping[str, str] | None:
        try:
            error = msgspec.json.decode(body)
        except msgspec.DecodeError:
            return None
        kind = error.get("__type") if isinstance(error, dict) else None
        return {"x-amzn-errortype": kind} if isinstance(kind, str) else None

    def frame_reader(self) -> FrameReader:
        return EventStreamReader()

    def stream_decoder(self) -> StreamDecoder:
        return BedrockStreamDecoder()

    def body_events(self, body: bytes) -> list[SSEEvent] | None:
        # A whole answer is read by the same decoder, as one event of its own.
        return [("converse", body.strip())] if body.strip().startswith(b"{") else None

    def upstream_request(self, method: str, url: str, headers: list[tuple[bytes, bytes]],
                         body: bytes) -> tuple[str, list[tuple[bytes, bytes]]]:
        from mockllm.wire.bedrock.signing import signed  # botocore, only when recording

        return signed(method, url, headers, body)


# Each event type's headers, encoded once.
_MESSAGE_START = message(event_headers("messageStart"), b'{"role":"assistant"}')
_BLOCK_START = event_headers("contentBlockStart")
_BLOCK_DELTA = event_headers("contentBlockDelta")
_BLOCK_STOP = event_headers("contentBlockStop")
_MESSAGE_STOP = event_headers("messageStop")
_METADATA = event_headers("metadata")
_DELTA_FIELDS = {"text": b'"text":', "reasoning": b'"reasoningContent":{"text":', "tool-call": b'"toolUse":{"input":'}
_DELTA_ENDS = {"text": b"}}", "reasoning": b"}}}", "tool-call": b"}}}"}
_METRICS = b'{"metrics":{"latencyMs":0},"usage":'


_LEADS: dict[tuple[str, int], Leads] = {}  # (kind, wire index) -> its delta messages' maker, for every reply


def _leads(kind: str, wire: int) -> Leads:
    leads = _LEADS.get((kind, wire))
    if leads is None:
        if len(_LEADS) > 64:  # a recording with very many blocks: what is kept stays bounded
            _LEADS.clear()
        head = b'{"contentBlockIndex":%d,"delta":{' % wire + _DELTA_FIELDS[kind]
        leads = _LEADS[kind, wire] = Leads(_BLOCK_DELTA, head, _DELTA_ENDS[kind])
    return leads


class _Block:
    """One content block on the wire: its kind and index, what its deltas assembled, its tool
    identity, and the maker of its delta messages."""

    __slots__ = ("call_id", "kind", "leads", "name", "parts", "wire")

    def __init__(self, kind: str, wire: int, call_id: str | None, name: str | None) -> None:
        self.kind = kind
        self.wire = wire
        self.parts: list[str] = []
        self.call_id = call_id
        self.name = name
        self.leads = _leads(kind, wire)

    def assembled(self) -> dict[str, Any]:
        """The block in a whole `converse` answer."""
        joined = "".join(self.parts)
        if self.kind == "tool-call":
            return {"toolUse": {"toolUseId": self.call_id, "name": self.name, "input": tool_input(joined)}}
        if self.kind == "reasoning":
            return {"reasoningContent": {"reasoningText": {"text": joined, "signature": SIGNATURE}}}
        return {"text": joined}


class _ConverseCall(BlockByBlock[_Block]):
    """One call as ConverseStream events and its whole `converse` answer."""

    frames_type = EventStreamFrames

    def open_message(self) -> None:
        self.frames.append(_MESSAGE_START)

    def new_block(self, kind: str, wire: int, call_id: str | None, name: str | None) -> _Block:
        if kind != "tool-call":  # text and reasoning open with their first delta, as on Bedrock
            return _Block(kind, wire, None, None)
        block = _Block(kind, wire, call_id or f"tooluse_mockllm_{wire}", name or "")
        start = {"contentBlockIndex": wire, "start": {"toolUse": {"toolUseId": block.call_id, "name": block.name}}}
        self.frames.append(message(_BLOCK_START, _encode(start)))
        return block

    def delta_frame(self, block: _Block, value: bytes) -> bytes:
        return block.leads.one(value)

    def run_frames(self, block: _Block, values: list[bytes]) -> list[bytes]:
        return block.leads.many(values)

    def close_block(self, block: _Block) -> None:
        if block.kind == "reasoning":
            signature = b'{"contentBlockIndex":%d,"delta":{"reasoningContent":{"signature":"%s"}}}' % (
                block.wire, SIGNATURE.encode())
            self.frames.append(kept_message(_BLOCK_DELTA, signature))
        self.frames.append(kept_message(_BLOCK_STOP, b'{"contentBlockIndex":%d}' % block.wire))

    def end(self) -> Ended:
        """Stop the open block, then `messageStop` and `metadata`."""
        self.stop_open()
        stop = _encode(stop_reason(self.finish))
        usage = _encode(usage_object(self.usage))
        self.frames.append(kept_message(_MESSAGE_STOP, b'{"stopReason":' + stop + b"}"))
        self.frames.append(kept_message(_METADATA, _METRICS + usage + b"}"))
        content = _encode([block.assembled() for block in self.blocks])
        whole = (b'{"metrics":{"latencyMs":0},"output":{"message":{"content":' + content
                 + b',"role":"assistant"}},"stopReason":' + stop + b',"usage":' + usage + b"}")
        return None, (), whole

    def error_event(self, entry: ThrowEntry, status: int, body: bytes) -> bytes:
        kind = _STREAM_EXCEPTIONS.get(status, "internalServerException" if status >= 500
                                      else "modelStreamErrorException")
        return message(exception_headers(kind), _encode({"message": entry.message}))

    @staticmethod
    def throw_body(message: str, code: str, status: int) -> bytes:
        return provider_error(message, status, code)

    @staticmethod
    def context_window_body(message: str | None) -> bytes:
        return provider_error(context_window_message(message), 400)

