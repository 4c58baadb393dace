"""On a GPU: the recorded add_rmsnorm transcript (a model-written multi-row variant) runs for real
through the CLI, and its measured speedup over the baseline is written next to the transcript.

    .venv/bin/python -m pytest tests/test_llm_gpu.py -m gpu -q
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parent.parent
TRANSCRIPTS = REPO / "tests" / "fixtures" / "transcripts"
MEASURED = Path(os.environ.get("KERNEL_AGENT_MEASURED", TRANSCRIPTS / "add_rmsnorm_rows.measured.json"))


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_model_written_multirow_variant_is_measured_on_the_gpu(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "graph.run", "tasks/add_rmsnorm", "--device", "cuda",
           "--model", f"scripted:{TRANSCRIPTS / 'add_rmsnorm_rows.json'}", "--rounds", "1",
           "--set", "budget.candidates_per_round=2", "--run-dir", str(run_dir), "--non-interactive"]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1700)
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["device"]["interpreted"] is False
    written = [a for a in report["attempts"] if a["origin"].startswith("llm:")]
    assert len(written) == 2 and all(a["verdict"] == "pass" for a in written), written

    base_us = report["baseline"]["geomean_us"]
    measured = {
        "task": "add_rmsnorm",
        "transcript": "tests/fixtures/transcripts/add_rmsnorm_rows.json",
        "device": report["device"],
        "baseline": {"config": report["baseline"]["config"], "geomean_us": base_us},
        "candidates": [
            {
                "module": a["module"],
                "config": a["config"],
                "geomean_us": a["geomean_us"],
                "speedup": round(base_us / a["geomean_us"], 4),
            }
            for a in written
        ],  # fmt: skip
    }
    best = max(measured["candidates"], key=lambda c: c["speedup"])
    measured["best_speedup"] = best["speedup"]
    MEASURED.write_text(json.dumps(measured, indent=2) + "\n")
    print(json.dumps(measured, indent=2))
    # The speedup is a measurement, not a promise: on the H200 (2026-11-29) the model's multi-row
    # variant measured 0.96x of the one-row baseline in geomean. What must hold is that it was timed.
    assert all(c["geomean_us"] and c["geomean_us"] > 0 for c in measured["candidates"]), measured
