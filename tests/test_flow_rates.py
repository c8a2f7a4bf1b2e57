"""benchmarks/flow_rates.py: sampling a stock run's flows moves nothing and counts their bytes sent and delivered."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

from bridge import api

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "flow_rates.py"


def _sample(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "gpt-tiny", "--out", str(tmp_path / "rates"), *args],
                          capture_output=True, text=True, timeout=300)


def test_samples_leave_the_run_as_stock_and_reach_each_flows_size(tmp_path):
    proc = _sample(tmp_path, "--flows", "8,9", "--from", "0ns", "--to", "40us")
    assert proc.returncode == 0, proc.stderr
    stock = api.run(ROOT / "scenarios" / "gpt-tiny.yaml", tmp_path / "stock").flows
    sampled = pd.read_csv(tmp_path / "rates" / "flows.csv")
    pd.testing.assert_frame_equal(sampled, stock.reset_index(drop=True), check_dtype=False)
    rates = pd.read_csv(tmp_path / "rates" / "rates.csv")
    for flow, trace in rates.groupby("flow_id"):
        row = sampled.set_index("flow_id").loc[flow]
        assert row.end_ns < 40_000                          # (it ends inside the window)
        assert trace.delivered_bytes.is_monotonic_increasing and trace.sent_bytes.is_monotonic_increasing
        assert (trace.sent_bytes >= trace.delivered_bytes).all()
        assert trace.delivered_bytes.iloc[-1] == trace.sent_bytes.iloc[-1] == row.size_bytes
        assert trace[trace.time_ns < row.start_ns].delivered_bytes.max() == 0


def test_an_unknown_flow_is_one_line(tmp_path):
    proc = _sample(tmp_path, "--flows", "3", "--from", "0ns", "--to", "40us")
    assert proc.returncode != 0
    assert proc.stderr.strip() == "error: --flows: no flow 3 in gpt-tiny's flows.csv"
