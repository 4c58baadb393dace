"""Validation cache on real SQLite files, with a real task folder and several writer processes."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from memory.validation_cache import ValidationCache, cached_evaluate, current_device_info
from tools.results import DeviceInfo, EvalResult, Metrics
from tools.task import Task, load_task

H200 = DeviceInfo(name="NVIDIA H200", triton="3.6.0", torch="2.11.0", interpreted=False)


@pytest.fixture
def task(tmp_path: Path) -> Task:
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "reference.py").write_text(
        "def reference(x):\n    return x * 2\n\n"
        "def make_inputs(shape, dtype, device, seed):\n    raise NotImplementedError\n"
    )
    (folder / "baseline.py").write_text("def launch(x, **config):\n    return x * 2\n")
    (folder / "task.json").write_text(
        json.dumps(
            {
                "name": "double",
                "description": "y = 2x",
                "reference": "reference.py",
                "inputs": "reference.py:make_inputs",
                "baseline": "baseline.py",
                "dtype": "float32",
                "shapes": [{"N": 1024}],
                "search_space": {"BLOCK": [128, 256]},
            }
        )
    )
    return load_task(folder)


class CountingEvaluator:
    """A real function standing in for the evaluator: it counts its calls."""

    def __init__(self, verdict: str = "pass", error_type: str | None = None):
        self.calls = 0
        self.verdict, self.error_type = verdict, error_type

    def __call__(self) -> EvalResult:
        self.calls += 1
        return EvalResult(
            verdict=self.verdict,
            stage="done" if self.verdict == "pass" else "timing",
            error_type=self.error_type,
            metrics=Metrics(geomean_us=12.5 * self.calls),
            device=H200,
        )


def test_identical_candidate_is_evaluated_once(tmp_path: Path, task: Task) -> None:
    cache = ValidationCache(tmp_path / "cache.sqlite")
    evaluate = CountingEvaluator()
    first, hit1 = cached_evaluate(cache, evaluate, identity="abc", task=task, device_info=H200)
    second, hit2 = cached_evaluate(cache, evaluate, identity="abc", task=task, device_info=H200)
    assert (hit1, hit2, evaluate.calls) == (False, True, 1)
    assert second == first and second["metrics"]["geomean_us"] == 12.5
    assert cache.stats()["hits"] == 1 and cache.stats()["misses"] == 1 and cache.stats()["entries"] == 1

    # Another process (a new object on the same file) sees it too.
    again, hit = cached_evaluate(
        ValidationCache(tmp_path / "cache.sqlite"), evaluate, identity="abc", task=task, device_info=H200
    )
    assert hit and again == first and evaluate.calls == 1


@pytest.mark.parametrize(
    "changed",
    [
        {"triton": "3.7.0"},
        {"torch": "2.12.0"},
        {"name": "NVIDIA H100 80GB HBM3"},
        {"interpreted": True},
    ],
)
def test_a_version_or_device_change_misses(tmp_path: Path, task: Task, changed: dict) -> None:
    cache = ValidationCache(tmp_path / "cache.sqlite")
    evaluate = CountingEvaluator()
    cached_evaluate(cache, evaluate, identity="abc", task=task, device_info=H200)
    other = H200.model_copy(update=changed)
    assert cache.get("abc", task, other) is None
    _, hit = cached_evaluate(cache, evaluate, identity="abc", task=task, device_info=other)
    assert not hit and evaluate.calls == 2
    assert cache.get("abc", task, H200) is not None


def test_a_result_timed_another_way_misses(tmp_path: Path, task: Task, monkeypatch) -> None:
    """Times taken after do_bench's zeroing flush are up to ~12% slower than tools.timing's: never mixed."""
    import tools.timing

    cache = ValidationCache(tmp_path / "cache.sqlite")
    cache.put("abc", task, H200, CountingEvaluator()())
    assert cache.get("abc", task, H200) is not None
    monkeypatch.setattr(tools.timing, "TIMING_METHOD", "do_bench: zero_ flush")
    assert cache.get("abc", task, H200) is None


def test_a_task_change_misses(tmp_path: Path, task: Task) -> None:
    cache = ValidationCache(tmp_path / "cache.sqlite")
    cache.put("abc", task, H200, CountingEvaluator()())
    assert cache.get("abc", task, H200) is not None
    assert cache.get("abd", task, H200) is None
    task.spec.shapes.append({"N": 4097})
    assert cache.get("abc", task, H200) is None
    task.spec.shapes.pop()
    task.path("reference.py").write_text(task.path("reference.py").read_text() + "# edited\n")
    assert cache.get("abc", task, H200) is None


def test_transient_failures_are_not_cached(tmp_path: Path, task: Task) -> None:
    cache = ValidationCache(tmp_path / "cache.sqlite")
    flaky = CountingEvaluator(verdict="fail", error_type="timeout")
    cached_evaluate(cache, flaky, identity="abc", task=task, device_info=H200)
    cached_evaluate(cache, flaky, identity="abc", task=task, device_info=H200)
    assert flaky.calls == 2 and len(cache) == 0
    wrong = CountingEvaluator(verdict="fail", error_type="mismatch")
    cached_evaluate(cache, wrong, identity="def", task=task, device_info=H200)
    result, hit = cached_evaluate(cache, wrong, identity="def", task=task, device_info=H200)
    assert hit and wrong.calls == 1 and result["error_type"] == "mismatch"


def test_memory_off_always_evaluates(task: Task) -> None:
    evaluate = CountingEvaluator()
    for _ in range(2):
        _, hit = cached_evaluate(None, evaluate, identity="abc", task=task, device_info=H200)
        assert not hit
    assert evaluate.calls == 2


def test_current_device_info_on_cpu() -> None:
    info = current_device_info("cpu")
    assert info["name"] == "cpu" and info["interpreted"] is True
    assert info["triton"] and info["torch"]


def stored(worker: int, i: int) -> dict:
    return {"verdict": "pass", "stage": "done", "worker": worker, "i": i}


def _writer(path: str, worker: int, n: int) -> None:
    cache = ValidationCache(path)
    task = {"name": "double", "shapes": [{"N": 1024}]}
    for i in range(n):
        cache.put(f"w{worker}-{i}", task, H200, stored(worker, i))
        cache.put("shared", task, H200, {"verdict": "pass", "stage": "done", "worker": worker})
        assert cache.get(f"w{worker}-{i}", task, H200)["i"] == i


def test_several_processes_write_concurrently(tmp_path: Path) -> None:
    path = str(tmp_path / "cache.sqlite")
    workers, per_worker = 4, 40
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_writer, args=(path, w, per_worker)) for w in range(workers)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(timeout=120)
    assert [p.exitcode for p in processes] == [0] * workers
    cache = ValidationCache(path)
    assert len(cache) == workers * per_worker + 1
    task = {"name": "double", "shapes": [{"N": 1024}]}
    for w in range(workers):
        for i in range(per_worker):
            assert cache.get(f"w{w}-{i}", task, H200) == stored(w, i)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_pass_judged_under_a_higher_hold_threshold_is_not_served_to_a_stricter_run(task: Task) -> None:
    """A pass stored by a run that held only speedups above 60x must not reach a run holding above 10x:
    that run's evaluator would hold it, so the cache sends it back to the evaluator."""
    from nodes.case_memory import RunCache
    from tools.candidate import Candidate
    from tools.results import ShapeTiming

    def timed(us: float) -> EvalResult:
        row = ShapeTiming(shape={"N": 1024}, dtype="float32", median_us=us, min_us=us, spread=1.0)
        return EvalResult(verdict="pass", stage="done", metrics=Metrics(per_shape=[row], geomean_us=us),
                          device=H200)  # fmt: skip

    baseline, fast = timed(1000.0), timed(40.0)  # 25x the baseline
    cand = Candidate(source="def launch(x, **config):\n    return x * 2\n", config={"BLOCK": 128})
    lenient = RunCache(task, H200.model_dump(), baseline, suspicious_speedup=60)
    lenient.put(cand, fast)
    assert lenient.get(cand) is not None and lenient.get(cand).passed
    strict = RunCache(task, H200.model_dump(), baseline, suspicious_speedup=10)
    assert strict.get(cand) is None
    unrelated = RunCache(task, H200.model_dump(), timed(100.0), suspicious_speedup=10)  # 2.5x: served
    assert unrelated.get(cand) is not None
