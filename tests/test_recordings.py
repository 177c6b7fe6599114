"""The project's own recordings: generated, up to date, and loading as their description says.

Expected numbers come from the compact description in scripts/make_recordings.py (and from the
raw files, read here without mockllm), never from mockllm itself. The fork tests are the design's
regression test for the seed cut: they fail if the cut is dropped or counts physical lines.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from mockllm.dsh.chunks import BlockEnd, FinishChunk, StreamChunk, TextDelta
from mockllm.dsh.reader import read_log
from mockllm.scenario.load import Scenario, load_scenario, load_suite
from mockllm.script.derive import derive_calls, recorded_calls
from mockllm.script.entries import ChunksEntry, Entry, HangEntry, ThrowEntry

ROOT = Path(__file__).resolve().parents[1]
RECORDINGS = ROOT / "recordings"
GENERATOR = ROOT / "scripts" / "make_recordings.py"


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_recordings", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


gen = _load_generator()
DESCRIBED = {s.name: s for s in gen.SCENARIOS}


# --- reading the description --------------------------------------------------------------------


def described_calls(turns: tuple[Any, ...]) -> list[Any]:
    """Every model call the description records, in log order (a retry's attempts each count)."""
    return [c for t in turns for attempts in t.steps for c in attempts if c.blocks or c.finish is not None]


def described_sessions(sc: Any) -> list[tuple[str, str, tuple[Any, ...]]]:
    """(file, kind, own turns) per session, primary first then children in creation order."""
    return [("session.jsonl", "primary", sc.turns), *((c.file, c.kind, c.turns) for c in gen.children(sc.turns))]


def expected_entry_count(calls: int, sidecar: Any) -> int:
    if sidecar is None:
        return calls
    if isinstance(sidecar, list):
        return len(sidecar)
    count = calls
    for at in sorted(p["at"] for p in sidecar["patches"]):
        count += at == count  # a patch at the derived length appends; any other swaps
    return count


def answer(call: Any) -> str:
    return "".join(b.whole for b in call.blocks if b.type == "text")


def fork_children() -> list[tuple[str, Any]]:
    return [(sc.name, c) for sc in gen.SCENARIOS for c in gen.children(sc.turns) if c.kind == "fork"]


# --- reading the raw files (without mockllm) ---------------------------------------------------


def rows(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines[0], lines[1:]


def logical_size(row: dict[str, Any]) -> int:
    """How many logical events one physical row stands for."""
    data = row.get("data", {})
    if row["type"] in ("text-chunks", "reasoning-chunks"):
        return len(data["texts"])
    if row["type"] == "tool-call-chunks":
        return len(data["args"])
    return 1


def end_seed_position(path: Path) -> tuple[int, int]:
    """(physical body line index, logical event index) of the `session/end-seed` row."""
    _, body = rows(path)
    logical = 0
    for physical, row in enumerate(body):
        if row["type"] == "session/end-seed":
            return physical, logical
        logical += logical_size(row)
    raise AssertionError(f"{path}: no session/end-seed row")


def entry_text(entry: Entry) -> str:
    """The text an entry streams: its text deltas, or the assembled text of a text block with none."""
    chunks: list[StreamChunk] = entry.chunks if isinstance(entry, ChunksEntry | ThrowEntry) else []
    streamed = {c.index for c in chunks if isinstance(c, TextDelta)}
    out = []
    for c in chunks:
        if isinstance(c, TextDelta):
            out.append(c.text)
        elif isinstance(c, BlockEnd) and c.block.type == "text" and c.index not in streamed:
            out.append(c.block.text or "")
    return "".join(out)


@pytest.fixture(scope="module")
def suite_scenarios() -> dict[str, Scenario]:
    suite = load_suite(RECORDINGS, keep_logs=True)
    assert not suite.broken, {name: str(err) for name, err in suite.broken.items()}
    assert not suite.skipped
    return suite.scenarios


# --- (a) generated and up to date ----------------------------------------------------------------


def test_generator_is_deterministic() -> None:
    assert gen.build_all() == gen.build_all()


def test_recordings_are_up_to_date(tmp_path: Path) -> None:
    out = tmp_path / "recordings"
    subprocess.run([sys.executable, str(GENERATOR), str(out)], check=True, capture_output=True)
    fresh = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    committed = {p.relative_to(RECORDINGS).as_posix(): p.read_bytes() for p in sorted(RECORDINGS.rglob("*"))
                 if p.is_file()}
    assert sorted(fresh) == sorted(committed), "run `python3 scripts/make_recordings.py` and commit recordings/"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stale: {stale}; run `python3 scripts/make_recordings.py`"


def test_generator_rewrites_nothing_when_current(tmp_path: Path) -> None:
    assert gen.write(tmp_path)
    assert gen.write(tmp_path) == []


# --- (b) every recording loads as described ----------------------------------------------------


def test_suite_holds_exactly_the_described_scenarios(suite_scenarios: dict[str, Scenario]) -> None:
    assert sorted(suite_scenarios) == sorted(DESCRIBED)


@pytest.mark.parametrize("name", sorted(DESCRIBED))
def test_sessions_match_the_description(name: str, suite_scenarios: dict[str, Scenario]) -> None:
    sc = DESCRIBED[name]
    scenario = suite_scenarios[name]
    expected = described_sessions(sc)
    # Script order: primary, then children by createdAt (creation order), whatever their file numbers.
    assert [s.file for s in scenario.sessions] == [file for file, _, _ in expected]
    for session, (file, kind, turns) in zip(scenario.sessions, expected, strict=True):
        header, _ = rows(RECORDINGS / name / file)
        calls = len(described_calls(turns))
        entries = expected_entry_count(calls, sc.sidecar) if kind == "primary" else calls
        cut = end_seed_position(RECORDINGS / name / file)[1] if kind == "fork" else 0
        assert (session.kind, session.cut, len(session.entries)) == (kind, cut, entries), file
        assert header.get("seedLength", 0) == cut
        assert ("seedLength" in header) == (kind == "fork")  # unseeded headers carry no seedLength at all
        assert ("parentSession" in header) == (kind != "primary")


def test_primaries_open_with_distinct_user_messages() -> None:
    firsts = [sc.turns[0].user for sc in gen.SCENARIOS]
    assert len(set(firsts)) == len(firsts)


@pytest.mark.parametrize("name", sorted(DESCRIBED))
def test_logs_are_contiguous_and_times_plausible(name: str) -> None:
    scenario = load_scenario(RECORDINGS / name, keep_logs=True)
    for session in scenario.sessions:
        assert session.log is not None
        events = session.log.events
        assert [e.seq for e in events] == list(range(len(events))), session.file
        if session.log.layout == "full":
            times = [e.time for e in events if e.time is not None]
            assert len(times) == len(events) and times == sorted(times), session.file
            own = events[session.cut:]
            assert own[0].time is not None and own[0].time > session.created_at, session.file


def test_mixed_tree_children_are_ordered_by_creation_not_file_number(suite_scenarios: dict[str, Scenario]) -> None:
    sessions = suite_scenarios["mixed-tree"].sessions
    assert [(s.file, s.kind) for s in sessions] == [
        ("session.jsonl", "primary"), ("session.2.jsonl", "fork"), ("session.1.jsonl", "spawn")]
    assert sessions[1].created_at < sessions[2].created_at
    # Each child lives between the parent's tool/call that starts it and the tool/result it returns.
    _, parent = rows(RECORDINGS / "mixed-tree" / "session.jsonl")
    for child in sessions[1:]:
        _, body = rows(RECORDINGS / "mixed-tree" / child.file)
        started = next(r for r in parent if r["type"] == "tool/call" and r["time"] == child.created_at - 1)
        result = next(r for r in parent if r["type"] == "tool/result"
                      and r["data"]["callId"] == started["data"]["callId"])
        assert result["time"] > body[-1]["time"]


# --- (c) the fork regression test ----------------------------------------------------------------


@pytest.mark.parametrize(("name", "child"), fork_children(), ids=lambda v: v if isinstance(v, str) else v.file)
def test_fork_child_is_served_only_its_own_answer(name: str, child: Any) -> None:
    scenario = load_scenario(RECORDINGS / name, keep_logs=True)
    session = next(s for s in scenario.sessions if s.file == child.file)
    own = [answer(c) for c in described_calls(child.turns)]
    assert [entry_text(e) for e in session.entries] == own
    parent_answers = [answer(c) for c in described_calls(DESCRIBED[name].turns)]
    assert not set(own) & set(parent_answers), "the fixture needs a child answer unlike every parent answer"


@pytest.mark.parametrize(("name", "child"), fork_children(), ids=lambda v: v if isinstance(v, str) else v.file)
def test_without_the_cut_the_fork_child_would_replay_its_parent(name: str, child: Any) -> None:
    """The fixture bites: the seed holds parent chunks, so deriving from the whole log serves them."""
    log = read_log(RECORDINGS / name / child.file)
    assert log.header.cut > 0
    uncut = recorded_calls(log.events, log)  # no slice: what a reader that ignores seedLength derives
    cut = derive_calls(log)
    seeded_parent_turns = DESCRIBED[name].turns[: child_turn_number(name, child) - 1]
    parent_seed_answers = [answer(c) for c in described_calls(seeded_parent_turns)]
    assert parent_seed_answers and parent_seed_answers[0] == "OK"
    assert len(uncut) == len(parent_seed_answers) + len(cut)
    assert [entry_text(ChunksEntry(c.chunks)) for c in uncut[: len(parent_seed_answers)]] == parent_seed_answers
    assert entry_text(ChunksEntry(uncut[0].chunks)) != entry_text(ChunksEntry(cut[0].chunks))


def child_turn_number(name: str, child: Any) -> int:
    """The parent's turn in which the fork child is started (its seed is every turn before)."""
    for number, t in enumerate(DESCRIBED[name].turns, start=1):
        if any(c is child for c in gen.children((t,))):
            return number
    raise AssertionError(f"{child.file} is not started by the primary of {name}")


# --- (d) the packed fork: the cut counts logical events -------------------------------------------


def test_packed_fork_seed_length_counts_logical_events_not_lines() -> None:
    path = RECORDINGS / "packed-fork" / "session.1.jsonl"
    header, body = rows(path)
    physical, logical = end_seed_position(path)
    assert any(r["type"] in ("text-chunks", "reasoning-chunks", "tool-call-chunks") for r in body[:physical])
    assert header["seedLength"] == logical != physical
    log = read_log(path)
    assert log.header.cut == logical
    assert log.events[log.header.cut].type == "session/end-seed"
    assert log.lines < len(log.events)
    # Slicing physical lines would land inside the child's own events, not on the seed boundary.
    assert body[header["seedLength"]]["type"] != "session/end-seed"


# --- (e) the projected file ------------------------------------------------------------------------


def test_projected_file_has_no_seq_or_time_yet_loads_with_contiguous_seq() -> None:
    path = RECORDINGS / "projected-turn" / "session.jsonl"
    _, body = rows(path)
    assert all(not {"seq", "time", "seq0", "time0"} & set(r) for r in body)
    assert any(r["type"].endswith("-chunks") for r in body)
    log = read_log(path)
    assert log.layout == "projected"
    assert [e.seq for e in log.events] == list(range(len(log.events)))
    assert len(log.events) == sum(logical_size(r) for r in body)
    assert all(e.time is None for e in log.events)


# --- the other features each scenario exists for ------------------------------------------------


def test_throw_and_hang_sidecars(suite_scenarios: dict[str, Scenario]) -> None:
    throw = suite_scenarios["throw-sidecar"].primary.entries[-1]
    assert isinstance(throw, ThrowEntry)
    assert (throw.code, throw.status, throw.chunks) == ("RATE_LIMIT", 429, [])
    hang = suite_scenarios["hang-sidecar"].primary
    assert isinstance(hang.entries[1], HangEntry)
    assert hang.log is not None
    assert not derive_calls(hang.log)[1].finished  # the swapped call was cut off: it needs the override


def test_retry_is_two_calls_in_one_step(suite_scenarios: dict[str, Scenario]) -> None:
    primary = suite_scenarios["retry-step"].primary
    assert primary.log is not None
    calls = derive_calls(primary.log)
    assert [(c.turn, c.step) for c in calls] == [(1, 1), (1, 1)]
    first, second = (c.chunks[-1] for c in calls)
    assert isinstance(first, FinishChunk) and isinstance(second, FinishChunk)
    assert (first.reason.kind, first.reason.error_code) == ("error", "SERVER")
    assert second.reason.kind == "stop"


def test_empty_block_has_only_start_and_end(suite_scenarios: dict[str, Scenario]) -> None:
    (entry,) = suite_scenarios["empty-block"].primary.entries
    assert isinstance(entry, ChunksEntry)
    text_index = next(c.index for c in entry.chunks if isinstance(c, BlockEnd) and c.block.type == "text")
    kinds = [type(c).__name__ for c in entry.chunks if getattr(c, "index", None) == text_index]
    assert kinds == ["BlockStart", "BlockEnd"]
    assert entry_text(entry) == "Hello from a block with no deltas."


def test_the_bundled_recordings_of_a_source_checkout_are_its_top_level_folder() -> None:
    from mockllm.server.running import bundled_recordings

    found = bundled_recordings()
    assert found.is_dir() and (found / "tool-loop").is_dir(), found
