"""setup: load the task, merge the settings, open the run folder, evaluate the baseline."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from loop.records import Attempt, Decision, ProgressEntry
from loop.settings import Settings, load_settings
from loop.state import RunInput
from loop.streaks import Streaks
from nodes.case_memory import open_library, validation_cache_status
from nodes.records import attempt_record
from nodes.runtime import eval_settings, evaluator_for
from nodes.step import Step, Update, node
from tools.candidate import Candidate
from tools.evaluate import measure_anchors, resolve_device
from tools.first_kernel import with_inductor_baseline
from tools.results import EvalResult
from tools.run_folder import RunFolder
from tools.task import Task, TaskError, load_task

FIRST_KERNEL_TASK = "task"  # in the run folder: a task without a baseline, given torch.compile's kernel


@node("setup")
def setup(state: RunInput, step: Step) -> Update:
    started_at = time.time()
    if not state.task:
        raise TaskError("task: no task given (a task folder or its task.json)")
    task = load_task(state.task)
    device = resolve_device(state.device or "auto")
    root = step.context.run_dir or state.run_dir or RunFolder.default_root(task.name)
    step.folder = RunFolder(Path(root).resolve()).create()
    task_in_run = not task.has_baseline
    if task_in_run:  # the first kernel is torch.compile's own, made a candidate in a copy of the task
        step.emit("baseline", status="first_kernel", device=device)
        task = with_inductor_baseline(task, step.folder.path(FIRST_KERNEL_TASK), device)
        step.audit(f"no baseline kernel: {task.baseline_name} from torch.compile ({'; '.join(task.first_kernel_notes)})")
    settings = load_settings(task, state.overrides)
    result = evaluate_baseline(step, task, device, settings)
    anchors = measure_anchors(task, device, eval_settings(task, settings, step.context)) if step.context.evaluator is None else []
    baseline = attempt_record(
        0, 0, baseline_candidate(task), task.baseline_name, result, min_dims=task.spec.target.min_dims
    )
    memory = memory_status(step, settings, result)
    note = " (Triton interpreter: ranks only, no speed claim)" if result.device.interpreted else ""
    config = baseline.config
    step.audit(f"baseline {task.baseline_name} {config}: {result.metrics.geomean_us:.2f} us geomean{note}")
    step.emit(
        "baseline", status="done", geomean_us=baseline.geomean_us, budget=settings.budget, device=device
    )
    return {
        # a task the run made for itself stays relative to the run folder, which may move
        "task": FIRST_KERNEL_TASK if task_in_run else str(Path(state.task).resolve()),
        "anchors": anchors,
        "device": device,
        "model": state.model or "expert",
        "critic_model": state.critic_model,
        "seed": state.seed,
        # A caller that says where the folder is (the CLI) keeps that out of the state, so a copy of the
        # folder resumes as itself; without one (Studio) the state must name it.
        "run_dir": "" if step.context.run_dir else str(step.folder.root),
        "started_at": started_at,
        **first_state(task, settings, baseline, step.elapsed()),
        "memory": memory,
    }


def baseline_candidate(task: Task) -> Candidate:
    config = task.default_config()
    problems = task.config_problems(config)
    if problems:
        raise TaskError(f"settings.baseline_config: {'; '.join(problems)}")
    return Candidate(
        source=task.baseline_source,
        config=config,
        origin="baseline",
        module=task.baseline_name,
        rationale="the task's baseline",
    )


def evaluate_baseline(step: Step, task: Task, device: str, settings: Settings) -> EvalResult:
    """The baseline's result: read back when a resumed setup finds it, else evaluated; it must pass."""
    baseline = baseline_candidate(task)
    step.folder.write_candidate(baseline)
    result = step.folder.load_result(baseline.identity)
    if result is None:
        step.emit("baseline", status="evaluating", device=device)
        evaluate = evaluator_for(step.context)
        result = evaluate(task, [baseline], device=device, settings=eval_settings(task, settings, step.context))[0]
        step.folder.save_result(baseline.identity, result)
    if not result.passed:
        raise TaskError(
            f"baseline: {task.baseline_name} {baseline.config} fails evaluation on {device} "
            f"({result.stage}/{result.error_type}): {result.message}"
        )
    return result


def first_state(task: Task, settings: Settings, baseline: Attempt, elapsed: float) -> Update:
    """The rest of the state at the start: the baseline is the best, round 1 comes next."""
    us = baseline.geomean_us
    return {
        "task_name": task.name,
        "settings": settings,
        "search_spaces": task.search_spaces,
        "forbid": list(task.spec.constraints.forbid),
        "extra_modules": {},
        "baseline": baseline,
        "best": baseline,
        "attempts": [baseline],
        "round": 1,
        "rounds_done": 0,
        "progress": [
            ProgressEntry(
                round=0,
                best_us=us,
                round_best_us=us,
                table_us=us,
                evaluated=1,
                passed=1,
                active_s=round(elapsed, 1),
            )
        ],
        "streaks": Streaks(),
        "snapshot": None,
        "snapshot_of": "",
        "diagnosis": None,
        "proposals": [],
        "critic_round": 0,
        "reflection": "",
        "last_failure": None,
        "route": Decision(source="setup", to="diagnose", reason="baseline evaluated"),
        "human": None,
        "stop": None,
        "retrieved_cases": [],
        "profiler": {},
    }


def memory_status(step: Step, settings: Settings, baseline: EvalResult) -> dict[str, Any]:
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
    step.audit(message, key="memory")
    step.emit("memory", **memory, message=message)
    return memory
