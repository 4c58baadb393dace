"""The roles' view of the run: the AgentContext built from the state (the roles never see the state)."""

from __future__ import annotations

from typing import Any

from loop.headroom import ShapeStanding, shape_standings
from loop.roles import AgentContext, ProposeMode
from loop.state import RunState
from nodes.runtime import module_source, searchable_modules, space_module
from tools.run_folder import RunFolder
from tools.task import Task

# What each past attempt shows the roles (the full logs stay in results/).
HISTORY_KEYS = {
    "n", "round", "identity", "module", "config", "origin", "parent", "rationale", "expected_effect",
    "verdict", "stage", "error_type", "message", "geomean_us", "per_shape", "resources", "roofline_pct",
    "interpreted",
}  # fmt: skip


def standings(state: RunState, task: Task) -> list[ShapeStanding]:
    """The best's timed shapes against their ceilings, with the run's thresholds."""
    settings = state.settings
    return shape_standings(
        state.best.per_shape,
        settings.search.near_roofline_pct,
        settings.profiler.launch_bound_below_pct,
        task.spec.target.min_dims,
    )


def agent_context(
    state: RunState, task: Task, folder: RunFolder, mode: ProposeMode = "explore", **extra: Any
) -> AgentContext:
    modules = searchable_modules(task, state)
    approved = [p.identity for p in state.proposals if p.status == "approved" and p.identity]
    settings = state.settings
    fields: dict[str, Any] = {
        "task_name": task.name,
        "description": task.spec.description,
        "constraints": {"forbid": list(state.forbid), "notes": task.spec.constraints.notes},
        "search_spaces": {m: state.search_spaces[space_module(state, m)] for m in modules},
        "baseline_module": task.baseline_name,
        "baseline_source": task.baseline_source,
        "module_sources": {m: module_source(task, state, folder, m) for m in modules},
        "best": state.best.model_dump(mode="json"),
        "snapshot": state.snapshot,
        "diagnosis": state.diagnosis,
        "history": [a.model_dump(mode="json", include=HISTORY_KEYS) for a in state.attempts],
        "evaluated": [a.identity for a in state.attempts] + approved,
        "mode": mode,
        "last_failure": state.last_failure.model_dump(mode="json") if state.last_failure else None,
        "retrieved_cases": state.retrieved_cases,
        "n_candidates": settings.budget.candidates_per_round,
        "round": state.round,
        "seed": state.seed,
        "device_limits": settings.device_limits.model_dump(),
        "reflection": state.reflection,
        "shapes": [shape for shape, _ in task.workload(state.device)],
        "target": task.spec.target.model_dump(),
        "standings": [s.model_dump() for s in standings(state, task)],
    }
    fields.update(extra)
    return AgentContext.model_validate(fields)
