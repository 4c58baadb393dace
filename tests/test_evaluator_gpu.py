"""The same cheat and fault batch on a real GPU (compiled kernels, CUDA timing).

Run on the H200: `python -m pytest tests/test_evaluator_gpu.py -m gpu`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.candidate import Candidate
from tools.evaluate import EvalSettings, Evaluator
from tools.task import load_task

pytestmark = pytest.mark.gpu

HERE = Path(__file__).parent
TASK = HERE / "fixtures" / "tasks" / "axpy"
CANDIDATES = HERE / "fixtures" / "candidates"
CONFIG = {"BLOCK": 128, "num_warps": 4}

EXPECTED = {
    "good": (None, "done"),
    "mask_off_by_one": ("unwritten_output", "correctness"),
    "load_off_by_one": ("mismatch", "correctness"),
    "syntax_error": ("syntax_error", "static"),
    "never_launched": ("no_kernel_launched", "static"),
    "launch_skipped": ("no_kernel_launched", "compile"),
    "torch_result": ("forbidden_construct", "compile"),
    "partial_write": ("unwritten_output", "correctness"),
    "writes_input": ("input_modified", "correctness"),
    "cached_by_address": ("stale_output", "correctness"),
    "nondeterministic": ("nondeterministic", "correctness"),
    "imports_os": ("forbidden_construct", "static"),
    "hang": ("timeout", "correctness"),
}


def test_gpu_verdicts_and_recovery(tmp_path):
    task = load_task(TASK)
    names = [*EXPECTED, "segfault", "good"]
    cands = [Candidate(source=(CANDIDATES / f"{n}.py").read_text(), config=CONFIG) for n in names]
    settings = EvalSettings(check_timeout_s=30, workdir=str(tmp_path))
    with Evaluator(task, "cuda", settings) as evaluator:
        results = evaluator.evaluate_many(cands)
    got = {n: (r.error_type, r.stage) for n, r in zip(names, results, strict=True)}
    for name, expected in EXPECTED.items():
        assert got[name] == expected, (name, results[names.index(name)].message)
    # Out of bounds on the GPU: an illegal address reported as a verdict (the worker may die with it).
    assert got["segfault"][0] in {"runtime_error", "crash"}, results[-2].message
    last = results[-1]
    assert last.passed and last.metrics.per_shape[0].gbps > 0
    assert not last.device.interpreted and last.resources["n_regs"] > 0
