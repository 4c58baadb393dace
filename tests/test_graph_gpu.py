"""The graph on a GPU: a short expert run with real timings, the roofline and a profile snapshot.

pytest tests/test_graph_gpu.py -m gpu -q       (skipped without CUDA)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parent.parent


@pytest.mark.gpu
@pytest.mark.parametrize("task", ["add_rmsnorm", "softmax", "gqa_decode"])
def test_a_short_gpu_run_reports_real_timings_and_a_profile(tmp_path, task):
    run_dir = tmp_path / task
    cmd = [sys.executable, "-m", "graph.run", f"tasks/{task}", "--device", "cuda", "--rounds", "1",
           "--set", "budget.candidates_per_round=4", "--run-dir", str(run_dir), "--non-interactive"]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["device"]["interpreted"] is False and not report["note"]
    assert all(row["best_roofline_pct"] is not None for row in report["per_shape"])
    trail = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    diagnosis = next(e for e in trail if e["node"] == "diagnose" and e["message"].startswith("#0"))
    assert "confidence" in diagnosis["message"]
    profiled = list((run_dir / "profiles").glob("*.csv"))
    ncu_note = [e for e in trail if e["message"].startswith("ncu not used")]
    assert profiled or ncu_note  # ncu ran, or the run says once why it could not
