"""A run evaluated on a real Dask cluster on 127.0.0.1: the report names the workers, and a scheduler
that goes away stops the run with its checkpoint kept; the run then resumes on this machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("distributed")

from tools.cluster import LocalCluster  # noqa: E402

HERE = Path(__file__).parent
ROOT = HERE.parent
TASK = HERE / "fixtures" / "tasks" / "axpy"


def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "graph.run", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)  # fmt: skip


def test_a_bad_cluster_spec_is_refused_before_anything_runs(tmp_path):
    done = _run(str(TASK), "--device", "cpu", "--cluster", "local:0", "--run-dir", str(tmp_path / "run"))
    assert done.returncode == 2 and "local:N needs a worker count" in done.stdout
    assert not (tmp_path / "run").exists()


@pytest.mark.timeout(600)
def test_a_run_on_two_workers_reports_them(tmp_path):
    run = tmp_path / "run"
    done = _run(str(TASK), "--device", "cpu", "--rounds", "1", "--cluster", "local:2", "--no-memory",
                "--non-interactive", "--run-dir", str(run))  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((run / "report.json").read_text())
    workers = {w["worker"].split(" ")[0] for w in report["evaluation"]["workers"]}
    assert workers and workers <= {"w0", "w1"}
    assert all(a["worker"] for a in report["attempts"])


@pytest.mark.timeout(600)
def test_a_lost_scheduler_stops_the_run_and_it_resumes_locally(tmp_path):
    cluster = LocalCluster(1, "cpu", tmp_path)
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "graph.run", str(TASK), "--device", "cpu", "--rounds", "2", "--no-memory",
         "--non-interactive", "--cluster", cluster.address, "--run-dir", str(run)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        seen = []
        assert proc.stdout is not None
        for line in proc.stdout:  # the baseline is judged on the cluster; then the scheduler goes away
            seen.append(line)
            if "propose" in line:
                cluster.procs[0].kill()
                break
        rest, _ = proc.communicate(timeout=300)
    finally:
        cluster.close()
    output = "".join(seen) + rest
    assert proc.returncode == 4, output[-3000:]
    assert "went away" in output and "--resume" in output
    assert (run / "checkpoints.sqlite").exists()
    resumed = _run("--resume", str(run), "--non-interactive")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    report = json.loads((run / "report.json").read_text())
    assert report["rounds"] == 2 and any(a["worker"].startswith("local") for a in report["attempts"])
