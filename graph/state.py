"""The graph's state: JSON-plain (dicts, lists, numbers, strings) so a checkpoint reloads anywhere.

Lists that accumulate over the run use an ``operator.add`` reducer; a node that must clear one
returns ``langgraph.types.Overwrite([])``. Records kept in the state (attempts, proposals, the best)
are plain dicts whose shape is documented on the field.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict


class RunInput(TypedDict, total=False):
    """What a caller (the CLI, Studio) provides to start a run."""

    task: str
    """Task folder or its task.json (DESIGN.md section 1)."""
    device: str
    """"auto" | "cpu" | "cuda"; resolved by setup."""
    model: str
    """SPEC of the diagnoser and proposer: "expert" (default) or a chat model SPEC."""
    critic_model: str | None
    """SPEC of the critic; None uses ``model``."""
    seed: int
    """Seed of every random choice in the run (the search is deterministic under it)."""
    overrides: dict[str, Any]
    """Settings overrides, same keys as configs/default.yaml (the command line's --rounds/--set)."""
    run_dir: str
    """Run folder; setup creates runs/<task>-<time> when absent."""


class RunState(RunInput, total=False):
    """Everything the nodes share. Set by ``setup`` unless the field says otherwise."""

    # -- the run ------------------------------------------------------------------------------
    task_name: str
    """The task's name, for logs and the report."""
    settings: dict[str, Any]
    """Merged, validated settings (graph/settings.py): budget, critic_rounds, routing, search,
    device_limits."""
    started_at: float
    """Unix time setup started."""
    active_s: Annotated[float, operator.add]
    """Seconds spent inside nodes (the minutes budget counts these, not time paused for a human)."""

    # -- the search space as it stands (the human may widen or constrain it) ------------------
    search_spaces: dict[str, dict[str, list]]
    """module file -> {key: allowed values}; starts as the task's, changed only by the human."""
    forbid: list[str]
    """Forbidden constructs: the task's constraints.forbid plus any the human added."""
    extra_modules: dict[str, dict[str, Any]]
    """New-source modules (human or LLM): name -> {path, space_of, passed}. Passed ones join the search."""

    # -- results ------------------------------------------------------------------------------
    baseline: dict[str, Any]
    """The baseline's attempt record (same shape as an entry of ``attempts``)."""
    best: dict[str, Any]
    """The best passing attempt so far (starts as the baseline)."""
    attempts: Annotated[list[dict[str, Any]], operator.add]
    """Every evaluated candidate, oldest first: {n, round, identity, module, space_module, config, origin,
    parent, rationale, expected_effect, objections, answers, verdict, stage, error_type, message,
    geomean_us, per_shape, resources, roofline_pct, candidate, result}. The full log stays in ``result``."""
    held_reviewed: list[int]
    """Attempt numbers of candidates held for review (suspicious speedups) that a human has been shown."""
    approved: list[int]
    """Attempt numbers of held candidates a human approved: they count as results (the best may be one)."""
    round: int
    """The round being prepared or evaluated (1-based; the baseline is round 0)."""
    rounds_done: int
    """Rounds whose candidates have been evaluated."""
    progress: Annotated[list[dict[str, Any]], operator.add]
    """One entry per evaluated round: {round, best_us, round_best_us, table_us, evaluated, passed}
    (progress.png); table_us: each shape's fastest time so far, as a geomean (graph.routing.table_geomean).
    The setup entry (round 0) also has active_s, the run's active seconds once the baseline was timed:
    the minutes budget projects the next round from it (graph.routing.mean_round_s)."""
    streaks: dict[str, Any]
    """Escalation counters (graph/routing.py): compile_failures, same_error {error_type, count},
    failed_validations, no_improvement."""

    # -- the current round ---------------------------------------------------------------------
    snapshot: dict[str, Any] | None
    """Profile snapshot of the best (DESIGN.md section 4), ncu or derived."""
    snapshot_of: str
    """Identity of the attempt the snapshot describes (re-profiled only when the best changes)."""
    profiler: dict[str, Any]
    """{"ncu_unavailable": reason} once ncu could not profile (reported once; later rounds use derived
    snapshots)."""
    diagnosis: dict[str, Any] | None
    """The diagnoser's last Diagnosis (nodes/roles.py) as a dict."""
    proposals: list[dict[str, Any]]
    """This round's proposals under review: {proposal, status pending|approved|revise|rejected,
    objections, answers, critic_round}. Replaced (not appended) by propose and human."""
    rejected: Annotated[list[dict[str, Any]], operator.add]
    """Proposals the critic rejected (or the proposer withdrew), with the objections: never evaluated."""
    critic_round: int
    """How many times the critic has sent this round's batch back to the proposer."""
    reflection: str
    """Material for the next proposal after a reflect step (failing code vs the baseline); "" when none."""
    last_failure: dict[str, Any] | None
    """The latest failed attempt with its full log (read by the proposer in fix mode)."""
    route: dict[str, Any]
    """The last routing decision: {source, to, mode, reason}; ``mode`` tells propose how it was entered."""

    # -- the human and the end ------------------------------------------------------------------
    human: dict[str, Any] | None
    """The last human answer, parsed: {action, ...}."""
    stop: dict[str, Any] | None
    """Why the run ends: {status target_met|budget_exhausted|stopped_by_human|converged, reason}."""

    # -- memory ---------------------------------------------------------------------------------
    retrieved_cases: list[dict[str, Any]]
    """Cases retrieved from the case library for the current diagnosis (empty while memory is off)."""
    memory: dict[str, Any]
    """{enabled, reason, cases at start, cases_added, cache status}: whether the case library was used, and why not."""
