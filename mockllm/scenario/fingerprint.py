"""What a recordings folder holds, as the file system describes it: a suite loaded earlier is still
what loading it now would give while its fingerprint is unchanged.

A server process started ahead of its orders (`mockllm.process`) loads the folder it will likely
serve while pytest is still starting; when the orders come it serves that load only if the
folder's fingerprint is the one taken before the load began. Anything written, renamed into place,
removed or added since then (a conftest that writes a recording, a recorder finishing) changes a
name, a size, a time or an inode, and the folder is loaded again. What it cannot see: a file
rewritten in place to the same size within one tick of the file system's clock (a few
milliseconds) of the first fingerprint.
"""

from __future__ import annotations

import os
from pathlib import Path

# Deep enough for every file a load reads: a suite, a group, a scenario, its files (`load_suite`).
DEPTH = 4

Entry = tuple[str, bool, int, int, int, int]  # path under the folder, folder?, size, mtime, ctime, inode
Fingerprint = tuple[Entry, ...]


def fingerprint(folder: Path) -> Fingerprint:
    """Every entry under `folder` (to `DEPTH` levels; links followed, as loading follows them), with
    its size, times and inode, in name order; () when it cannot be read."""
    entries: list[Entry] = []
    _walk(str(folder), "", DEPTH, entries)
    return tuple(entries)


def _walk(path: str, under: str, depth: int, entries: list[Entry]) -> None:
    try:
        with os.scandir(path) as found:
            listed = sorted(found, key=lambda entry: entry.name)
    except OSError:
        return
    for entry in listed:
        try:
            stat = entry.stat()
            folder = entry.is_dir()
        except OSError:  # gone since it was listed, or a dangling link: named, with nothing to compare
            entries.append((under + entry.name, False, -1, -1, -1, -1))
            continue
        entries.append((under + entry.name, folder, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino))
        if folder and depth > 1:
            _walk(entry.path, under + entry.name + "/", depth - 1, entries)
