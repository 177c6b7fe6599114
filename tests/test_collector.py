"""Issue 28: the cyclic collector is paused while recordings load (`mockllm/scenario/collector.py`)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from mockllm.scenario import collector
from mockllm.scenario.load import load_suite
from tests.logbuilder import RECORDINGS


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_a_load_pauses_the_collector_and_the_last_load_to_end_turns_it_back_on(collector_on, monkeypatch):
    seen: list[bool] = []
    real = collector.gc.disable

    def disable() -> None:
        real()
        seen.append(gc.isenabled())

    monkeypatch.setattr(collector.gc, "disable", disable)
    with collector.paused():
        assert not gc.isenabled()
        with collector.paused():  # another load meanwhile (another thread's, say)
            assert not gc.isenabled()
        assert not gc.isenabled(), "the first load still runs"
    assert gc.isenabled()
    suite = load_suite(RECORDINGS)
    assert suite.scenarios and gc.isenabled() and seen == [False, False]


def test_a_collector_turned_off_before_stays_off(collector_on):
    gc.disable()
    with collector.paused():
        pass
    assert not gc.isenabled()
    with pytest.raises(ValueError), collector.paused():
        raise ValueError("a load that fails")
    assert not gc.isenabled()
    gc.enable()
    with pytest.raises(ValueError), collector.paused():
        raise ValueError("a load that fails")
    assert gc.isenabled(), "turned back on after a load that failed"
