"""One recorded session's events: turn and step state, `seq` numbering, and each call's rows.

A call is written as dsh writes it: a new turn opens with `turn/start` and the user's messages;
the tool results a request carries answer the open step (`tool/result`, then `step/end`); the
session's first call is preceded by a `request/header` holding its system prompt and the names of
the tools it offered, as dsh writes one (`{"header": {"system": …, "tools": […]}, "reason":
"initial"}`: replay binds subagents that were asked the same thing by them); then `step/start`,
the answer's `assistant/chunk`s (each at the time it arrived), `assistant/message` and a
`tool/call` per tool call. An answer that calls tools leaves its step open for the results
the next request brings; any other answer ends its step and its turn at once, so a fork made
later inherits the turn as soon as it is complete (the seed is every event up to the last
`turn/end`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from mockllm.dsh.chunks import Block, BlockEnd, FinishReason, UsageChunk
from mockllm.dsh.names import (
    ASSISTANT_MESSAGE,
    CHUNK_EVENT,
    REQUEST_HEADER,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
)
from mockllm.dsh.reader import CallChunk, Event
from mockllm.dsh.writer import EventLike
from mockllm.record.call import ObservedCall
from mockllm.record.redact import Redactor, redact_chunks
from mockllm.script.inputs import Input

USER_TRIGGER = {"kind": "message", "source": {"kind": "user"}}


class SessionEvents:
    """Numbering and turn/step state of one session's log; `call()` gives a call's rows."""

    def __init__(self, *, first_seq: int = 0, turn: int = 0) -> None:
        self.seq = first_seq  # the next event's seq: logical events so far, seed included
        self.turn = turn  # the current (or last) turn number; a fork child goes on from its seed's
        self.step = 0
        self.turn_open = False
        self.step_open = False  # the last answer called tools and awaits their results
        self.calls = 0  # recorded model calls: what a sidecar patch's `at` counts
        # The completed-turn prefix a fork of this session inherits: events up to the last turn/end.
        self.completed = first_seq
        self.completed_turn = turn

    def call(self, call: ObservedCall, redactor: Redactor) -> list[EventLike]:
        """The rows of one model call, numbered; the state moves past it."""
        rows: list[EventLike] = []
        t0 = call.started
        tool_results = [m for m in call.inputs if m.role == "tool"]
        user_messages = [m for m in call.inputs if m.role == "user"]
        if call.starts_turn or not self.turn_open:
            self._results(rows, tool_results, t0, redactor)
            self._end_step(rows, t0)
            self._end_turn(rows, t0, {"kind": "completed"})
            self.turn += 1
            self.step = 0
            self.turn_open = True
            self._add(rows, TURN_START, t0, {"turn": self.turn, "trigger": USER_TRIGGER})
        else:
            self._results(rows, tool_results, t0, redactor)
            self._end_step(rows, t0)
        for message in user_messages:
            self._add(rows, USER_MESSAGE, t0, {"content": [{"type": "text", "text": redactor.text(message.text)}],
                                               "source": {"kind": "user"}})
        if self.calls == 0 and (call.system is not None or call.tools is not None):
            header: dict[str, Any] = {}
            if call.system is not None:
                header["system"] = redactor.text(call.system)
            if call.tools is not None:  # names only: enough to tell twins apart, and small
                header["tools"] = sorted(call.tools)
            self._add(rows, REQUEST_HEADER, t0, {"header": header, "reason": "initial"})
        self.step += 1
        self._add(rows, STEP_START, t0, {"turn": self.turn, "step": self.step})
        self.step_open = True
        chunks = redact_chunks(redactor, [c.chunk for c in call.chunks])
        for timed, chunk in zip(call.chunks, chunks, strict=True):
            rows.append(Event(CHUNK_EVENT, self._next(), timed.time, 0, CallChunk(self.turn, self.step, chunk)))
        self.calls += 1
        t1 = call.ended
        blocks = [c.block for c in sorted((c for c in chunks if isinstance(c, BlockEnd)), key=lambda c: c.index)]
        answer: dict[str, Any] = {"turn": self.turn, "step": self.step, "content": [_block(b) for b in blocks]}
        usage = next((c.usage for c in chunks if isinstance(c, UsageChunk)), None)
        if usage is not None:
            answer["usage"] = msgspec.to_builtins(usage)
        self._add(rows, ASSISTANT_MESSAGE, t1, answer)
        for block in blocks:
            if block.type == "tool-call":
                self._add(rows, TOOL_CALL, t1, {"turn": self.turn, "step": self.step, "callId": block.id,
                                                "name": block.name, "arguments": _arguments(block.arguments)})
        if not call.calls_tools:  # else the step stays open for the results the next request brings
            self._end_step(rows, t1)
            self._end_turn(rows, t1, _turn_reason(call.finish, self.step))
        return rows

    def closing(self, time: int) -> list[EventLike]:
        """What ends the log when recording stops: the open step and turn, if any."""
        rows: list[EventLike] = []
        self._end_step(rows, time)
        self._end_turn(rows, time, {"kind": "aborted", "reason": "recording ended"})
        return rows

    def _results(self, rows: list[EventLike], results: list[Input], time: int, redactor: Redactor) -> None:
        step = self.step if self.turn_open else self.step + 1  # results with no open turn: the coming step's
        turn = self.turn if self.turn_open else self.turn + 1
        for message in results:
            self._add(rows, TOOL_RESULT, time, {
                "turn": turn, "step": step, "callId": redactor.value(message.tool_call_id),
                "content": [{"type": "text", "text": redactor.text(message.text)}], "isError": False})

    def _end_step(self, rows: list[EventLike], time: int) -> None:
        if self.step_open:
            self._add(rows, STEP_END, time, {"turn": self.turn, "step": self.step})
            self.step_open = False

    def _end_turn(self, rows: list[EventLike], time: int, reason: dict[str, Any]) -> None:
        if self.turn_open:
            self._add(rows, TURN_END, time, {"turn": self.turn, "reason": reason})
            self.turn_open = False
            self.completed = self.seq
            self.completed_turn = self.turn

    def _add(self, rows: list[EventLike], kind: str, time: int, data: dict[str, Any]) -> None:
        rows.append({"type": kind, "seq": self._next(), "time": time, "data": data})

    def _next(self) -> int:
        seq = self.seq
        self.seq += 1
        return seq


def _block(block: Block) -> dict[str, Any]:
    if block.type == "tool-call":
        return {"type": "tool-call", "id": block.id, "name": block.name, "arguments": _arguments(block.arguments)}
    return {"type": block.type, "text": block.text or ""}


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else msgspec.json.encode(value).decode()


def _turn_reason(finish: FinishReason | None, step: int) -> dict[str, Any]:
    if finish is None or finish.kind in ("stop", "max-tokens", "tool-calls"):
        return {"kind": "completed"}
    if finish.kind == "error":
        return {"kind": "error", "step": step, "message": finish.error_message, "code": finish.error_code}
    return {"kind": finish.kind}
