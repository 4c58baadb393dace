"""A candidate's checks end where the run's minutes do: a check that would hold the round past the
budget is cut there with a verdict that says so, not after the whole check timeout."""

import time
from pathlib import Path

from tools.candidate import Candidate
from tools.evaluate import EvalSettings, evaluate_many
from tools.session import MIN_CHECK_S, check_limit
from tools.task import load_task

HERE = Path(__file__).parent


def test_the_check_timeout_holds_unless_the_runs_budget_ends_sooner():
    assert check_limit(240.0, None) == (240.0, False)
    assert check_limit(240.0, time.time() + 3600) == (240.0, False)
    limit, by_run = check_limit(240.0, time.time() + 100)
    assert by_run and 95 < limit <= 100
    assert check_limit(240.0, time.time() - 5) == (MIN_CHECK_S, True)


def test_a_hanging_candidate_is_cut_when_the_runs_budget_is_spent(tmp_path):
    task = load_task(HERE / "fixtures" / "tasks" / "axpy")
    hang = Candidate(source=(HERE / "fixtures" / "candidates" / "hang.py").read_text(),
                     config={"BLOCK": 128, "num_warps": 4})  # fmt: skip
    settings = EvalSettings(check_timeout_s=240.0, workdir=str(tmp_path), run_deadline_unix=time.time())
    started = time.monotonic()
    (result,) = evaluate_many(task, [hang], device="cpu", settings=settings)
    took = time.monotonic() - started
    assert (result.stage, result.error_type) == ("correctness", "timeout"), result.message
    assert "when the run's budget ran out" in result.message and "240 s" in result.message
    assert took < MIN_CHECK_S + 40, f"the hang held the round for {took:.0f} s"
