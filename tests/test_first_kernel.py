"""A PyTorch module in KernelBench's format as a run's task: imported into the run folder, no baseline
kernel, so the run starts from torch.compile's own Triton for the reference (code generated on the CPU,
run in the interpreter) and searches Inductor's block sizes and warps from there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parent
PROBLEM = ROOT / "bench" / "kernelbench" / "problems" / "17_ResidualAddRMSNorm.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "graph.run", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=900)  # fmt: skip


@pytest.mark.timeout(900)
def test_a_problem_file_runs_from_torch_compiles_kernel(tmp_path):
    run = tmp_path / "run"
    done = _run(str(PROBLEM), "--device", "cpu", "--rounds", "1", "--no-memory", "--non-interactive",
                "--run-dir", str(run))  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "making torch.compile's Triton a candidate" in done.stdout
    report = json.loads((run / "report.json").read_text())
    assert report["baseline"]["module"] == "inductor.py"
    assert report["baseline"]["config"] == {k: 1 for k in report["baseline"]["config"]}  # torch.compile's own
    spec = json.loads((run / "task" / "task.json").read_text())  # the run's own copy, with the first kernel
    assert spec["baseline"] == "inductor.py" and spec["settings"]["first_kernel"]["from"].startswith("torch.compile")
    assert report["task"] == "task"  # relative to the run folder, which may move
    tried = [a for a in report["attempts"] if a["round"] == 1]
    assert tried and any(a["verdict"] == "pass" for a in tried)


def test_a_file_that_is_not_a_problem_is_refused(tmp_path):
    bad = tmp_path / "not_a_problem.py"
    bad.write_text("import torch\n\nx = 1\n")
    done = _run(str(bad), "--device", "cpu", "--run-dir", str(tmp_path / "run"))
    assert done.returncode == 2
    assert "not_a_problem.py" in done.stdout and "Model" in done.stdout


def test_a_matmul_problem_on_a_cpu_is_refused_with_where_to_run_it(tmp_path):
    matmul = ROOT / "bench" / "kernelbench" / "problems" / "15_LinearGELU.py"
    done = _run(str(matmul), "--device", "cpu", "--run-dir", str(tmp_path / "run"))
    assert done.returncode == 2
    assert "a library kernel" in done.stdout and "run such a task on a GPU" in done.stdout
