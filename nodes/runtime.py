"""What every node needs besides the state: the runtime context, the task as the run sees it, the agents.

``RunContext`` holds process-local services (never checkpointed). Locally it may be None; then the
agents are built from the model SPECs in the state, the real evaluator is used and the run folder is
the state's ``run_dir``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from loop.roles import Critic, Diagnoser, Proposer
from loop.settings import Settings
from loop.state import RunState
from tools.evaluate import EvalSettings
from tools.run_folder import RunFolder
from tools.task import Task, load_task

Agents = tuple[Diagnoser, Proposer, Critic]


@dataclass
class RunContext:
    """Services for one process; the graph state never holds them."""

    agents: Any = None
    """Prebuilt (Diagnoser, Proposer, Critic); None builds them from the state's model SPECs."""
    evaluator: Any = None
    """Callable like tools.evaluate.evaluate_many(task, candidates, *, device, baseline, on_result,
    settings); None uses tools.evaluate.evaluate_many."""
    run_dir: str | None = None
    """Where this process finds the run folder (the CLI passes the folder it opened, so a folder that
    was moved resumes where it is now); None: the state's ``run_dir``."""
    cluster: str | None = None
    """Where candidates are evaluated: None this machine's judge, "local:N" or "tcp://HOST:PORT" a Dask
    cluster (chosen per process, so a run stopped by a lost cluster resumes on another or locally)."""
    unattended: bool = False
    """Never ask: the unattended policy (loop/unattended.py) answers every pause."""


def context_of(runtime: Runtime[RunContext] | None) -> RunContext:
    ctx = getattr(runtime, "context", None)
    return ctx if isinstance(ctx, RunContext) else RunContext()


def folder_of(state: RunState, context: RunContext) -> RunFolder:
    root = context.run_dir or state.run_dir
    if not root:
        raise ValueError("the run folder is unknown: pass RunContext(run_dir=...) (graph.run does)")
    return RunFolder(root)


# -- the task --------------------------------------------------------------------------------------
@lru_cache(maxsize=8)
def _load(path: str) -> Task:
    return load_task(path)


def task_path(state: RunState, root: str | Path | None = None) -> str:
    """The task's folder: a path relative to the run folder is a task the run made for itself (a
    problem file imported, a first kernel added), found wherever the folder is now."""
    if Path(state.task).is_absolute():
        return state.task
    return str(Path(root or state.run_dir) / state.task)


def run_task(state: RunState, root: str | Path | None = None) -> Task:
    """The task with the run's current search spaces and forbidden constructs (the human may change them)."""
    loaded = _load(task_path(state, root))
    task = Task(loaded.spec.model_copy(deep=True), loaded.folder)
    task.search_spaces = {m: dict(state.search_spaces[m]) for m in loaded.search_spaces}
    for name, extra in state.extra_modules.items():
        task.search_spaces[name] = dict(state.search_spaces[extra.space_of])
    task.spec.constraints.forbid = list(state.forbid)
    return task


def module_source(task: Task, state: RunState, folder: RunFolder, module: str) -> str:
    """A module's source: a task module's file, or a new-source module's candidate in the run folder."""
    extra = state.extra_modules.get(module)
    return folder.path(extra.path).read_text() if extra else task.source(module)


def searchable_modules(task: Task, state: RunState) -> list[str]:
    """Task modules plus new-source modules that passed (they become variants)."""
    extras = [name for name, e in state.extra_modules.items() if e.passed]
    return [*task.module_names, *extras]


def space_module(state: RunState, module: str) -> str:
    """Which task module's search space a module's configs live in."""
    extra = state.extra_modules.get(module)
    return extra.space_of if extra else module


# -- the agents and the evaluator ------------------------------------------------------------------
@lru_cache(maxsize=4)
def _build(model: str, critic_model: str | None, settings_json: str) -> Agents:
    from nodes.agents import build_agents

    return build_agents(model, critic_model, json.loads(settings_json))


def agents_for(state: RunState, context: RunContext) -> Agents:
    if context.agents is not None:
        return context.agents
    settings = json.dumps(state.settings.model_dump(mode="json"), sort_keys=True)
    return _build(state.model or "expert", state.critic_model, settings)


def eval_settings(task: Task, settings: Settings, context: RunContext | None = None) -> EvalSettings:
    """The evaluator's settings for this run: the task's own, then the run's merged `evaluator` section,
    and where this process evaluates (``context.cluster``)."""
    chosen = EvalSettings.for_task(task, **settings.evaluator.model_dump())
    chosen.cluster = context.cluster if context is not None else None
    return chosen


def evaluator_for(context: RunContext) -> Callable[..., list]:
    if context.evaluator is not None:
        return context.evaluator
    from tools.evaluate import evaluate_many

    return evaluate_many
