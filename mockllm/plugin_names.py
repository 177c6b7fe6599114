"""How the pytest plugin names what it writes: a test's scenario (its recording's folder) and a
failing test's report file, each a name a file system can hold, the same in every xdist worker."""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path

import pytest

NAME_KEPT = 180  # bytes of a name part (a recording's folder, a report's file): file systems allow 255
# Characters a folder name cannot hold (DESIGN.md §6), replaced by `_` in a scenario named after its test.
UNSAFE = re.compile(r"[/\\:\x00-\x1f\x7f]")
# The stems two test files share (`scenario_for`), found once per session.
SHARED_STEMS = pytest.StashKey[frozenset[str]]()


def scenario_for(item: pytest.Item) -> str:
    """The scenario named after a test: `{file stem}/{test}`, `{test}` as in its node id
    (`TestClass.test_x[param]`), with what a folder name cannot hold replaced by `_`, and a part
    longer than a folder name may be cut (`kept`).

    Two test files may share a stem (`a/test_agent.py`, `b/test_agent.py`): one name for both would
    make one test replay (and `rewrite` overwrite) the other's recording. A file whose stem another
    test file under the test paths shares is named by its path from the rootdir instead, dotted as a
    module is (`a.test_agent/test_x`). The rule reads the files on disk, not the tests collected, so
    a test keeps its name whichever tests are selected, and in every pytest-xdist worker.
    """
    test = item.nodeid.partition("::")[2].replace("::", ".")
    group = item.path.stem
    config = getattr(item, "config", None)
    if config is not None and group in _shared_stems(config):
        try:
            group = ".".join(item.path.with_suffix("").relative_to(config.rootpath).parts)
        except ValueError:  # a test file outside the rootdir: its absolute path
            group = ".".join(item.path.with_suffix("").parts[1:])
    return f"{kept(UNSAFE.sub('_', group))}/{kept(UNSAFE.sub('_', test))}"


def kept(part: str, whole: str | None = None) -> str:
    """A name a folder or file can hold: one over NAME_KEPT bytes (a long parametrized id) is cut,
    with a digest of `whole` (the part itself by default) to keep it unique (a server refuses longer
    names: `scenario.load.name_problem`; file systems allow 255 bytes)."""
    if len(part.encode()) <= NAME_KEPT:
        return part
    import hashlib  # here: its OpenSSL binding is 2-3 ms of every pytest start that imports the plugin

    cut = part.encode()[:NAME_KEPT].decode("utf-8", "ignore")
    return cut + "-" + hashlib.blake2b((part if whole is None else whole).encode(), digest_size=6).hexdigest()


# Folders no test of the project lives in: skipped when looking for test files that share a stem.
NOT_TESTS = frozenset({"node_modules", "__pycache__", "site-packages", "venv", "build", "dist"})


def _shared_stems(config: pytest.Config) -> frozenset[str]:
    """The stems two or more test files share under the test paths (`testpaths`, else the rootdir);
    found once per session."""
    found = config.stash.get(SHARED_STEMS, None)
    if found is None:
        roots = [config.rootpath / p for p in config.getini("testpaths")] or [config.rootpath]
        found = shared_stems(roots, tuple(config.getini("python_files")))
        config.stash[SHARED_STEMS] = found
    return found


def shared_stems(roots: list[Path], patterns: tuple[str, ...]) -> frozenset[str]:
    """The stems of test files (names matching `patterns`) that occur in more than one folder under
    `roots` (hidden folders, virtual environments and build output left out)."""
    seen: dict[str, set[str]] = {}
    for root in roots:
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d not in NOT_TESTS]
            for name in files:
                if name.endswith(".py") and any(fnmatch.fnmatch(name, p) for p in patterns):
                    seen.setdefault(name[:-3], set()).add(folder)
    return frozenset(stem for stem, folders in seen.items() if len(folders) > 1)


def report_name(nodeid: str) -> str:
    """A file name for a test's report: its node id with `/`, `\\`, `:` and control characters as `_`
    (a long one cut, with a digest of the whole id to keep it unique)."""
    return kept(UNSAFE.sub("_", nodeid), nodeid) + ".html"
