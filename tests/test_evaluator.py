"""The evaluator's verdicts on real Triton kernels run under the interpreter (CPU).

One batch evaluates every fixture candidate (each in its own worker process); each test then checks
the verdict a user would rely on. Afterwards a correct candidate must still pass in the same session.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools.candidate import Candidate
from tools.evaluate import EvalSettings, evaluate, evaluate_many
from tools.task import load_task

HERE = Path(__file__).parent
TASK = HERE / "fixtures" / "tasks" / "axpy"
CANDIDATES = HERE / "fixtures" / "candidates"
CONFIG = {"BLOCK": 128, "num_warps": 4}
HANG_LIMIT_S = 25.0


@pytest.fixture(scope="module")
def verdicts() -> dict:
    task = load_task(TASK)
    files = sorted(CANDIDATES.glob("*.py"))
    cands = [Candidate(source=f.read_text(), config=CONFIG) for f in files]
    results = evaluate_many(
        task, cands, device="cpu", settings=EvalSettings(check_timeout_s=HANG_LIMIT_S, parallel=2)
    )
    return {f.stem: r for f, r in zip(files, results, strict=True)}


def test_correct_candidate_passes_with_interpreted_timing(verdicts):
    r = verdicts["good"]
    assert r.verdict == "pass" and r.stage == "done", r.message
    assert r.device.interpreted is True
    assert r.metrics.per_shape and r.metrics.per_shape[0].method == "interpreter"
    assert r.metrics.per_shape[0].gbps is None  # no speed claims from the interpreter
    assert r.details["checks"] >= 3 * 3  # every shape and check shape, three seeds each


def test_store_mask_off_by_one_is_localized(verdicts):
    r = verdicts["mask_off_by_one"]
    assert (r.stage, r.error_type) == ("correctness", "unwritten_output")
    assert r.details["index"] == [3, 299]  # the last element of the 4x300 output
    assert r.details["count"] == 1


def test_load_mask_off_by_one_reports_got_and_expected(verdicts):
    r = verdicts["load_off_by_one"]
    assert (r.stage, r.error_type) == ("correctness", "mismatch")
    assert r.details["index"] == [3, 299]
    assert r.details["got"] != pytest.approx(r.details["expected"])
    assert "[3, 299]" in r.message


def test_syntax_error_stops_at_static_with_line(verdicts):
    r = verdicts["syntax_error"]
    assert (r.stage, r.error_type) == ("static", "syntax_error")
    assert "line 9" in r.message and "SyntaxError" in r.log


def test_kernel_defined_but_never_launched(verdicts):
    assert (verdicts["never_launched"].stage, verdicts["never_launched"].error_type) == (
        "static",
        "no_kernel_launched",
    )
    # Statically it looks launched; at run time launch() skips it.
    assert verdicts["launch_skipped"].error_type == "no_kernel_launched"
    assert verdicts["launch_skipped"].stage == "compile"


def test_torch_result_is_rejected(verdicts):
    r = verdicts["torch_result"]
    assert r.error_type == "forbidden_construct"
    assert "aten.mul" in r.message


def test_partial_write_caught_by_nan_fill(verdicts):
    r = verdicts["partial_write"]
    assert r.error_type == "unwritten_output"
    assert r.details["count"] == 600


def test_in_place_write_to_input(verdicts):
    r = verdicts["writes_input"]
    assert r.error_type == "input_modified"
    assert r.details["input"] == 0


def test_result_cached_by_input_address(verdicts):
    assert verdicts["cached_by_address"].error_type == "stale_output"


def test_nondeterminism(verdicts):
    assert verdicts["nondeterministic"].error_type == "nondeterministic"


def test_forbidden_import(verdicts):
    r = verdicts["imports_os"]
    assert (r.stage, r.error_type) == ("static", "forbidden_construct")
    assert "'os'" in r.message


def test_hang_is_a_timeout_within_the_limit(verdicts):
    r = verdicts["hang"]
    assert r.error_type == "timeout"
    assert f"{HANG_LIMIT_S:.0f} s" in r.message


def test_segfault_is_a_crash_verdict(verdicts):
    r = verdicts["segfault"]
    assert r.error_type == "crash"
    assert "SIGSEGV" in r.message


def test_evaluator_still_correct_after_crash_and_hang(verdicts):
    """The session survives: the same good kernel passes, a broken one still fails."""
    assert verdicts["segfault"].error_type == "crash" and verdicts["hang"].error_type == "timeout"
    good = evaluate(TASK, (CANDIDATES / "good.py").read_text(), CONFIG, device="cpu")
    assert good.verdict == "pass"
    bad = evaluate(TASK, (CANDIDATES / "partial_write.py").read_text(), CONFIG, device="cpu")
    assert bad.error_type == "unwritten_output"


def test_config_outside_search_space_is_rejected_not_clamped():
    r = evaluate(TASK, (CANDIDATES / "good.py").read_text(), {"BLOCK": 100, "num_warps": 4}, device="cpu")
    assert (r.stage, r.error_type) == ("static", "out_of_search_space")
    assert "BLOCK=100" in r.message


def test_forbidden_construct_from_the_task(tmp_path):
    spec = json.loads((TASK / "task.json").read_text())
    spec["constraints"] = {"forbid": ["tl.dot"]}
    for name in ("reference.py", "baseline.py"):
        (tmp_path / name).write_text((TASK / name).read_text())
    (tmp_path / "task.json").write_text(json.dumps(spec))
    source = (CANDIDATES / "good.py").read_text().replace("a * x + y", "a * x + y + tl.sum(tl.dot(x, y)) * 0")
    r = evaluate(tmp_path, source, CONFIG, device="cpu")
    assert r.error_type == "forbidden_construct" and "tl.dot" in r.message


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tools.evaluate", *args],
        capture_output=True,
        text=True,
        cwd=HERE.parent,
        timeout=300,
    )


def test_cli_json_and_exit_codes():
    ok = _cli(str(TASK), str(CANDIDATES / "good.py"), "--device", "cpu", "--json")
    assert ok.returncode == 0, ok.stderr
    result = json.loads(ok.stdout)
    assert result["verdict"] == "pass" and result["stage"] == "done"
    assert result["device"]["interpreted"] is True

    bad = _cli(
        str(TASK),
        str(CANDIDATES / "syntax_error.py"),
        "--device",
        "cpu",
        "--json",
        "--config",
        json.dumps(CONFIG),
    )
    assert bad.returncode == 1 and json.loads(bad.stdout)["error_type"] == "syntax_error"

    wrong = _cli(str(TASK / "missing.json"), str(CANDIDATES / "good.py"))
    assert wrong.returncode == 2 and "not found" in wrong.stderr


def test_speedups_beyond_ten_times_or_the_roofline_are_held_and_say_which():
    from tools.evaluate import Evaluator
    from tools.results import EvalResult, Metrics, ShapeTiming

    def timed(us: float, pct: float) -> EvalResult:
        row = ShapeTiming(shape={"N": 4096}, dtype="float32", median_us=us, min_us=us, spread=1.0,
                          gbps=pct * 40, roofline_pct=pct)  # fmt: skip
        return EvalResult(verdict="pass", stage="timing", metrics=Metrics(per_shape=[row]))

    with Evaluator(load_task(TASK), "cpu", EvalSettings()) as evaluator:
        baseline = timed(100.0, 5.0)
        assert evaluator._judge_timing(timed(20.0, 25.0), baseline).stage == "done"  # 5x: a result
        fast = evaluator._judge_timing(timed(5.0, 90.0), baseline)  # 20x, within the roofline
        assert fast.error_type == "suspicious_speedup" and fast.details["held"] == "speedup"
        assert "20.0x faster than the baseline" in fast.message
        beyond = evaluator._judge_timing(timed(50.0, 150.0), baseline)  # faster than a copy
        assert beyond.error_type == "suspicious_speedup" and beyond.details["held"] == "roofline"
        # A read-only kernel streams faster than a copy (which writes what it reads), up to the HBM peak.
        assert evaluator._judge_timing(timed(20.0, 112.0), baseline).stage == "done"
        assert evaluator._judge_timing(timed(20.0, 116.0), baseline).details["held"] == "roofline"


def test_a_task_with_a_naive_baseline_raises_the_hold_threshold_but_never_the_roofline(tmp_path):
    from tools.evaluate import Evaluator
    from tools.results import EvalResult, Metrics, ShapeTiming
    from tools.task import TaskError

    def timed(us: float, pct: float) -> EvalResult:
        row = ShapeTiming(shape={"N": 4096}, dtype="float32", median_us=us, min_us=us, spread=1.0,
                          gbps=pct * 40, roofline_pct=pct)  # fmt: skip
        return EvalResult(verdict="pass", stage="timing", metrics=Metrics(per_shape=[row]))

    folder = tmp_path / "axpy"
    shutil.copytree(TASK, folder)
    spec = json.loads((folder / "task.json").read_text())
    spec["settings"] = {**spec.get("settings", {}), "evaluator": {"suspicious_speedup": 50}}
    (folder / "task.json").write_text(json.dumps(spec))
    task = load_task(folder)
    assert EvalSettings.for_task(task).suspicious_speedup == 50
    assert EvalSettings.for_task(task, suspicious_speedup=30).suspicious_speedup == 30  # the run's override
    with Evaluator(task, "cpu", EvalSettings.for_task(task)) as evaluator:
        baseline = timed(100.0, 2.0)
        assert evaluator._judge_timing(timed(5.0, 40.0), baseline).stage == "done"  # 20x: a result here
        held = evaluator._judge_timing(timed(1.0, 100.0), baseline)  # 100x
        assert held.details["held"] == "speedup" and "hold threshold 50x" in held.message
        beyond = evaluator._judge_timing(timed(2.5, 120.0), baseline)  # 40x but faster than a copy
        assert beyond.details["held"] == "roofline"

    for wrong in ({"suspicious_speedup": 0.5}, {"suspicious_speedup": "ten"}, {"retries": 2}):
        spec["settings"]["evaluator"] = wrong
        (folder / "task.json").write_text(json.dumps(spec))
        with pytest.raises(TaskError, match="suspicious_speedup"):
            load_task(folder)


def test_each_phase_says_how_much_of_it_was_spent_waiting_on_the_worker(tmp_path):
    """A candidate whose launch() is slow: its correctness seconds are mostly the wait for its worker's
    replies, and no part of a phase is longer than the phase."""
    slow = (CANDIDATES / "good.py").read_text().replace(
        "    out = torch.empty_like(x)\n", "    out = torch.empty_like(x)\n    busy = 0\n    for i in range(400_000):\n        busy += i\n"
    )
    result = evaluate(TASK, slow, CONFIG, device="cpu", settings=EvalSettings(parallel=1, workdir=str(tmp_path)))
    seconds = result.stage_seconds
    assert result.passed, result.message
    for phase in ("startup", "compile", "correctness"):
        assert seconds[f"{phase}_worker"] + seconds[f"{phase}_sync"] <= seconds[phase] + 1e-3, seconds
    assert seconds["correctness_worker"] > 0.8 * seconds["correctness"], seconds
