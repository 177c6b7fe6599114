"""scripts/bench_record.py --quick runs end to end and reports its ratios (it must not rot).

It measures nothing at this size: only that every phase ran (direct, a naive forwarder, `mockllm
record`, a live call of a record-mode run) and every number is there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_record.py"


def test_quick_record_benchmark_runs_and_reports_ratios_against_direct(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(out)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "added TTFB p50" in done.stdout and "recorder CPU per call" in done.stdout
    result = json.loads(out.read_text())
    assert result["direct"]["calls"] == result["proxied"]["calls"] == 4
    assert result["ttfb_ratio"] > 0 and result["total_ratio"] > 0
    assert result["recorded_bytes"] > 0, "the proxied calls were recorded"
    assert result["naive"]["calls"] == result["live"]["calls"] == 4
    assert "a live call in a record mode" in done.stdout and result["live"]["ttfb_ratio"] > 0
    assert result["live_recording"]["written"], "the record-mode run's recording was written when it ended"
