"""setup: load the task, merge the settings, evaluate the baseline, open the run folder."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

from langgraph.config import get_stream_writer
from langgraph.runtime import Runtime

from graph.routing import decision, fresh_streaks
from graph.settings import load_settings
from nodes.audit import audit
from nodes.records import attempt_record, default_run_dir, load_result, save_result, write_candidate
from nodes.runtime import RunContext, evaluator_for
from tools.candidate import Candidate
from tools.evaluate import resolve_device
from tools.task import TaskError, load_task

MEMORY_OFF = {"enabled": False, "reason": "the case library is not wired into the graph yet"}


def setup(state: dict[str, Any], runtime: Runtime[RunContext]) -> dict[str, Any]:
    started, started_at = time.monotonic(), time.time()
    if not state.get("task"):
        raise TaskError("task: no task given (a task folder or its task.json)")
    task = load_task(state["task"])
    device = resolve_device(state.get("device") or "auto")
    settings = load_settings(task, state.get("overrides"))
    run_dir = Path(state.get("run_dir") or default_run_dir(task.name)).resolve()
    for sub in ("candidates", "results"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)

    config = task.default_config()
    problems = task.config_problems(config)
    if problems:
        raise TaskError(f"settings.baseline_config: {'; '.join(problems)}")
    baseline = Candidate(
        source=task.baseline_source,
        config=config,
        origin="baseline",
        module=task.baseline_name,
        rationale="the task's baseline",
    )
    write_candidate(run_dir, baseline)
    result = load_result(run_dir, baseline.identity)
    if result is None:
        get_stream_writer()({"event": "baseline", "status": "evaluating", "device": device})
        result = evaluator_for(runtime)(task, [baseline], device=device)[0]
        save_result(run_dir, baseline.identity, result)
    if not result.passed:
        raise TaskError(
            f"baseline: {task.baseline_name} {config} fails evaluation on {device} "
            f"({result.stage}/{result.error_type}): {result.message}"
        )
    record = attempt_record(0, 0, baseline, task.baseline_name, result, run_dir)
    note = " (Triton interpreter: ranks only, no speed claim)" if result.device.interpreted else ""
    audit(
        run_dir,
        "setup",
        f"baseline {task.baseline_name} {config}: {result.metrics.geomean_us:.2f} us geomean{note}",
        round=0,
    )
    get_stream_writer()(
        {
            "event": "baseline",
            "status": "done",
            "geomean_us": record["geomean_us"],
            "budget": settings["budget"],
            "device": device,
        }
    )
    return {
        "task": str(Path(state["task"]).resolve()),
        "task_name": task.name,
        "device": device,
        "model": state.get("model") or "expert",
        "critic_model": state.get("critic_model"),
        "seed": state.get("seed", 0),
        "run_dir": str(run_dir),
        "settings": settings,
        "started_at": started_at,
        "search_spaces": copy.deepcopy(task.search_spaces),
        "forbid": list(task.spec.constraints.forbid),
        "extra_modules": {},
        "baseline": record,
        "best": record,
        "attempts": [record],
        "round": 1,
        "rounds_done": 0,
        "progress": [
            {
                "round": 0,
                "best_us": record["geomean_us"],
                "round_best_us": record["geomean_us"],
                "evaluated": 1,
                "passed": 1,
            }
        ],
        "streaks": fresh_streaks(),
        "snapshot": None,
        "snapshot_of": "",
        "diagnosis": None,
        "proposals": [],
        "critic_round": 0,
        "reflection": "",
        "last_failure": None,
        "route": decision("setup", "diagnose", "baseline evaluated"),
        "human": None,
        "stop": None,
        "retrieved_cases": [],
        "memory": dict(MEMORY_OFF),
        "profiler": {},
        "active_s": time.monotonic() - started,
    }
