"""Checking a task and evaluating one kernel by hand: ``python -m tools.task TASK [--run]`` and the
input errors of ``python -m tools.evaluate`` (exit 0 ok, 2 bad input, with a message that says why)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools import evaluate, task_cli

HERE = Path(__file__).parent
REPO = HERE.parent
AXPY = HERE / "fixtures" / "tasks" / "axpy"


def test_a_task_is_validated_and_summarized():
    done = subprocess.run([sys.executable, "-m", "tools.task", "tasks/add_rmsnorm"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "modules: baseline.py (baseline): 16 config(s), multirow.py: 16 config(s), persistent.py: 36 config(s); 68 config(s) in all" in out
    assert "shapes: 10: M=1 N=4096" in out and "CPU shapes: 2: M=4 N=256, M=6 N=768" in out
    assert "dtype: bfloat16" in out and "target: 92% of the roofline at M >= 4096 (4 of 10 shapes)" in out
    assert "tolerance: rtol 0.02, atol 0.01 (element)" in out and out.rstrip().endswith("ok")


def test_a_bad_task_exits_2_naming_the_problem(tmp_path, capsys):
    broken = tmp_path / "axpy"
    shutil.copytree(AXPY, broken)
    (broken / "baseline.py").unlink()
    assert task_cli.main([str(broken)]) == 2
    assert "baseline: file 'baseline.py' not found" in capsys.readouterr().err


@pytest.mark.slow
def test_run_evaluates_the_baseline_at_the_cpu_shapes_and_a_failing_reference_is_a_bad_task(capsys):
    assert task_cli.main([str(AXPY), "--run"]) == 0
    out = capsys.readouterr().out
    assert "reference M=4 N=300 float32: (4, 300)" in out
    assert "baseline baseline.py {'BLOCK': 128, 'num_warps': 4}: pass" in out
    assert task_cli.main([str(HERE / "fixtures" / "tasks" / "broken_reference"), "--run"]) == 2
    assert "error: reference at" in capsys.readouterr().err


def test_run_on_a_task_without_a_baseline_runs_its_reference(tmp_path, capsys):
    folder = tmp_path / "axpy"
    shutil.copytree(AXPY, folder)
    spec = json.loads((folder / "task.json").read_text())
    del spec["baseline"], spec["search_space"], spec["settings"]
    (folder / "task.json").write_text(json.dumps(spec))
    assert task_cli.main([str(folder), "--run"]) == 0
    out = capsys.readouterr().out
    assert "baseline: none (speedups are measured against the reference itself)" in out
    assert "reference M=4 N=300 float32" in out and "baseline baseline.py" not in out


def test_evaluate_says_what_its_flags_want(capsys):
    assert evaluate.main([str(AXPY), str(AXPY / "baseline.py"), "--config", "BLOCK=1024"]) == 2
    err = capsys.readouterr().err
    assert "--config takes a JSON object of search-space values, e.g. '{\"BLOCK\": 1024, \"num_warps\": 4}'" in err
    assert "Expecting value" not in err
    assert evaluate.main([str(AXPY), str(AXPY / "missing.py")]) == 2
    err = capsys.readouterr().err
    assert f"candidate file not found: {AXPY / 'missing.py'}" in err and "Errno" not in err


def test_a_one_input_task_whose_make_inputs_returns_the_tensor_alone_runs(capsys):
    """Once the reference was called with the tensor's rows as its arguments (one per row)."""
    assert task_cli.main([str(HERE / "fixtures" / "tasks" / "argmax_one_input"), "--run"]) == 0
    out = capsys.readouterr().out
    assert "reference M=256 N=256 float32: (256,), (256,)" in out and "baseline baseline.py" in out, out
