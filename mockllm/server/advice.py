"""Commands that the server's refusals advise, written to work when pasted into a shell: every
argument quoted, the server's own address, and a real provider base where the server knows none
(then named as a stand-in for the user's own)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path

# What an advised command sends live calls to when the server was given no upstream: a real base
# URL (so the command runs as pasted, with the user's key), said to stand for the user's provider.
EXAMPLE_UPSTREAM = "https://api.openai.com/v1"


def _upstreams(upstreams: Sequence[str]) -> Sequence[str]:
    return upstreams or (EXAMPLE_UPSTREAM,)


def serve_command(path: Path, upstreams: Sequence[str], mode: str) -> str:
    """`mockllm serve PATH --upstream … --record-mode MODE`."""
    args = ["mockllm", "serve", str(path)]
    for upstream in _upstreams(upstreams):
        args += ["--upstream", upstream]
    return shlex.join([*args, "--record-mode", mode])


def pytest_command(upstreams: Sequence[str], mode: str = "once") -> str:
    """The plugin's flags for a record mode: `pytest --mockllm-record-mode MODE --mockllm-upstream …`."""
    args = ["pytest", "--mockllm-record-mode", mode]
    for upstream in _upstreams(upstreams):
        args += ["--mockllm-upstream", upstream]
    return shlex.join(args)


def record_run_command(origin: str, scenario: str) -> str:
    """`curl` creating a run of `scenario` that records it (record mode once) on the server at `origin`."""
    body = json.dumps({"scenario": scenario, "record_mode": "once"})
    return shlex.join(["curl", "-X", "POST", f"{origin}/_mockllm/runs", "-H", "content-type: application/json",
                       "-d", body])


def upstream_note(upstreams: Sequence[str]) -> str:
    """What to say when the command names the example provider rather than one the server has."""
    if upstreams:
        return ""
    return f" ({EXAMPLE_UPSTREAM} stands for your provider's base URL; PROVIDER=URL names one per provider)"
