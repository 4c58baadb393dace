"""Check workers forked from the zygote: fast to start, as isolated as a fresh interpreter, and a
zygote that dies is replaced without losing a candidate."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tools.candidate import Candidate
from tools.evaluate import EvalSettings, Evaluator
from tools.task import load_task

TASK = Path(__file__).parent / "fixtures" / "tasks" / "axpy"
GOOD = Path(__file__).parent / "fixtures" / "candidates" / "good.py"


def _cand(block: int) -> Candidate:
    return Candidate(source=GOOD.read_text(), config={"BLOCK": block, "num_warps": 4})


def test_forked_workers_start_in_under_a_second_each_in_its_own_scratch(tmp_path):
    task = load_task(TASK)
    with Evaluator(task, "cpu", EvalSettings(parallel=2, workdir=str(tmp_path))) as evaluator:
        evaluator.evaluate_many([_cand(128)])  # the zygote's own imports are paid here at the latest
        results = evaluator.evaluate_many([_cand(64), _cand(256)])
        zygote_pid = evaluator.judge.last_done["zygote_pid"]
    assert all(r.passed for r in results), [r.message for r in results]
    assert all(r.stage_seconds["startup"] < 1.0 for r in results), [r.stage_seconds for r in results]
    logs = sorted(tmp_path.glob("*/worker.log"))
    assert len(logs) == 3  # one scratch folder (with its own log) per candidate
    assert all((log.parent / "triton_cache").is_dir() for log in logs)
    # the evaluator closed: the zygote is gone
    assert not Path(f"/proc/{zygote_pid}").exists() or _zombie(zygote_pid)


def test_a_result_says_where_its_seconds_went_command_by_command_and_in_the_workers_cpu(tmp_path):
    """What a slow batch is read from: each stage's waits per worker command (``correctness_call`` ...),
    and the CPU seconds the candidate's worker used (read by the judge from /proc, not reported by it)."""
    task = load_task(TASK)
    with Evaluator(task, "cpu", EvalSettings(parallel=1, workdir=str(tmp_path))) as evaluator:
        result = evaluator.evaluate(_cand(128))
    seconds = result.stage_seconds
    assert result.passed, result.message
    assert seconds["startup_hello"] > 0 and seconds["compile_call"] > 0
    assert {"startup_spawn", "startup_connect", "startup_arena"} <= seconds.keys()
    assert seconds["startup_spawn"] + seconds["startup_connect"] + seconds["startup_arena"] <= seconds["startup"]
    assert 0 < seconds["correctness_call"] <= seconds["correctness_worker"] + 1e-9
    assert 0 < seconds["correctness_launch"] < seconds["correctness_call"]
    assert 0 < seconds["worker_cpu"] < 600

IMPORT_LOGGER = """
import sys
if "tools.zygote" in sys.orig_argv:  # the zygote, and every worker forked from it
    import importlib.abc

    class Logger(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            sys.stderr.write(f"imported: {name}\\n")  # the zygote's log, or a worker's after its fork
            return None

    sys.meta_path.insert(0, Logger())
"""


def test_a_forked_worker_finds_the_guard_s_imports_already_made_and_none_imports_torch_dynamo(tmp_path, monkeypatch):
    """The op guard's first dispatch: the zygote makes it once before it forks, so no worker pays for its
    imports again; and it no longer imports torch._dynamo (hundreds of modules, seconds of each start)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(IMPORT_LOGGER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    work = tmp_path / "work"
    with Evaluator(load_task(TASK), "cpu", EvalSettings(parallel=1, workdir=str(work))) as evaluator:
        result = evaluator.evaluate(_cand(128))
    assert result.passed, result.message
    assert "imported: torch._dynamo" not in (work / "zygote.log").read_text()
    imported = [line for log in work.glob("*/worker.log") for line in log.read_text().splitlines()
                if line.startswith("imported: torch.") or line.startswith("imported: sympy")]  # fmt: skip
    assert imported == []


BROKEN_WARM_UP = """
import sys
if "tools.zygote" in sys.orig_argv:
    import tools.guard

    def warm():
        raise RuntimeError("no warm-up here")

    tools.guard.warm = warm
"""


def test_a_warm_up_step_that_fails_costs_speed_not_candidates(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BROKEN_WARM_UP)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    work = tmp_path / "work"
    with Evaluator(load_task(TASK), "cpu", EvalSettings(parallel=1, workdir=str(work))) as evaluator:
        result = evaluator.evaluate(_cand(128))
    assert result.passed, result.message
    assert "a warm-up step failed" in (work / "zygote.log").read_text()


def test_nothing_planted_in_the_evaluator_folder_is_imported_by_a_worker(tmp_path):
    # a module named like one the worker imports, in the folder the zygote runs in
    (tmp_path / "shlex.py").write_text("raise SystemExit('planted module imported')\n")
    (tmp_path / "getpass.py").write_text("raise SystemExit('planted module imported')\n")
    task = load_task(TASK)
    with Evaluator(task, "cpu", EvalSettings(parallel=1, workdir=str(tmp_path))) as evaluator:
        result = evaluator.evaluate_many([_cand(128)])[0]
    assert result.passed, result.message


def test_a_dead_zygote_is_replaced_and_no_candidate_is_lost(tmp_path):
    task = load_task(TASK)
    with Evaluator(task, "cpu", EvalSettings(parallel=2, workdir=str(tmp_path))) as evaluator:
        evaluator.evaluate_many([_cand(64)])
        first = evaluator.judge.last_done["zygote_pid"]
        os.kill(first, signal.SIGKILL)
        results = evaluator.evaluate_many([_cand(128)])
        second = evaluator.judge.last_done["zygote_pid"]
        assert second != first and Path(f"/proc/{second}").exists() and not _zombie(second)
    assert results[0].passed, results[0].message


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True
