"""Conformance with real dsh session trees (the shared corpus; skipped when it is absent).

The expected numbers were counted independently of mockllm, with plain `json`: events = body lines
with each packed row counted as its members; cut = `seedLength`; entries = own chunk events grouped
by (turn, step) and split after each `finish`, then the sidecar (array: its length; patches: swap,
or append at the derived length).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mockllm.cli.validate import check_suite
from mockllm.dsh.reader import read_log
from mockllm.scenario.load import load_scenario, load_suite
from mockllm.script.derive import derive_calls, recorded_calls
from tests.logbuilder import CORPUS, CORPUS_MISSING, corpus_params

# scenario -> sessions in script order: (file, kind, cut, logical events, entries)
EXPECTED: dict[str, list[tuple[str, str, int, int, int]]] = {
    # Newest dsh: the cancelled call's hang names a readyFile; the title fixture's sidecar is its
    # title model's script (served as a side route when asked), so read plainly it is the primary's.
    "v0-newer/acp-agent--cancel": [("session.jsonl", "primary", 0, 14, 1)],
    "v0-newer/acp-agent--session-title-after-turn": [("session.jsonl", "primary", 0, 19, 1)],
    "v0-packed/acp-agent--packed-chunks": [("session.jsonl", "primary", 0, 124, 2)],
    "v0-packed/acp-agent--subagent-fork-in-process": [
        ("session.jsonl", "primary", 0, 200, 3),
        ("session.1.jsonl", "fork", 42, 99, 1),
    ],
    "v0-projected/acp-agent--text-turn": [("session.jsonl", "primary", 0, 40, 1)],
    "v0-projected/acp-agent--tool-call-turn": [("session.jsonl", "primary", 0, 104, 2)],
    # The recorded call stops mid-text (no finish); the sidecar replaces it with a hang.
    "v0-unpacked/acp-agent--cancel": [("session.jsonl", "primary", 0, 7, 1)],
    # No chunks at all; the sidecar scripts the provider's 401.
    "v0-unpacked/acp-agent--error-finish": [("session.jsonl", "primary", 0, 5, 1)],
    "v0-unpacked/acp-agent--handshake": [("session.jsonl", "primary", 0, 0, 0)],
    "v0-unpacked/acp-agent--multi-turn": [("session.jsonl", "primary", 0, 63, 2)],
    "v0-unpacked/acp-agent--reject-extra-dirs": [("session.jsonl", "primary", 0, 0, 0)],
    "v0-unpacked/acp-agent--subagent-fork": [
        ("session.jsonl", "primary", 0, 189, 3),
        ("session.1.jsonl", "fork", 38, 88, 1),
    ],
    "v0-unpacked/acp-agent--subagent-mixed": [
        ("session.jsonl", "primary", 0, 345, 4),
        ("session.1.jsonl", "spawn", 0, 34, 1),
        ("session.2.jsonl", "fork", 44, 96, 1),
    ],
    "v0-unpacked/acp-agent--subagent-multi": [
        ("session.jsonl", "primary", 0, 212, 3),
        ("session.1.jsonl", "spawn", 0, 34, 1),
        ("session.2.jsonl", "spawn", 0, 32, 1),
    ],
    "v0-unpacked/acp-agent--subagent-spawn": [
        ("session.jsonl", "primary", 0, 141, 2),
        ("session.1.jsonl", "spawn", 0, 34, 1),
    ],
    "v0-unpacked/acp-agent--text-turn": [("session.jsonl", "primary", 0, 33, 1)],
    "v0-unpacked/acp-agent--tool-call-turn": [("session.jsonl", "primary", 0, 104, 2)],
    "v0-unpacked/acp-agent--workspace-edit": [("session.jsonl", "primary", 0, 188, 3)],
}

SCENARIOS = corpus_params("*/*/")
FORK_CHILDREN = [p for p in corpus_params("*/*/session.*.jsonl") if p.values[0] is None
                 or read_log(p.values[0]).header.is_seeded]


@pytest.mark.skipif(not CORPUS.is_dir(), reason=CORPUS_MISSING)
def test_the_table_covers_every_corpus_scenario() -> None:
    found = {str(p.relative_to(CORPUS)) for p in CORPUS.glob("*/*/") if (p / "session.jsonl").is_file()}
    assert found == set(EXPECTED)


@pytest.mark.parametrize("folder", SCENARIOS)
def test_scenario_loads_with_the_counted_sessions(folder: Path) -> None:
    scenario = load_scenario(folder)
    got = [(s.file, s.kind, s.cut, s.events, len(s.entries)) for s in scenario.sessions]
    assert got == EXPECTED[str(folder.relative_to(CORPUS))]


@pytest.mark.parametrize("folder", SCENARIOS)
def test_check_finds_nothing_in_the_corpus(folder: Path) -> None:
    suite = load_suite(folder, keep_logs=True)
    assert list(suite.scenarios) == [folder.name]
    assert [str(d) for d in check_suite(suite)] == []


@pytest.mark.parametrize("log_path", FORK_CHILDREN)
def test_a_real_fork_childs_seed_holds_parent_calls_that_the_cut_drops(log_path: Path) -> None:
    log = read_log(log_path)
    inherited = recorded_calls(log.events[: log.header.cut], log)
    assert inherited, "the seed should hold the parent's model calls"
    assert len(recorded_calls(log.events, log)) == len(inherited) + len(derive_calls(log))
