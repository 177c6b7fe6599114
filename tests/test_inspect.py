"""`describe_entry`: the one-line gist of a script entry (shared by inspect and the admin endpoints)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from mockllm.cli.tree_view import describe_entry
from mockllm.dsh.chunks import StreamChunk
from mockllm.script.entries import ChunksEntry, Entry, HangEntry, ThrowEntry
from tests.logbuilder import text_call, tool_call


def chunks(*raw: Any) -> list[StreamChunk]:
    return msgspec.convert(list(raw), list[StreamChunk])


REASONING = [
    {"type": "block-start", "index": 0, "blockType": "reasoning"},
    {"type": "reasoning-delta", "index": 0, "text": "let me think"},
    {"type": "block-end", "index": 0, "block": {"type": "reasoning", "text": "let me think"}},
]
STOP = {"type": "finish", "reason": {"kind": "stop"}}

GISTS = [
    pytest.param(ChunksEntry(chunks(*text_call("hello there"))), '"hello there"; finish stop', id="text"),
    pytest.param(ChunksEntry(chunks(*text_call("one two three four five six seven eight nine ten"))),
                 '"one two three four five six seven eight…"; finish stop', id="long-text-first-8-words"),
    pytest.param(ChunksEntry(chunks(*text_call("line one\n\nline   two"))), '"line one line two"; finish stop',
                 id="whitespace-collapsed"),
    pytest.param(ChunksEntry(chunks(*REASONING, *[{**c, "index": c["index"] + 1} if "index" in c else c
                                                  for c in tool_call("bash")])),
                 "reasoning; tools bash; finish tool-calls", id="reasoning-and-tool"),
    pytest.param(ChunksEntry(chunks(
        {"type": "tool-call-delta", "index": 0, "id": "a", "name": "read", "argumentsDelta": "{}"},
        {"type": "tool-call-delta", "index": 1, "id": "b", "name": "write", "argumentsDelta": "{"},
        {"type": "tool-call-delta", "index": 1, "id": "b", "argumentsDelta": "}"},
        {"type": "finish", "reason": {"kind": "tool-calls"}})), "tools read, write; finish tool-calls",
        id="two-tools-from-deltas"),
    pytest.param(ChunksEntry(chunks(
        {"type": "block-start", "index": 0, "blockType": "text"},
        {"type": "block-end", "index": 0, "block": {"type": "text", "text": "only assembled"}}, STOP)),
        '"only assembled"; finish stop', id="block-without-deltas"),
    pytest.param(ChunksEntry(chunks(
        {"type": "finish", "reason": {"kind": "error", "failure": {"message": "overloaded", "code": "SERVER"}}})),
        "finish error SERVER: overloaded", id="error-finish-failure"),
    pytest.param(ChunksEntry(chunks(
        {"type": "finish", "reason": {"kind": "error", "message": "no tokens", "code": "EMPTY_RESPONSE"}})),
        "finish error EMPTY_RESPONSE: no tokens", id="error-finish-flat"),
    pytest.param(ChunksEntry(chunks(*text_call("cut short")[:-1])), '"cut short"; no finish', id="no-finish"),
    pytest.param(ChunksEntry([]), "no finish", id="empty"),
    pytest.param(ThrowEntry("simulated provider error (HTTP 401)", "AUTH", 401),
                 "throw AUTH 401: simulated provider error (HTTP 401)", id="throw"),
    pytest.param(ThrowEntry("boom"), "throw SERVER: boom", id="throw-default-code-no-status"),
    pytest.param(ThrowEntry("gone", "STREAM_CLOSED", chunks=chunks({"type": "text-delta", "index": 0, "text": "par"})),
                 'throw STREAM_CLOSED: gone (after 1 chunk: "par"; no finish)', id="throw-after-chunks"),
    pytest.param(HangEntry(), "hang", id="hang"),
    pytest.param(HangEntry(".ready"), "hang (readyFile .ready)", id="hang-ready-file"),
]


@pytest.mark.parametrize(("entry", "gist"), GISTS)
def test_describe_entry(entry: Entry, gist: str) -> None:
    assert describe_entry(entry) == gist


def test_a_long_throw_message_is_shortened_to_one_line() -> None:
    gist = describe_entry(ThrowEntry("word\n" * 40, "AUTH"))
    assert "\n" not in gist
    assert gist.endswith("…")
    assert len(gist) < 100
