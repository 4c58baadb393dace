"""Interpreted (CPU) timings within each other's noise are a tie (loop/ties.py): a tie never takes the
best, and the report says which candidates are tied with it instead of ranking them."""

from __future__ import annotations

import json

from graph_support import AXPY, Run, ScriptedEvaluator, ScriptedProposer, key, passed, prop

from loop.judge import challenger
from loop.records import Attempt, ShapeRow
from loop.ties import noise, tied


def attempt(n: int, us: float, spread: float = 1.0, interpreted: bool = True) -> Attempt:
    row = ShapeRow(shape={"M": 4}, dtype="float32", median_us=us, min_us=us / spread, spread=spread)
    return Attempt(n=n, round=1, identity=f"a{n}", module="baseline.py", verdict="pass", geomean_us=us,
                   per_shape=[row], interpreted=interpreted)  # fmt: skip


def test_interpreted_times_within_the_noise_are_tied_and_gpu_times_never_are():
    assert tied(attempt(1, 100.0), attempt(2, 105.0))  # within the interpreter's 10% resolution
    assert not tied(attempt(1, 100.0), attempt(2, 150.0))
    assert tied(attempt(1, 100.0, spread=1.6), attempt(2, 150.0))  # a noisy measurement: 1.6x is noise
    assert not tied(attempt(1, 100.0, interpreted=False), attempt(2, 105.0, interpreted=False))


def test_a_tied_challenger_keeps_the_best_and_a_clearly_faster_one_takes_it():
    best = attempt(0, 100.0)
    assert challenger([attempt(1, 95.0)], best) is None
    assert challenger([attempt(1, 95.0, interpreted=False)], attempt(0, 100.0, interpreted=False)).n == 1
    assert challenger([attempt(1, 60.0), attempt(2, 95.0)], best).n == 1


def test_the_report_names_the_candidates_tied_with_the_best(tmp_path):
    proposer = ScriptedProposer([[prop(64, 1), prop(64, 2)], [prop(256, 1)]])
    evaluator = ScriptedEvaluator({key({"BLOCK": 64, "num_warps": 1}): passed(50.0),
                                   key({"BLOCK": 64, "num_warps": 2}): passed(52.0),
                                   key({"BLOCK": 256, "num_warps": 1}): passed(96.0)})  # fmt: skip
    run = Run(tmp_path, proposer, evaluator=evaluator, budget={"rounds": 2}).start()
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["best"]["n"] == 1 and report["best"]["tied_with"] == [2]
    assert [a["tied_with_best"] for a in report["attempts"]] == [False, False, True, False]
    markdown = (tmp_path / "run" / "report.md").read_text()
    assert "- tied with #2: the interpreter cannot tell them apart" in markdown
    assert "| 2 | 1 | baseline.py |" in markdown and "pass, tied with the best" in markdown
    assert run.state["best"]["n"] == 1


def test_interpreted_timings_carry_their_noise_into_the_attempt_the_tie_rule_reads():
    """The judge times each CPU shape over several calls; the spread it saw reaches the state's record."""
    from nodes.records import attempt_record
    from tools.candidate import Candidate
    from tools.evaluate import evaluate_many
    from tools.task import load_task

    task = load_task(AXPY)
    cand = Candidate(source=task.baseline_source, config=task.default_config(), module="baseline.py")
    result = evaluate_many(task, [cand], device="cpu")[0]
    row = result.metrics.per_shape[0]
    assert result.passed and row.method == "interpreter" and row.spread >= 1.0
    assert row.spread == row.median_us / row.min_us
    record = attempt_record(1, 1, cand, "baseline.py", result)
    assert record.per_shape[0].spread == row.spread and noise(record) == row.spread
