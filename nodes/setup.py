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
from nodes.case_memory import open_library, validation_cache_status
from nodes.records import attempt_record, default_run_dir, load_result, save_result, write_candidate
from nodes.runtime import RunContext, eval_settings, evaluator_for
from tools.candidate import Candidate
from tools.evaluate import resolve_device
from tools.task import TaskError, load_task


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
        result = evaluator_for(runtime)(
            task, [baseline], device=device, settings=eval_settings(task, settings)
        )[0]
        save_result(run_dir, baseline.identity, result)
    if not result.passed:
        raise TaskError(
            f"baseline: {task.baseline_name} {config} fails evaluation on {device} "
            f"({result.stage}/{result.error_type}): {result.message}"
        )
    record = attempt_record(
        0, 0, baseline, task.baseline_name, result, run_dir, min_dims=task.spec.target.min_dims
    )
    memory = memory_status(settings, result, run_dir)
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
    elapsed = time.monotonic() - started
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
                "table_us": record["geomean_us"],
                "evaluated": 1,
                "passed": 1,
                "active_s": round(elapsed, 1),
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
        "memory": memory,
        "profiler": {},
        "active_s": elapsed,
    }


def memory_status(settings: dict[str, Any], baseline: Any, run_dir: Path) -> dict[str, Any]:
    """Open the case library once to learn whether memory is on; say so on the terminal and in the trail.

    The library stays out of the state (nodes reopen it, cached per process); the state keeps
    {enabled, reason (why off), store, cases_at_start, validation_cache {enabled, reason, path}}.
    """
    library, why = open_library(settings)
    cache = validation_cache_status(settings, baseline)
    cases = 0
    if library is not None:
        try:
            cases = library.count()
        except Exception as exc:  # a store that opened but cannot be read: memory off, said why
            library, why = None, f"memory off: case store unreadable ({type(exc).__name__}: {exc})"
    memory = {
        "enabled": library is not None,
        "reason": why if library is None else "",
        "store": str(library.path) if library is not None else "",
        "cases_at_start": cases,
        "validation_cache": cache,
    }
    said = f"memory on: case library {memory['store']} ({cases} cases)" if library is not None else why
    cache_note = "on" if cache["enabled"] else f"off ({cache['reason']})"
    message = f"{said}; validation cache {cache_note}"
    audit(run_dir, "setup", message, round=0, key="memory")
    get_stream_writer()({"event": "memory", **memory, "message": message})
    return memory
