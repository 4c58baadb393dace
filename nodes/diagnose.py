"""diagnose: snapshot the best (ncu on a GPU when it works and a judged shape has room left below its
ceiling, else derived from its EvalResult), then ask the diagnoser what limits it. The snapshot is
re-taken only when the best changed."""

from __future__ import annotations

import math
from typing import Any

from loop.headroom import ShapeStanding, profile_choice, standing_of
from loop.records import Attempt, Decision
from loop.roles import Diagnosis
from loop.scoring import near_ceiling
from loop.state import RunState
from memory.cases import SnapshotSummary
from nodes.case_memory import combined_confidence, library_for_run, recall
from nodes.step import Step, Update, node
from nodes.view import agent_context
from nodes.view import standings as shape_standings_of
from profiles.derived import derived_snapshot
from profiles.render import render_snapshot
from profiles.snapshot import snapshots_from_csv
from profiles.source_summary import summarize_source
from tools.ncu import ncu_available, profile_candidate
from tools.task import Task


@node("diagnose")
def diagnose(state: RunState, step: Step) -> Update:
    best, update = state.best, {}
    if state.snapshot_of == best.identity and state.snapshot:
        snapshot = state.snapshot
    else:
        snapshot, profiler_note = take_snapshot(step, best)
        update |= {"snapshot": snapshot, "snapshot_of": best.identity}
        if profiler_note:
            update["profiler"] = {**state.profiler, "ncu_unavailable": profiler_note}
            step.audit(f"ncu not used: {profiler_note}", key="ncu")
    retrieved, recalled = remembered(step, snapshot)
    ctx = agent_context(state, step.task, step.folder, snapshot=snapshot, retrieved_cases=retrieved)
    if snapshot:
        ctx.snapshot_text = render_snapshot(snapshot)
    ctx.source_summary = summarize_source(step.folder.read(best.candidate) or step.task.baseline_source)
    own = step.agents[0].diagnose(ctx)
    diagnosis = with_memory(own, retrieved, recalled)
    # The snapshot summary and the diagnoser's own verdict ride along in the trail: report turns each
    # round's attempts into cases that remember what they started from.
    summary = SnapshotSummary.from_snapshot(snapshot).model_dump()
    step.audit(f"#{best.n}: {diagnosis.summary}", diagnosis=own.summary, snapshot=summary)
    step.emit("diagnosis", round=state.round, summary=diagnosis.summary)
    return {
        **update,
        "diagnosis": diagnosis,
        "retrieved_cases": retrieved,
        "proposals": [],
        "critic_round": 0,
        "route": Decision(source="diagnose", to="propose", reason=diagnosis.summary),
    }


def remembered(step: Step, snapshot: dict[str, Any] | None) -> tuple[list[dict[str, Any]], float | None]:
    """(cases similar to this task at this bottleneck, best score); ([], None) while memory is off."""
    library, why = library_for_run(step.run)
    if library is None:
        if step.run.memory.get("enabled"):
            step.audit(f"case library not read: {why}", key="memory")
        return [], None
    bottleneck = (snapshot or {}).get("bottleneck")
    try:
        return recall(library, step.task, bottleneck, step.run.baseline.interpreted)
    except Exception as exc:  # a broken store costs this round its memory, never the run
        step.audit(f"case library not read: {type(exc).__name__}: {exc}", key="memory")
        return [], None


def with_memory(diagnosis: Diagnosis, retrieved: list[dict[str, Any]], recalled: float | None) -> Diagnosis:
    """The diagnosis with the best case score folded into its confidence (see combined_confidence)."""
    if not retrieved or recalled is None:
        return diagnosis
    confidence = combined_confidence(diagnosis.confidence, recalled)
    best = max(retrieved, key=lambda c: c["score"])
    starts = sum(c["role"] == "start" for c in retrieved)
    avoid = sum(c["role"] == "avoid" for c in retrieved)
    counts = f"{len(retrieved)} similar case(s), {starts} to start from, {avoid} to avoid"
    evidence = f"memory: {counts}; best score {recalled:.2f}: {best['summary']}"
    summary = (
        f"{diagnosis.summary} | memory: {counts}, best score {recalled:.2f}; "
        f"confidence {diagnosis.confidence:.2f} -> {confidence:.2f}"
    )
    return diagnosis.model_copy(
        update={"confidence": confidence, "evidence": [*diagnosis.evidence, evidence], "summary": summary}
    )


def largest_workload(task: Task, device: str) -> tuple[dict[str, int], str]:
    return max(task.workload(device), key=lambda sd: math.prod(sd[0].values()))


def profiled_shapes(
    task: Task, device: str, standings: list[ShapeStanding]
) -> list[tuple[dict[str, int], str]]:
    """The shapes to profile (loop.headroom.profile_choice): first the one furthest from its ceiling,
    weighted by its share of the geomean (gqa_decode at B=1 is starved of programs; scale_shift at
    M=1 is at its ceiling and M=2048 is not), then the largest judged shape. Interpreter times carry
    no ceiling, so a CPU run profiles the largest shape."""
    choice = profile_choice(standings)
    if not choice:
        return [largest_workload(task, device)]
    return [(dict(s.shape), s.dtype or task.dtypes[0]) for s in choice]


def take_snapshot(step: Step, best: Attempt) -> tuple[dict[str, Any] | None, str]:
    """(snapshot of the best at the first profiled shape, the others under ``others``; why ncu was not
    used or ""). Each snapshot names its ``shape``, ``dtype`` and ``standing`` against its ceiling."""
    state, settings = step.run, step.run.settings
    result = step.folder.load_result(best.identity)
    standings = shape_standings_of(state, step.task)
    ncu = state.device == "cuda" and settings.profiler.ncu and not state.profiler.get("ncu_unavailable")
    near = settings.search.near_roofline_pct
    if ncu and near_ceiling(best.per_shape, step.task.spec.target.min_dims, near):  # half a minute for nothing
        ncu = False
        step.audit(f"ncu skipped: every judged shape at >= {near:g}% of its "
                   "ceiling; the snapshot is derived from the timings", key="ncu-skipped")  # fmt: skip
    snaps, note = [], ""
    for shape, dtype in profiled_shapes(step.task, state.device, standings):
        snap = None
        if ncu and not note:
            snap, note = _ncu_snapshot(step, best, shape, dtype)
        if snap is None and result is not None:
            snap = derived_snapshot(result.model_dump(), shape, sm_count=settings.device_limits.sm_count)
        if snap is not None:
            standing = standing_of(standings, shape, dtype)
            snaps.append(
                {**snap, "shape": shape, "dtype": dtype, "standing": standing and standing.model_dump()}
            )
    if not snaps:
        return None, note
    primary, *others = snaps
    return ({**primary, "others": others} if others else primary), note


def _ncu_snapshot(
    step: Step, best: Attempt, shape: dict[str, int], dtype: str
) -> tuple[dict[str, Any] | None, str]:
    reason = ncu_available()
    if reason:
        return None, reason
    out_csv = step.folder.profile_file(best.identity, shape, dtype)  # one profile per shape
    try:
        if not out_csv.exists():  # this node may run again after a kill: keep a finished profile
            profile_candidate(
                step.task.folder,
                step.folder.path(best.candidate),
                best.config,
                shape,
                dtype,
                out_csv,
                timeout_s=step.run.settings.profiler.timeout_s,
            )
        snaps = snapshots_from_csv(out_csv)
    except Exception as exc:  # ncu failing is reported once; the run goes on with derived snapshots
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if not snaps:
        return None, "ncu profiled no launch of the candidate's kernels"
    # With several kernels per launch (split + combine), the longest one carries the work.
    return max(snaps, key=lambda s: s.get("duration_us") or 0.0), ""
