"""Which mockllm server processes a process has started: its children running `mockllm.process_child`
(a spare among them). Read from /proc: Linux, as the tests that ask are. And which threads it
starts meanwhile: a process server starts none in its parent."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest


def server_children() -> set[int]:
    """This process's children that are mockllm server processes."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and b"mockllm.process_child" in cmdline:
            found.add(int(entry.name))
    return found


def threads_started(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads this process starts from now on, until `monkeypatch` undoes it."""
    started: list[str] = []
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        started.append(thread.name)
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    return started
