"""The performance watchdog: a new best slower at any shape is rejected (at a launch-bound size only when
it is not faster overall), noise is not, and shapes off the curve the others draw are flagged.

CPU tests use the add_rmsnorm baseline timings measured on the H200 (bench/results) as the previous
best, with changes injected per shape. The same-process re-time itself runs on a GPU:
`python -m pytest tests/test_watchdog.py -m gpu -q`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.candidate import Candidate
from tools.evaluate import EvalSettings, Evaluator
from tools.results import EvalResult
from tools.task import load_task
from tools.watchdog import (
    check_regression,
    expected_curve_outliers,
    guard_new_best,
    recheck_new_best,
    render_markdown,
)

REPO = Path(__file__).resolve().parent.parent
MEASURED = json.loads((REPO / "bench" / "results" / "evaluator_baselines_h200.json").read_text())
ROWS = MEASURED["tasks"]["add_rmsnorm"]["baseline"]  # ten shapes, timed on the H200
COPY_GBPS = MEASURED["copy_gbps"]


def result(rows: list[dict], copy_gbps: float | None = COPY_GBPS) -> EvalResult:
    return EvalResult.model_validate(
        {
            "verdict": "pass",
            "stage": "done",
            "metrics": {"per_shape": rows, "copy_gbps": copy_gbps},
            "device": {"name": "NVIDIA H200", "interpreted": False},
        }
    )


def scaled(factors: dict[int, float], default: float = 1.0) -> list[dict]:
    """The measured rows with each shape's times (median and best repeat) multiplied by a factor."""
    out = []
    for i, row in enumerate(ROWS):
        f = factors.get(i, default)
        out.append(
            {**row, "median_us": row["median_us"] * f, "min_us": row["min_us"] * f, "gbps": row["gbps"] / f}
        )
    return out


PREVIOUS = result(ROWS)


def test_a_five_percent_regression_at_one_shape_rejects_the_new_best():
    # Faster everywhere by 10% except one shape, 5% slower there: the geomean improves, still rejected.
    new = result(scaled({7: 1.05}, default=0.9))
    verdict = check_regression(new, PREVIOUS)
    assert not verdict.accepted and verdict.compared and verdict.same_process
    assert [c.shape for c in verdict.regressions] == [ROWS[7]["shape"]]
    assert verdict.regressions[0].ratio == pytest.approx(1.05)
    assert verdict.geomean_ratio < 1
    assert "5.0%" in verdict.reason and str(ROWS[7]["shape"]) in verdict.reason


def with_ceilings(rows: list[dict], ceiling_pct: float = 90.0) -> list[dict]:
    """Rows as the judge writes them: each at ``ceiling_pct`` of a same-size copy, so a copy of the
    smallest sizes' bytes reaches well under half the copy bandwidth (launch-bound) and the largest' do not."""
    return [{**r, "ceiling_pct": ceiling_pct} for r in rows]


LAUNCH_BOUND_BELOW = 50.0  # configs/default.yaml profiler.launch_bound_below_pct


def test_a_launch_bound_shape_slower_is_tolerated_only_when_the_geomean_is_faster():
    previous = result(with_ceilings(ROWS))
    # M=1 N=4096 (5.2 us, a copy of its bytes at 0.2% of the copy bandwidth) 15% slower, the rest 40% faster.
    faster = result(with_ceilings(scaled({0: 1.15}, default=0.6)))
    verdict = check_regression(faster, previous, launch_bound_below_pct=LAUNCH_BOUND_BELOW)
    assert verdict.accepted and not verdict.regressions
    assert [c.shape for c in verdict.tolerated] == [ROWS[0]["shape"]] and verdict.tolerated[0].launch_bound
    assert "tolerated" in verdict.reason and str(ROWS[0]["shape"]) in verdict.reason
    assert not check_regression(faster, previous).accepted  # without the size classes: any shape counts
    slower_only_there = result(with_ceilings(scaled({0: 1.15})))
    verdict = check_regression(slower_only_there, previous, launch_bound_below_pct=LAUNCH_BOUND_BELOW)
    assert not verdict.accepted and [c.shape for c in verdict.regressions] == [ROWS[0]["shape"]]


def test_a_bandwidth_bound_shape_slower_rejects_the_new_best_whatever_the_geomean():
    previous = result(with_ceilings(ROWS))
    new = result(with_ceilings(scaled({9: 1.05}, default=0.6)))  # M=16384 N=8192: a stream
    verdict = check_regression(new, previous, launch_bound_below_pct=LAUNCH_BOUND_BELOW)
    assert not verdict.accepted and [c.shape for c in verdict.regressions] == [ROWS[9]["shape"]]
    assert not verdict.tolerated
    rows = result(ROWS)  # rows without a same-size ceiling cannot be told launch-bound: strict
    no_ceilings = check_regression(result(scaled({0: 1.15}, default=0.6)), rows, launch_bound_below_pct=50)
    assert not no_ceilings.accepted


def test_one_percent_noise_either_way_is_accepted():
    noise = {i: (1.01 if i % 2 else 0.99) for i in range(len(ROWS))}
    verdict = check_regression(result(scaled(noise)), PREVIOUS)
    assert verdict.accepted and verdict.compared and not verdict.regressions
    assert len(verdict.changes) == len(ROWS)


def test_the_threshold_is_a_parameter():
    new = result(scaled({3: 1.02}))
    assert check_regression(new, PREVIOUS).accepted
    assert not check_regression(new, PREVIOUS, max_regression=0.01).accepted


def test_a_median_that_moves_without_the_best_repeat_is_noise():
    rows = scaled({})
    rows[2] = {**rows[2], "median_us": rows[2]["median_us"] * 1.06}  # one slow repeat, same best
    assert check_regression(result(rows), PREVIOUS).accepted


def test_a_failed_or_incomplete_new_best_is_rejected_and_a_failed_previous_compares_nothing():
    failed = EvalResult.failure("timing", "unstable_timing", "median/min = 1.30")
    verdict = check_regression(failed, PREVIOUS)
    assert not verdict.accepted and "unstable_timing" in verdict.reason
    assert not check_regression(result(scaled({})[:-1]), PREVIOUS).accepted
    verdict = check_regression(result(scaled({})), failed)
    assert verdict.accepted and not verdict.compared and "could not be re-timed" in verdict.reason


def test_separate_measurements_are_told_apart_from_one_process():
    other_run = result(scaled({}), copy_gbps=COPY_GBPS * 0.99)
    assert check_regression(other_run, PREVIOUS).same_process is False
    assert check_regression(result(scaled({})), PREVIOUS).same_process is True


def test_measured_timings_lie_on_the_expected_curve():
    assert expected_curve_outliers(ROWS) == []
    assert expected_curve_outliers(scaled({4: 1.2})) == []  # within the factor


def test_a_shape_off_the_curve_is_flagged_with_its_expected_time():
    outliers = expected_curve_outliers(scaled({8: 1.8}))
    assert [o.shape for o in outliers] == [ROWS[8]["shape"]]
    (o,) = outliers
    assert o.direction == "slow" and o.basis == "bytes"
    assert o.expected_us == pytest.approx(ROWS[8]["median_us"], rel=0.15)
    fast = expected_curve_outliers(scaled({6: 0.5}))
    assert [(o.shape, o.direction) for o in fast] == [(ROWS[6]["shape"], "fast")]


def test_too_few_shapes_flag_nothing_and_interpreted_rows_use_the_element_count():
    assert expected_curve_outliers(scaled({0: 3.0})[:3]) == []
    interpreted = [
        {"shape": {"M": m, "N": 256}, "dtype": "float32", "median_us": 100.0 * m, "min_us": 90.0 * m,
         "spread": 1.1, "method": "interpreter"}
        for m in (1, 2, 4, 8, 16)
    ]  # fmt: skip
    assert expected_curve_outliers(interpreted) == []
    interpreted[2] = {**interpreted[2], "median_us": 4000.0}
    (o,) = expected_curve_outliers(interpreted)
    assert o.shape == {"M": 4, "N": 256} and o.basis == "elements"


def test_attempt_records_of_the_graph_are_judged_too():
    fields = ("shape", "dtype", "median_us", "gbps", "roofline_pct", "method")
    attempts = [{k: r[k] for k in fields} for r in scaled({8: 1.8})]
    assert [o.shape for o in expected_curve_outliers(attempts)] == [ROWS[8]["shape"]]


def test_the_report_section_names_the_regression_and_the_outlier():
    verdict = check_regression(result(scaled({7: 1.05})), PREVIOUS)
    text = render_markdown(verdict, expected_curve_outliers(scaled({8: 1.8})))
    assert "rejected" in text and "same process" in text
    assert json.dumps(ROWS[7]["shape"]).replace('"', "'") in text.replace('"', "'")
    assert "expected" in text and "slow" in text


def test_on_the_cpu_the_guard_accepts_without_a_re_time(tmp_path):
    task = load_task(REPO / "tests" / "fixtures" / "tasks" / "axpy")
    cand = Candidate(source=task.baseline_source, config=task.default_config())
    with Evaluator(task, "cpu", EvalSettings(workdir=str(tmp_path))) as evaluator:
        verdict = guard_new_best(evaluator, cand, cand)
        with pytest.raises(RuntimeError, match="needs a GPU"):
            evaluator.retime([cand, cand])
    assert verdict.accepted and not verdict.compared and verdict.interpreted
    assert recheck_new_best(task, "cpu", cand, cand).accepted  # no evaluator opened, no re-time


def test_the_watchdog_re_times_on_the_runs_own_judge_not_a_second_one(monkeypatch):
    """A second judge beside the run's would make every input set and reference again while the first holds
    its own in memory (the softmax references: gigabytes): the watchdog asks the run's judge."""
    import tools.evaluate as evaluate

    task = load_task(REPO / "tests" / "fixtures" / "tasks" / "axpy")
    cand = Candidate(source=task.baseline_source, config=task.default_config())
    started: list[object] = []

    class OneJudge:  # a backend that answers a re-time with the measured add_rmsnorm rows, unchanged
        hidden_shapes: list = []

        def retime(self, jobs):
            return {job["key"]: result(ROWS).model_dump() for job in jobs}

        def close(self):
            pass

    def make_backend(*args):
        started.append(OneJudge())
        return started[-1]

    monkeypatch.setattr(evaluate, "make_backend", make_backend)
    monkeypatch.setattr(evaluate, "resolve_device", lambda device: "cuda")
    monkeypatch.setattr(evaluate, "_SHARED", {})
    settings = EvalSettings.for_task(task)
    runs_judge = evaluate.shared_backend(task, "cuda", settings)  # the one the run's rounds use
    verdict = recheck_new_best(task, "cuda", cand, cand, settings=settings)
    assert verdict.compared and verdict.accepted
    assert started == [runs_judge]


# -- on the GPU: two candidates timed back to back in one timing-server process -------------------------
@pytest.mark.gpu
def test_same_process_retime_rejects_a_slower_kernel_and_accepts_the_same_one(tmp_path):
    task = load_task(REPO / "tasks" / "add_rmsnorm")
    source = task.baseline_source
    launch_twice = source.replace(
        "    return y, h\n",
        "    add_rmsnorm_kernel[grid](\n"
        "        x, r, w, y, h, M, N, EPS, ROWS=ROWS, BLOCK_N=triton.next_power_of_2(N), num_warps=num_warps\n"
        "    )\n"
        "    return y, h\n",
    )
    assert launch_twice != source
    config = task.default_config()
    fast = Candidate(source=source, config=config)
    slow = Candidate(source=launch_twice, config=config)
    with Evaluator(task, "cuda", EvalSettings(workdir=str(tmp_path))) as evaluator:
        first, again, twice = evaluator.retime([fast, fast, slow])
    for r in (first, again, twice):
        assert r.passed, (r.error_type, r.message, r.log[-2000:])
        assert r.metrics.copy_gbps == first.metrics.copy_gbps  # one process, one copy measurement
        assert len(r.metrics.per_shape) == len(task.spec.shapes) and not r.device.interpreted
    rejected = check_regression(twice, first)
    assert not rejected.accepted and rejected.same_process
    large = [c for c in rejected.changes if c.shape["M"] >= 4096]
    assert all(c.ratio > 1.5 for c in large), large
    same = check_regression(again, first)
    assert same.accepted, same.model_dump_json(indent=1)
    assert abs(same.geomean_ratio - 1) < 0.03
