"""KernelBench's metrics on synthetic results: fast_p's definition, the geomean, reading run reports."""

from __future__ import annotations

import math

import pytest

from bench.kernelbench.__main__ import markdown, problem_row, read_run
from bench.kernelbench.metrics import (
    ProblemResult,
    ShapeTime,
    all_shapes_speedup,
    correctness_rate,
    fast_p,
    geomean_speedup,
    summary,
)


def problem(name: str, correct: bool, *speedups: float, anchor: str = "compile") -> ProblemResult:
    """A problem whose shapes run at 100 us against anchors at speedup x 100 us (first: its own size)."""
    shapes = [
        ShapeTime(shape={"n": i}, best_us=100.0, anchors_us={anchor: 100.0 * s})
        for i, s in enumerate(speedups)
    ]
    return ProblemResult(name=name, correct=correct, shapes=shapes)


RESULTS = [
    problem("a", True, 1.5, 1.0),
    problem("b", True, 0.9),
    problem("c", False, 3.0),  # fast but wrong: never counts as fast
    problem("d", True, 2.0),
]


@pytest.mark.parametrize(("p", "expected"), [(0.0, 0.75), (1.0, 0.5), (1.2, 0.5), (1.5, 0.25), (2.0, 0.0)])
def test_fast_p_counts_correct_problems_strictly_faster_than_p_over_all_problems(p, expected):
    assert fast_p(RESULTS, "compile", p) == expected


def test_fast_p_at_zero_is_the_correctness_rate_when_every_correct_problem_is_timed():
    assert fast_p(RESULTS, "compile", 0.0) == correctness_rate(RESULTS) == 0.75


def test_the_geomean_is_over_the_correct_problems_at_their_own_size():
    assert geomean_speedup(RESULTS, "compile") == pytest.approx((1.5 * 0.9 * 2.0) ** (1 / 3))
    assert all_shapes_speedup(RESULTS[0], "compile") == pytest.approx(math.sqrt(1.5 * 1.0))


def test_a_problem_without_the_anchor_is_not_fast_against_it():
    assert fast_p(RESULTS, "eager", 0.0) == 0.0
    assert geomean_speedup(RESULTS, "eager") is None
    s = summary(RESULTS)
    assert s["anchors"]["eager"]["timed"] == 0 and s["anchors"]["compile"]["timed"] == 3
    assert s["anchors"]["compile"]["fast_p"] == {"1": 0.5, "1.2": 0.5, "1.5": 0.25, "2": 0.0}
    assert s["correctness_rate"] == 0.75 and s["problems"] == 4


def test_no_problems_score_zero():
    assert fast_p([], "compile", 1.0) == 0.0 and correctness_rate([]) == 0.0
    assert geomean_speedup([], "compile") is None


REPORT = {
    "status": "budget_exhausted",
    "best": {"geomean_us": 80.0},
    "candidates_evaluated": 12,
    "wall_s": 170.0,
    "attempts": [{"error_type": "suspicious_speedup"}, {"error_type": None}],
    "per_shape": [
        {"shape": {"B": 2}, "best_us": 50.0, "anchors": {"eager": 100.0, "compile": 60.0}},
        {"shape": {"B": 4}, "best_us": 100.0, "anchors": {"eager": 300.0, "compile": 150.0}},
    ],
}


def test_a_run_report_is_read_with_the_problems_own_size_first():
    result = read_run("x", REPORT, {"B": 4})
    assert result.correct and [s.shape for s in result.shapes] == [{"B": 4}, {"B": 2}]
    row = problem_row(result, REPORT, {"B": 4})
    assert row["speedup"] == {"eager": 3.0, "compile": 1.5}
    assert (row["evaluations"], row["minutes"], row["held"]) == (12, 2.83, 1)


def test_a_missing_report_or_an_untimed_shape_is_incorrect():
    assert not read_run("x", None, {"B": 4}).correct
    broken = {**REPORT, "per_shape": [{**REPORT["per_shape"][0], "best_us": None}]}
    assert not read_run("x", broken, {"B": 2}).correct
    assert not read_run("x", {**REPORT, "best": None}, {"B": 2}).correct


def test_the_markdown_shows_kernelbench_metrics_and_each_problem():
    results = [read_run("x", REPORT, {"B": 4}), read_run("y", None, {"B": 1})]
    record = {
        "date": "d", "gpu": "H200", "torch": "2", "triton": "3", "command": "python -m bench.kernelbench p",
        "summary": summary(results),
        "per_problem": [problem_row(results[0], REPORT, {"B": 4}), problem_row(results[1], None, {"B": 1})],
        "import_errors": ["bad.py: no class Model(nn.Module)"],
    }  # fmt: skip
    text = markdown(record)
    assert "| compile | 50% | 50% | 0% | 0% | 1.50x |" in text
    assert "| y | **no** (no report) | B=1 |" in text
    assert "bad.py: no class Model" in text


def test_a_report_over_several_calls_takes_each_problem_from_its_latest_run(tmp_path):
    """bench.kernelbench.aggregate: the last runs folder with a report wins, an earlier report's row
    stands in at its own size, and a problem without either is not correct and says why."""
    import json

    from bench.kernelbench.aggregate import collect, parse_args

    first, second = tmp_path / "first", tmp_path / "second"
    for folder, best in ((first, 100.0), (second, 50.0)):
        (folder / "a").mkdir(parents=True)
        per_shape = [{"shape": {"B": 4}, "best_us": best, "anchors": {"eager": 300.0, "compile": 150.0}}]
        (folder / "a" / "report.json").write_text(json.dumps({**REPORT, "per_shape": per_shape}))
    (first / "c").mkdir()
    earlier = tmp_path / "earlier.json"
    row = {"name": "b", "correct": True, "status": "converged", "own_shape": {"B": 1}, "best_us": 10.0,
           "anchors_us": {"eager": 20.0, "compile": 10.0}, "speedup": {"eager": 2.0, "compile": 1.0},
           "evaluations": 0, "minutes": 1.0, "held": 0}  # fmt: skip
    earlier.write_text(json.dumps({"per_problem": [row]}))
    args = parse_args(["p", "--runs", str(first), "--runs", str(second), "--rows", str(earlier), "--out", "o",
                       "--measured", "m", "--command", "c", "--torch", "t", "--triton", "t",
                       "--status", "e=baseline failed"])  # fmt: skip
    shapes = {name: {"B": 4 if name == "a" else 1} for name in "abcde"}
    results, rows, _ = collect(shapes, args)
    by_name = {r["name"]: r for r in rows}
    assert by_name["a"]["speedup"] == {"eager": 6.0, "compile": 3.0}
    assert by_name["b"]["speedup"] == {"eager": 2.0, "compile": 1.0} and results[1].correct
    assert [by_name[n]["status"] for n in "cde"] == ["no report", "not run", "baseline failed"]
    assert [r.correct for r in results] == [True, True, False, False, False]
