"""GPU-only hacks and faults: each gets a verdict, and the next candidate still evaluates correctly.

Run on a GPU box: `python -m pytest tests/test_hardening_gpu.py`.
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
CHEATS = HERE / "fixtures" / "cheats"
GOOD = (HERE / "fixtures" / "candidates" / "good.py").read_text()
CONFIG = {"BLOCK": 128, "num_warps": 4}

# With the static checks off, so the run-time defenses are what is tested.
EXPECTED = {
    "side_stream": {"suspicious_speedup", "runtime_error", "forbidden_construct"},
    "patches_events": {"forbidden_construct"},
    "downcast": {"mismatch"},
    "memory_hog": {"runtime_error"},  # 16 TiB on the GPU: CUDA out of memory
}


@pytest.mark.parametrize("early", [False, True], ids=["grouped", "early"])
@pytest.mark.parametrize("name", [*EXPECTED, "segfault"])
def test_gpu_hack_then_good_candidate(tmp_path, name, early):
    """Under the default schedule and with early timing (the good candidate may then be timed while the
    hack's checks still run)."""
    source = (
        (CHEATS / f"{name}.py").read_text()
        if name != "segfault"
        else (HERE / "fixtures" / "candidates" / "segfault.py").read_text()
    )
    settings = EvalSettings(static_checks=False, workdir=str(tmp_path), check_timeout_s=60, early_timing=early)
    with Evaluator(load_task(TASK), "cuda", settings) as evaluator:
        hacked, good = evaluator.evaluate_many(
            [Candidate(source=source, config=CONFIG), Candidate(source=GOOD, config=CONFIG)]
        )
    allowed = EXPECTED.get(name, {"runtime_error", "crash"})  # illegal address: a verdict, not the end
    assert hacked.verdict == "fail" and hacked.error_type in allowed, hacked.message
    assert good.passed and good.metrics.per_shape[0].gbps > 0, good.message
