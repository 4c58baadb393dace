"""The CI acceptance run: the expert policy on add_rmsnorm, on the CPU, two rounds, no questions asked.

python -m graph.run tasks/add_rmsnorm --device cpu --rounds 2 --run-dir DIR --non-interactive
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parent.parent
STATUSES = {"target_met", "budget_exhausted", "stopped_by_human", "converged", "awaiting_human"}


@pytest.mark.slow
def test_the_cpu_acceptance_run_finishes_with_a_valid_report(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "graph.run", "tasks/add_rmsnorm", "--device", "cpu", "--rounds", "2",
           "--run-dir", str(run_dir), "--non-interactive"]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "round 2 done" in done.stdout

    report = json.loads((run_dir / "report.json").read_text())
    assert report["task"] == str((REPO / "tasks" / "add_rmsnorm").resolve())
    assert report["status"] in STATUSES and report["status"] == "budget_exhausted"
    assert report["rounds"] == 2
    for which in ("baseline", "best"):
        entry = report[which]
        assert entry["geomean_us"] > 0 and entry["config"]
        assert (run_dir / entry["candidate"]).is_file() and (run_dir / entry["result"]).is_file()
    assert report["speedup"] == pytest.approx(
        report["baseline"]["geomean_us"] / report["best"]["geomean_us"], rel=1e-3
    )
    assert report["device"]["interpreted"] is True and "never a speed claim" in report["note"]

    attempts = report["attempts"]
    assert attempts[0]["origin"] == "baseline" and len(attempts) == 1 + 2 * 8
    modules = {a["module"] for a in attempts}
    assert modules <= {"baseline.py", "multirow.py", "persistent.py"}
    for a in attempts:
        assert a["verdict"] in ("pass", "fail") and "error_type" in a and a["rationale"]
        assert set(a["critique"]) == {"objections", "answers"}
    # Memory is on (real chromadb + the packaged model): every evaluated candidate became a case.
    assert report["memory"]["enabled"] is True, report["memory"]
    assert report["memory"]["cases_added"] == len(attempts)
    assert isinstance(report["retrieved_cases"], list)
    # The take-home kernel is exported and the sandbox is described.
    assert report["export"]["path"] and (run_dir / "kernel.py").is_file()
    assert report["sandbox"]["files"]
    assert report["accounting"] == {}  # the expert policy spends no tokens
    assert [row["shape"] for row in report["per_shape"]] == [{"M": 4, "N": 256}, {"M": 6, "N": 768}]

    assert (run_dir / "progress.png").stat().st_size > 10_000
    assert len(list((run_dir / "results").glob("*.json"))) == len(attempts)
    trail = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    assert {e["node"] for e in trail} >= {"setup", "diagnose", "propose", "critic", "evaluate", "report"}
    markdown = (run_dir / "report.md").read_text()
    for section in ("## What won", "## Per shape", "## What was tried", "## Audit trail"):
        assert section in markdown
