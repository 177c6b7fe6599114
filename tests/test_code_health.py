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


def import_cycles(package: str) -> list[list[str]]:
    """The groups of the package's modules that import each other round in a circle (Tarjan's
    strongly connected components over direct imports, `if TYPE_CHECKING:` ones included)."""
    import grimp  # import-linter's graph builder

    graph = grimp.build_graph(package)
    imports = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        for other in imports.get(module, []):
            if other not in imports:
                continue
            if other not in order:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], order[other])
        if low[module] == order[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in sorted(imports):
        if module not in order:
            visit(module)
    return cycles


def test_no_module_imports_itself_round_a_circle() -> None:
    """A circle (run -> report -> run) means neither module can be read, tested or moved alone."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 5000))
    assert import_cycles("mockllm") == []
