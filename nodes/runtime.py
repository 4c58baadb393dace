"""What every node needs besides the state: the runtime context, the task as the run sees it, the agents.

``RunContext`` holds process-local services (never checkpointed). Locally it may be None; then the
agents are built from the model SPECs in the state and the real evaluator is used.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from nodes.audit import audit
from nodes.roles import AgentContext, Critic, Diagnoser, Proposer
from tools.evaluate import EvalSettings
from tools.task import Task, load_task
from tools.watchdog import recheck_new_best

Agents = tuple[Diagnoser, Proposer, Critic]


@dataclass
class RunContext:
    """Services for one process; the graph state never holds them."""

    agents: Any = None
    """Prebuilt (Diagnoser, Proposer, Critic); None builds them from the state's model SPECs."""
    evaluator: Any = None
    """Callable like tools.evaluate.evaluate_many(task, candidates, *, device, baseline, on_result,
    settings); None uses tools.evaluate.evaluate_many."""


def context_of(runtime: Runtime[RunContext] | None) -> RunContext:
    ctx = getattr(runtime, "context", None)
    return ctx if isinstance(ctx, RunContext) else RunContext()


# -- the task --------------------------------------------------------------------------------------
@lru_cache(maxsize=8)
def _load(path: str) -> Task:
    return load_task(path)


def run_task(state: dict[str, Any]) -> Task:
    """The task with the run's current search spaces and forbidden constructs (the human may change them)."""
    loaded = _load(state["task"])
    task = Task(loaded.spec.model_copy(deep=True), loaded.folder)
    if "search_spaces" in state:
        task.search_spaces = {m: dict(state["search_spaces"][m]) for m in loaded.search_spaces}
        for name, extra in state.get("extra_modules", {}).items():
            task.search_spaces[name] = dict(state["search_spaces"][extra["space_of"]])
    if "forbid" in state:
        task.spec.constraints.forbid = list(state["forbid"])
    return task


def module_source(task: Task, state: dict[str, Any], module: str) -> str:
    extra = state.get("extra_modules", {}).get(module)
    return Path(extra["path"]).read_text() if extra else task.source(module)


def searchable_modules(task: Task, state: dict[str, Any]) -> list[str]:
    """Task modules plus new-source modules that passed (they become variants)."""
    extras = [name for name, e in state.get("extra_modules", {}).items() if e.get("passed")]
    return [*task.module_names, *extras]


def space_module(state: dict[str, Any], module: str) -> str:
    """Which task module's search space a module's configs live in."""
    extra = state.get("extra_modules", {}).get(module)
    return extra["space_of"] if extra else module


# -- the agents ------------------------------------------------------------------------------------
@lru_cache(maxsize=4)
def _build(model: str, critic_model: str | None, settings_json: str) -> Agents:
    from nodes.agents import build_agents

    return build_agents(model, critic_model, json.loads(settings_json))


def agents_for(state: dict[str, Any], runtime: Runtime[RunContext] | None) -> Agents:
    prebuilt = context_of(runtime).agents
    if prebuilt is not None:
        return prebuilt
    settings = json.dumps(state["settings"], sort_keys=True)
    return _build(state.get("model") or "expert", state.get("critic_model"), settings)


def eval_settings(task: Task, settings: dict[str, Any]) -> EvalSettings:
    """The evaluator's settings for this run: the task's own, then the run's merged `evaluator` section."""
    return EvalSettings.for_task(task, **settings.get("evaluator", {}))


def watchdog_accepts(
    task: Task, state: dict[str, Any], new: dict[str, Any], previous: dict[str, Any], node: str
) -> bool:
    """The watchdog's word on a new best (GPU only): ``new`` is re-timed against ``previous`` in one
    process, and a regression beyond ``watchdog.max_regression`` at any shape keeps ``previous``. The
    comparison goes into the audit trail under ``node``."""
    settings = state["settings"]
    max_regression = settings.get("watchdog", {}).get("max_regression", 0.03)
    verdict = recheck_new_best(
        task, state["device"], state["run_dir"], new, previous, max_regression, eval_settings(task, settings)
    )
    if verdict.compared:
        audit(state["run_dir"], node, f"watchdog: {verdict.reason}", round=state.get("round", 0))
    return verdict.accepted


def evaluator_for(runtime: Runtime[RunContext] | None) -> Callable[..., list]:
    chosen = context_of(runtime).evaluator
    if chosen is not None:
        return chosen
    from tools.evaluate import evaluate_many

    return evaluate_many


# -- what the roles read ---------------------------------------------------------------------------
# What each past attempt shows the roles (the full logs stay in results/).
HISTORY_KEYS = (
    "n", "round", "identity", "module", "config", "origin", "parent", "rationale", "expected_effect",
    "verdict", "stage", "error_type", "message", "geomean_us", "per_shape", "resources", "roofline_pct",
    "interpreted",
)  # fmt: skip


def agent_context(state: dict[str, Any], task: Task, mode: str = "explore", **extra: Any) -> AgentContext:
    """The roles' view of the run (they never see the state itself)."""
    modules = searchable_modules(task, state)
    spaces = state.get("search_spaces") or task.search_spaces
    history = [{k: a.get(k) for k in HISTORY_KEYS} for a in state.get("attempts", [])]
    evaluated = [a["identity"] for a in state.get("attempts", [])]
    approved = [
        p["identity"] for p in state.get("proposals", []) if p["status"] == "approved" and p.get("identity")
    ]
    settings = state["settings"]
    fields: dict[str, Any] = {
        "task_name": task.name,
        "description": task.spec.description,
        "constraints": {
            "forbid": list(state.get("forbid", task.spec.constraints.forbid)),
            "notes": task.spec.constraints.notes,
        },
        "search_spaces": {m: spaces[space_module(state, m)] for m in modules},
        "baseline_module": task.baseline_name,
        "baseline_source": task.baseline_source,
        "module_sources": {m: module_source(task, state, m) for m in modules},
        "best": state.get("best"),
        "snapshot": state.get("snapshot"),
        "diagnosis": state.get("diagnosis"),
        "history": history,
        "evaluated": evaluated + approved,
        "mode": mode,
        "last_failure": state.get("last_failure"),
        "retrieved_cases": state.get("retrieved_cases", []),
        "n_candidates": settings["budget"]["candidates_per_round"],
        "round": state.get("round", 0),
        "seed": state.get("seed", 0),
        "device_limits": settings["device_limits"],
        "reflection": state.get("reflection", ""),
        "shapes": [shape for shape, _ in task.workload(state.get("device", "cpu"))],
        "target": task.spec.target.model_dump(),
    }
    fields.update(extra)
    return AgentContext.model_validate(fields)
