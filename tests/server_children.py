"""Which mockllm server processes a process has started: its children running `mockllm.process`
(a spare among them). Read from /proc: Linux, as the tests that ask are."""

from __future__ import annotations

import os
from pathlib import Path


def server_children() -> set[int]:
    """This process's children that are mockllm server processes."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and b"mockllm.process" in cmdline:
            found.add(int(entry.name))
    return found
