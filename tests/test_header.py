"""The session header: logical model (seeded or not, inherited count) <-> the physical v0 line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mockllm.dsh.header import InheritedEventCount, SessionHeader, encode_header, parse_header
from mockllm.dsh.reader import read_log
from mockllm.errors import HeaderError, RecordingError
from tests.logbuilder import corpus_params


@pytest.mark.parametrize("log", corpus_params("*/*/session*.jsonl"))
def test_corpus_header_reencodes_byte_identically(log: Path) -> None:
    line = log.read_bytes().splitlines()[0]
    assert encode_header(parse_header(line)) == line


def test_unseeded_header_written_has_no_seed_length() -> None:
    encoded = encode_header(SessionHeader(id="a", created_at=5, parent_session="p"))
    assert "seedLength" not in json.loads(encoded)
    assert encoded == b'{"type":"session","version":0,"id":"a","createdAt":5,"parentSession":"p"}'


@pytest.mark.parametrize("count", [0, 42], ids=["seed-0", "seed-42"])
def test_seeded_header_writes_seed_length(count: int) -> None:
    header = SessionHeader(id="c", parent_session="p", is_seeded=True, inherited=InheritedEventCount(count))
    assert json.loads(encode_header(header))["seedLength"] == count


ROUND_TRIPS = [
    pytest.param('{"type":"session","version":0,"id":"p","createdAt":1}', False, 0, "primary", id="primary"),
    pytest.param('{"type":"session","version":0,"id":"s","createdAt":2,"parentSession":"p","origin":"subagent"}',
                 False, 0, "spawn", id="spawn"),
    pytest.param('{"type":"session","version":0,"id":"f","createdAt":3,"parentSession":"p","seedLength":38,'
                 '"isSeeded":true,"delegationDepth":1}', True, 38, "fork", id="fork"),
    pytest.param('{"type":"session","version":0,"id":"z","createdAt":4,"parentSession":"p","seedLength":0}',
                 True, 0, "fork", id="fork-seed-0"),
]


@pytest.mark.parametrize(("line", "seeded", "cut", "kind"), ROUND_TRIPS)
def test_read_write_read_keeps_seededness_and_cut(line: str, seeded: bool, cut: int, kind: str) -> None:
    first = parse_header(line.encode())
    again = parse_header(encode_header(first))
    assert (first.is_seeded, first.cut, first.kind) == (seeded, cut, kind)
    assert (again.is_seeded, again.cut, again.kind) == (seeded, cut, kind)
    assert encode_header(again) == line.encode()


@pytest.mark.parametrize("value", [-1, True, False, 1.5, "3", None], ids=repr)
def test_inherited_event_count_rejects_non_counts(value: Any) -> None:
    with pytest.raises(ValueError, match="whole number"):
        InheritedEventCount(value)


def test_unseeded_header_with_inherited_events_is_rejected() -> None:
    with pytest.raises(ValueError, match="unseeded"):
        SessionHeader(id="a", is_seeded=False, inherited=InheritedEventCount(3))


@pytest.mark.parametrize(("field", "value"), [("seedLength", -1), ("seedLength", True), ("seedLength", "2")],
                         ids=["negative", "bool", "string"])
def test_bad_seed_length_is_rejected(field: str, value: Any) -> None:
    line = json.dumps({"type": "session", "version": 0, "id": "a", field: value}).encode()
    with pytest.raises(HeaderError, match="seedLength"):
        parse_header(line)


@pytest.mark.parametrize("version", [1, "0", None], ids=["v1", "string-0", "missing"])
def test_other_versions_are_rejected_naming_the_file(tmp_path: Path, version: Any) -> None:
    head: dict[str, Any] = {"type": "session", "id": "a", "createdAt": 0}
    if version is not None:
        head["version"] = version
    log = tmp_path / "session.jsonl"
    log.write_text(json.dumps(head) + "\n")
    with pytest.raises(RecordingError) as caught:
        read_log(log)
    assert str(caught.value).startswith(f"{log}:1: unsupported session log version")
    assert caught.value.path == log
    assert caught.value.line == 1
