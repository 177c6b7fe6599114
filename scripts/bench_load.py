#!/usr/bin/env python3
"""One load measurement in a fresh interpreter (started by scripts/bench.py, one process per run).

    python3 scripts/bench_load.py MODE SUITE_DIR      (prints one JSON result on stdout)

MODE:
  load         `mockllm.scenario.load.load_suite(SUITE_DIR)`: read, decode, expand, cut and derive every
               script. The suite stays alive until the peak is read (it is what a server keeps).
  decode       the floor: for every session*.jsonl, read the file and decode every line with
               `msgspec.json.Decoder().decode_lines` into plain Python objects, then drop them.
  decode-each  the same with `msgspec.json.decode` called once per line (informational).

Time is wall-clock (perf_counter) around that work only. Memory is the peak resident set the work
adds: the resident set just before it (after the imports, so the interpreter, mockllm, msgspec and
the allocator's start-up pages are not counted), then the high-water mark reset (`5` written to
/proc/self/clear_refs), then the high-water mark after the work, minus the first. (A difference of
two `ru_maxrss` readings would read 0 for any work whose peak stays under a transient peak of the
imports: it did for the 100k-event suite.)
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

from bench_client import proc_rss_kb  # a sibling script: /proc/PID/status

LOG_FILE = re.compile(r"session(\.\d+)?\.jsonl")


def rss_before_kb() -> int:
    """The resident set now, with the high-water mark reset to it (Linux: /proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return proc_rss_kb(os.getpid())[0]


def peak_kb() -> int:
    """The high-water mark of the resident set since rss_before_kb()."""
    return proc_rss_kb(os.getpid())[1]


def log_files(suite: Path) -> list[Path]:
    return sorted(p for d in suite.iterdir() if d.is_dir() for p in d.iterdir() if LOG_FILE.fullmatch(p.name))


def main(argv: list[str]) -> int:
    mode, suite = argv[0], Path(argv[1])
    extra: dict[str, object] = {}
    if mode == "load":
        from mockllm.scenario.load import load_suite

        before = rss_before_kb()
        t0 = time.perf_counter()
        loaded = load_suite(suite)
        seconds = time.perf_counter() - t0
        peak = peak_kb()
        extra = {"scenarios": len(loaded.scenarios), "broken": {k: str(v)[:500] for k, v in loaded.broken.items()},
                 "sessions": {name: {s.file: [s.kind, s.cut, len(s.entries), s.events] for s in sc.sessions}
                              for name, sc in loaded.scenarios.items()}}
    elif mode in ("decode", "decode-each"):
        import msgspec

        decoder = msgspec.json.Decoder()
        decode = msgspec.json.decode
        before = rss_before_kb()
        t0 = time.perf_counter()
        files = log_files(suite)  # load_suite lists the folders too: both times include it
        rows = 0
        for path in files:
            buf = path.read_bytes()
            decoded = decoder.decode_lines(buf) if mode == "decode" else [decode(line) for line in buf.splitlines()]
            rows += len(decoded)
            del decoded, buf
        seconds = time.perf_counter() - t0
        peak = peak_kb()
        extra = {"rows": rows, "files": len(files)}
    else:
        print(f"unknown mode {mode!r}", file=sys.stderr)
        return 2
    print(json.dumps({"mode": mode, "seconds": seconds, "rss_before_kb": before, "rss_peak_kb": peak,
                      "rss_delta_kb": peak - before, **extra}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
