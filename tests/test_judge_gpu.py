"""The judge on a real GPU: every probe rejected with its reason (static checks off, so the run-time
defenses are what is tested), what was timed is what was checked, and a win re-measured in fresh
workers agrees with the judge's own wall clock.

Run on the H200: `python -m pytest tests/test_judge_gpu.py -m gpu -s` (prints what it measured).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_judge_probes import AT_RUN_TIME

from tools.candidate import Candidate
from tools.evaluate import EvalSettings, Evaluator
from tools.task import load_task

pytestmark = pytest.mark.gpu

HERE = Path(__file__).parent
PROBES = HERE / "fixtures" / "probes"
TASKS = HERE / "fixtures" / "tasks"
GOOD = (HERE / "fixtures" / "candidates" / "good.py").read_text()
CONFIG = {"BLOCK": 128, "num_warps": 4}

# as on CPU, but a kernel that changes under capture or by call count is caught in a timed replay
ON_THE_GPU = {
    **AT_RUN_TIME,
    "capture_cheat": ("unwritten_output", "timed replay"),
    "count_cheat": ("unwritten_output", "timed replay"),
}
# Where shapes are compiled by commands that launch no kernel (timed as checked: every shape; timed once the
# group is closed: every shape but the first), a probe's call at such a shape does no work. So count_cheat,
# honest for the calls of the grouped schedule, turns cheap within the checks, and super_batch's cached
# first result was never computed; both are rejected there, as the H100 run of 2026-12-07 recorded.
ON_THE_GPU_OVERLAP = {
    **ON_THE_GPU,
    "count_cheat": ("unwritten_output", "never written"),
    "super_batch": ("mismatch", "differs at"),
}

# Timed once the group is closed, super_batch's first call at the compile shape is a real one, and the
# tensor its compile-only calls cache at the other shapes is caught alive after launch() returned.
ON_THE_GPU_EARLY = {**ON_THE_GPU_OVERLAP, "super_batch": ("stale_output", "alive after it returned")}
EXPECTED = {"overlap": ON_THE_GPU_OVERLAP, "grouped": ON_THE_GPU, "early": ON_THE_GPU_EARLY}


def _record(name: str, data: object) -> None:
    folder = os.environ.get("KA_RECORD_DIR")
    if folder:
        Path(folder, f"{name}.json").write_text(json.dumps(data, indent=2, default=str))


@pytest.mark.parametrize("schedule", ["overlap", "grouped", "early"],
                         ids=["timed_as_checked", "checked_then_timed", "timed_once_grouped"])  # fmt: skip
def test_every_probe_is_rejected_on_the_gpu(tmp_path, schedule):
    """Under each of the judge's schedules: each candidate timed as soon as it passed while others are still
    checked; a batch checked then timed in groups; and in groups, timed once the group is closed. Where the
    other shapes are compiled by commands that launch nothing (overlap, early), a probe's extra calls turn
    count_cheat cheap within the checks and leave super_batch's cached result uncomputed."""
    task = load_task(TASKS / "axpy")
    names = list(ON_THE_GPU)
    cands = [Candidate(source=(PROBES / f"{n}.py").read_text(), config=CONFIG) for n in names]
    settings = EvalSettings(static_checks=False, hidden_seed=7, workdir=str(tmp_path), check_timeout_s=120,
                            overlap_timing=schedule == "overlap", early_timing=schedule == "early")  # fmt: skip
    with Evaluator(task, "cuda", settings) as evaluator:
        results = evaluator.evaluate_many([*cands, Candidate(source=GOOD, config=CONFIG)])
    got = {n: (r.error_type, r.stage, r.message) for n, r in zip(names, results, strict=False)}
    _record(f"probes_gpu_{schedule}", got)
    for name, (error_type, phrase) in EXPECTED[schedule].items():
        assert got[name][0] == error_type and phrase in got[name][2], (name, got[name])
    assert results[-1].passed and results[-1].metrics.per_shape[0].method == "cuda_graph", results[-1].message


def test_a_win_is_re_measured_in_fresh_workers_against_the_judges_clock(tmp_path):
    """The add_rmsnorm baseline and a multi-row config re-timed side by side: each agrees with the judge's
    wall clock over its replays and runs no faster on repeated inputs than on changing ones."""
    task = load_task(HERE.parent / "tasks" / "add_rmsnorm")
    first = Candidate(source=task.baseline_source, config=task.default_config())
    second = Candidate(source=task.source("multirow.py"), config={"ROWS": 4, "num_warps": 8}, module="multirow.py")
    with Evaluator(task, "cuda", EvalSettings(workdir=str(tmp_path))) as evaluator:
        results = evaluator.retime([first, second])
    _record("confirm_add_rmsnorm", [r.details.get("confirm") for r in results])
    for r in results:
        assert r.passed, (r.error_type, r.message)
        for row in r.details["confirm"]:
            print(row)
            # the wall clock also pays for writing the dirty outputs back in the next flush (writeback_us)
            band = max(0.15 * row["events_us"], 3.0)
            assert -band <= row["wall_us"] - row["events_us"] <= band + row["writeback_us"]


def test_a_kernel_that_keeps_its_inputs_in_the_l2_gains_nothing_it_is_not_caught_for(tmp_path):
    """evict_last loads: if the flush left such lines in the L2 the kernel would be faster on repeated
    inputs, and the re-measure would hold it; either way what is reported is what it costs. A ~3 us kernel
    may also be refused as unstably timed (the H200, 2026-12-03): refused, it gains nothing either."""
    probe = Candidate(source=(PROBES / "l2_resident.py").read_text(), config=CONFIG)
    good = Candidate(source=GOOD, config=CONFIG)
    with Evaluator(load_task(TASKS / "axpy"), "cuda", EvalSettings(workdir=str(tmp_path))) as evaluator:
        held, honest = evaluator.retime([probe, good])
    _record("l2_resident", {"probe": held.model_dump(mode="json"), "good": honest.model_dump(mode="json")})
    assert honest.passed
    if held.passed:
        for row in held.details["confirm"]:
            assert row["rotating_us"] <= 1.25 * row["events_us"] or row["rotating_us"] - row["events_us"] <= 3.0
    elif held.error_type != "unstable_timing":
        assert held.error_type == "stale_output" and "L2" in held.message
