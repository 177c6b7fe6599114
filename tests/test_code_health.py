"""The house rules hold, checked by tools rather than by hope: the pipeline's layers
(`lint-imports`, contracts in pyproject.toml), ruff, and mypy strict on the whole package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tool(name: str) -> str:
    """The tool installed beside this Python (pip install -e '.[test]' puts it there)."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert found is not None, f"{name} is missing: pip install -e '.[test]' installs it"
    return found


def check(*command: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_import_contracts_are_kept() -> None:
    out = check(tool("lint-imports"), "--no-cache")
    assert "0 broken" in out, out


@pytest.mark.parametrize("command", [["ruff", "check", "mockllm", "tests", "scripts"], ["mypy"]],
                         ids=["ruff", "mypy-strict"])
def test_linters_pass(command: list[str]) -> None:
    check(tool(command[0]), *command[1:])
