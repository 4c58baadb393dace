"""The graph's state, typed; its checkpoints stay plain JSON.

Nodes receive a ``RunState`` (LangGraph validates the checkpointed values into it) and return plain
updates (``plain``), so a checkpoint reloads in any process without pydantic objects in it. Lists
that accumulate over the run use an ``operator.add`` reducer. Paths into the run folder are relative
to it; the folder itself is where the process found it (``RunContext.run_dir``: the CLI's folder, so a
moved or copied folder resumes as itself), or ``run_dir`` for a caller that does not say (Studio).
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from pydantic import BaseModel, Field
from pydantic_core import to_jsonable_python

from loop.records import Attempt, Decision, ExtraModule, Failure, Pause, ProgressEntry, Review, Stop
from loop.roles import Diagnosis
from loop.settings import Settings
from loop.streaks import Streaks


class RunInput(BaseModel):
    """What a caller (the CLI, Studio) provides to start a run."""

    task: str = Field(default="", description="task folder or its task.json")
    device: str = Field(default="auto", description='"auto" | "cpu" | "cuda"; resolved by setup')
    model: str = Field(
        default="expert", description='SPEC of the diagnoser and proposer: "expert" or a chat model SPEC'
    )
    critic_model: str | None = Field(default=None, description="SPEC of the critic; None uses ``model``")
    seed: int = Field(
        default=0, description="seed of every random choice (the search is deterministic under it)"
    )
    overrides: dict[str, Any] = Field(
        default={}, description="settings overrides, keys as in configs/default.yaml (--rounds, --set)"
    )
    run_dir: str = Field(
        default="",
        description="run folder, for a caller that passes none in the RunContext (Studio); setup creates "
        "runs/<task>-<time> when both are empty",
    )


class RunState(RunInput):
    """Everything the nodes share. Set by ``setup`` unless the field says otherwise."""

    # -- the run ------------------------------------------------------------------------------
    task_name: str
    settings: Settings = Field(description="merged, validated settings (loop.settings)")
    started_at: float = Field(description="Unix time setup started")
    active_s: Annotated[float, operator.add] = Field(
        default=0.0,
        description="seconds spent inside nodes (the minutes budget counts these, not human waits)",
    )

    anchors: list[dict[str, Any]] = Field(
        default=[], description="per timed shape, the reference in eager and under a static torch.compile, "
        "timed by the judge on the GPU ({shape, dtype, eager: {median_us}, compile: {median_us}}); empty on a CPU",
    )

    # -- the search space as it stands (the human may widen or constrain it) ------------------
    search_spaces: dict[str, dict[str, list]] = Field(
        description="module file -> {key: allowed values}; the task's, changed only by the human"
    )
    forbid: list[str] = Field(description="forbidden constructs: the task's plus any the human added")
    extra_modules: dict[str, ExtraModule] = Field(
        default={}, description="new-source modules by name; passed ones join the search"
    )

    # -- results ------------------------------------------------------------------------------
    baseline: Attempt
    best: Attempt = Field(description="the best passing attempt so far (starts as the baseline)")
    attempts: Annotated[list[Attempt], operator.add] = Field(
        default=[], description="every evaluated candidate, oldest first"
    )
    held_reviewed: list[int] = Field(
        default=[], description="numbers of held candidates (suspicious speedups) a human has been shown"
    )
    approved: list[int] = Field(
        default=[], description="numbers of held candidates a human approved: they count as results"
    )
    round: int = Field(description="the round being prepared or evaluated (1-based; the baseline's is 0)")
    rounds_done: int = Field(description="rounds whose candidates have been evaluated")
    progress: Annotated[list[ProgressEntry], operator.add] = Field(
        default=[], description="one entry per evaluated round, the baseline's first (progress.png)"
    )
    streaks: Streaks = Field(description="escalation counters (loop.streaks)")

    # -- the current round ---------------------------------------------------------------------
    snapshot: dict[str, Any] | None = Field(description="profile snapshot of the best, ncu or derived")
    snapshot_of: str = Field(description="identity of the attempt the snapshot describes")
    profiler: dict[str, str] = Field(
        default={}, description='{"ncu_unavailable": reason} once ncu could not profile'
    )
    diagnosis: Diagnosis | None = Field(description="the diagnoser's last Diagnosis")
    proposals: list[Review] = Field(
        description="this round's proposals under review (replaced, not appended)"
    )
    rejected: Annotated[list[Review], operator.add] = Field(
        default=[], description="proposals the critic rejected or the proposer withdrew: never evaluated"
    )
    critic_round: int = Field(description="how many times the critic sent this round's batch back")
    reflection: str = Field(description="what the proposer reads in reflect mode; empty when none")
    last_failure: Failure | None = Field(description="the latest failed attempt with its log and source")
    route: Decision = Field(description="the last routing decision")

    # -- the human and the end ------------------------------------------------------------------
    human: dict[str, Any] | None = Field(description="the last human answer, parsed: {action, ...}")
    pauses: Annotated[list[Pause], operator.add] = Field(
        default=[], description="every pause and its answer, the human's or the unattended policy's"
    )
    stop: Stop | None = Field(description="why the run ends")

    # -- memory ---------------------------------------------------------------------------------
    retrieved_cases: list[dict[str, Any]] = Field(
        description="cases recalled for the current diagnosis (empty while memory is off)"
    )
    memory: dict[str, Any] = Field(
        description="{enabled, reason, store, cases_at_start, validation_cache, ...}: whether memory was used"
    )


def plain(update: dict[str, Any]) -> dict[str, Any]:
    """A node's update as checkpoints keep it: models dumped to JSON types, nothing else changed."""
    return {key: to_jsonable_python(value) for key, value in update.items()}
