"""A live Bedrock ConverseStream answer decoded back into StreamChunks, the way dsh's adapter records.

`EventStreamReader` splits the upstream's binary event stream into (event type, JSON payload)
pairs with botocore's `EventStreamBuffer` (it checks both CRCs; record mode needs botocore to
sign anyway, so it is imported only here, when a stream is read). An exception message becomes
an `exception` event whose payload names its type.

Each `contentBlockStart` (a tool use: its id and name) or first delta of a `contentBlockIndex`
opens a block: text deltas as text, `reasoningContent.text` as reasoning (its `signature` and
`redactedContent` add nothing: dsh records neither), `toolUse.input` fragments as tool-call
deltas. `messageStop`'s `stopReason`: `end_turn` and `stop_sequence` a stop, `tool_use` tool
calls, `max_tokens` max tokens, `content_filtered` a `CONTENT_FILTER` error, any other an error
naming it uppercased. `metadata.usage`: inputTokens, outputTokens, cacheReadInputTokens,
cacheWriteInputTokens. An exception ends the call with an error, its type the code.
A whole (`converse`) answer is read as one `converse` event.
"""

from __future__ import annotations

from typing import Any

import msgspec

from mockllm.dsh.chunks import BlockStart, Failure, FinishReason, StreamChunk, TokenUsage
from mockllm.wire.dialect import OpenBlock, SSEEvent, StreamDecoder, closing_chunks

_encode = msgspec.json.encode

_STOPS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool-calls", "max_tokens": "max-tokens"}


def finish_from_wire(reason: str) -> FinishReason:
    if reason in _STOPS:
        return FinishReason(_STOPS[reason])
    code = "CONTENT_FILTER" if reason == "content_filtered" else reason.upper()
    return FinishReason("error", failure=Failure(message=f"stopReason {reason}", code=code))


def usage_from_wire(usage: dict[str, Any]) -> TokenUsage:
    return TokenUsage(int(usage.get("inputTokens") or 0), int(usage.get("outputTokens") or 0),
                      cacheReadTokens=usage.get("cacheReadInputTokens"),
                      cacheWriteTokens=usage.get("cacheWriteInputTokens"))


class EventStreamReader:
    """Splits a live event stream into (event type, payload) as its bytes arrive."""

    def __init__(self) -> None:
        from botocore.eventstream import EventStreamBuffer  # record mode only: see the module doc

        self._buffer = EventStreamBuffer()

    def feed(self, piece: bytes) -> list[SSEEvent]:
        self._buffer.add_data(piece)
        out: list[SSEEvent] = []
        for message in self._buffer:
            headers = message.headers
            kind = headers.get(":message-type")
            if kind == "event":
                out.append((headers.get(":event-type"), message.payload))
            elif kind == "exception":
                out.append(("exception", _exception(headers.get(":exception-type"), message.payload)))
            elif kind == "error":
                out.append(("exception", _encode({"type": headers.get(":error-code"),
                                                  "message": headers.get(":error-message")})))
        return out

    def close(self) -> list[SSEEvent]:
        return []  # a message cut short is no message


def _exception(kind: str | None, payload: bytes) -> bytes:
    try:
        body = msgspec.json.decode(payload)
    except msgspec.DecodeError:
        body = {}
    message = body.get("message") or body.get("Message") if isinstance(body, dict) else None
    return _encode({"type": kind, "message": message})


class BedrockStreamDecoder(StreamDecoder):
    def __init__(self) -> None:
        self._blocks: list[OpenBlock] = []
        self._by_index: dict[int, OpenBlock] = {}  # the wire's contentBlockIndex -> its block
        self._usage: TokenUsage | None = None
        self._finish: FinishReason | None = None

    def feed(self, event: str | None, data: bytes) -> list[StreamChunk]:
        payload = msgspec.json.decode(data)
        if not isinstance(payload, dict):
            return []
        if event == "converse":
            return self._whole(payload)
        if event == "contentBlockStart":
            start = payload.get("start") or {}
            use = start.get("toolUse") if isinstance(start, dict) else None
            if isinstance(use, dict):
                return self._open(payload.get("contentBlockIndex"), "tool-call", use.get("toolUseId"), use.get("name"))
            return []
        if event == "contentBlockDelta":
            return self._delta(payload.get("contentBlockIndex"), payload.get("delta") or {})
        if event == "messageStop":
            self._finish = finish_from_wire(str(payload.get("stopReason") or "end_turn"))
        elif event == "metadata":
            if isinstance(payload.get("usage"), dict):
                self._usage = usage_from_wire(payload["usage"])
            self.ended = True  # the stream's last event
        elif event == "exception":
            self._finish = FinishReason("error", failure=Failure(message=payload.get("message"),
                                                                 code=payload.get("type")))
            self.ended = True
        return []

    def _open(self, wire: Any, kind: str, call_id: str | None = None, name: str | None = None) -> list[StreamChunk]:
        block = OpenBlock(len(self._blocks), kind, call_id, name)
        self._blocks.append(block)
        self._by_index[wire] = block
        return [BlockStart(block.index, kind)]

    def _delta(self, wire: Any, delta: dict[str, Any]) -> list[StreamChunk]:
        if "text" in delta:
            kind, text = "text", delta["text"]
        elif isinstance(delta.get("reasoningContent"), dict):
            kind, text = "reasoning", delta["reasoningContent"].get("text")
        elif isinstance(delta.get("toolUse"), dict):
            kind, text = "tool-call", delta["toolUse"].get("input")
        else:
            return []
        if not isinstance(text, str):  # a signature or redacted reasoning: not recorded
            return []
        out: list[StreamChunk] = []
        block = self._by_index.get(wire)
        if block is None:
            out += self._open(wire, kind)
            block = self._by_index[wire]
        out.append(block.delta(text))
        return out

    def _whole(self, reply: dict[str, Any]) -> list[StreamChunk]:
        """A `converse` answer: its content blocks in order, each one delta."""
        output = reply.get("output") or {}
        content = ((output.get("message") or {}).get("content") or []) if isinstance(output, dict) else []
        out: list[StreamChunk] = []
        for wire, block in enumerate(content):
            if not isinstance(block, dict):
                continue
            if isinstance(block.get("toolUse"), dict):
                use = block["toolUse"]
                out += self._open(wire, "tool-call", use.get("toolUseId"), use.get("name"))
                value = use.get("input")
                out.append(self._by_index[wire].delta(value if isinstance(value, str) else _encode(value).decode()))
            elif isinstance(block.get("reasoningContent"), dict):
                text = (block["reasoningContent"].get("reasoningText") or {}).get("text")
                if isinstance(text, str):
                    out += self._delta(wire, {"reasoningContent": {"text": text}})
            elif isinstance(block.get("text"), str):
                out += self._delta(wire, {"text": block["text"]})
        if isinstance(reply.get("stopReason"), str):
            self._finish = finish_from_wire(reply["stopReason"])
        if isinstance(reply.get("usage"), dict):
            self._usage = usage_from_wire(reply["usage"])
        self.ended = True
        return out

    def close(self) -> list[StreamChunk]:
        return closing_chunks(self._blocks, self._usage, self._finish, "messageStop")
