"""diagnose: snapshot the best (ncu on a GPU when it works, else derived from its EvalResult), then ask
the diagnoser what limits it. The snapshot is re-taken only when the best changed."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from langgraph.config import get_stream_writer
from langgraph.runtime import Runtime

from graph.routing import decision
from memory.cases import SnapshotSummary
from nodes.audit import audit
from nodes.case_memory import combined_confidence, library_for_run, recall
from nodes.records import load_result
from nodes.roles import Diagnosis
from nodes.runtime import RunContext, agent_context, agents_for, run_task
from profiles.derived import derived_snapshot
from profiles.render import render_snapshot
from profiles.snapshot import snapshots_from_csv
from profiles.source_summary import summarize_source
from tools.ncu import ncu_available, profile_candidate
from tools.task import Task


def diagnose(state: dict[str, Any], runtime: Runtime[RunContext]) -> dict[str, Any]:
    started = time.monotonic()
    task = run_task(state)
    best = state["best"]
    update: dict[str, Any] = {}
    if state.get("snapshot_of") == best["identity"] and state.get("snapshot"):
        snapshot = state["snapshot"]
    else:
        snapshot, profiler_note = take_snapshot(state, task, best)
        update["snapshot"], update["snapshot_of"] = snapshot, best["identity"]
        if profiler_note:
            update["profiler"] = {**state.get("profiler", {}), "ncu_unavailable": profiler_note}
            audit(
                state["run_dir"],
                "diagnose",
                f"ncu not used: {profiler_note}",
                round=state["round"],
                key="ncu",
            )
    diagnoser = agents_for(state, runtime)[0]
    retrieved, recalled = remembered(state, task, snapshot)
    ctx = agent_context({**state, "snapshot": snapshot, "retrieved_cases": retrieved}, task)
    if snapshot:
        ctx.snapshot_text = render_snapshot(snapshot)
    ctx.source_summary = summarize_source(_best_source(state, task))
    own = diagnoser.diagnose(ctx)
    diagnosis = with_memory(own, retrieved, recalled)
    # The snapshot summary and the diagnoser's own verdict ride along in the trail: report turns each
    # round's attempts into cases that remember what they started from.
    audit(
        state["run_dir"],
        "diagnose",
        f"#{best['n']}: {diagnosis.summary}",
        round=state["round"],
        diagnosis=own.summary,
        snapshot=SnapshotSummary.from_snapshot(snapshot).model_dump(),
    )
    get_stream_writer()({"event": "diagnosis", "round": state["round"], "summary": diagnosis.summary})
    return {
        **update,
        "diagnosis": diagnosis.model_dump(),
        "retrieved_cases": retrieved,
        "proposals": [],
        "critic_round": 0,
        "route": decision("diagnose", "propose", diagnosis.summary),
        "active_s": time.monotonic() - started,
    }


def remembered(
    state: dict[str, Any], task: Task, snapshot: dict[str, Any] | None
) -> tuple[list[dict[str, Any]], float | None]:
    """(cases similar to this task at this bottleneck, best score); ([], None) while memory is off."""
    library, why = library_for_run(state)
    if library is None:
        if state.get("memory", {}).get("enabled"):
            audit(
                state["run_dir"],
                "diagnose",
                f"case library not read: {why}",
                round=state["round"],
                key="memory",
            )
        return [], None
    bottleneck = (snapshot or {}).get("bottleneck")
    try:
        return recall(library, task, bottleneck, bool(state["baseline"].get("interpreted")))
    except Exception as exc:  # a broken store costs this round its memory, never the run
        audit(
            state["run_dir"],
            "diagnose",
            f"case library not read: {type(exc).__name__}: {exc}",
            round=state["round"],
            key="memory",
        )
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


def _best_source(state: dict[str, Any], task: Task) -> str:
    path = Path(state["run_dir"]) / state["best"]["candidate"]
    return path.read_text() if path.exists() else task.baseline_source


def largest_workload(task: Task, device: str) -> tuple[dict[str, int], str]:
    return max(task.workload(device), key=lambda sd: math.prod(sd[0].values()))


def profiled_workload(task: Task, device: str, result: Any) -> tuple[dict[str, int], str]:
    """The shape to profile: on a GPU the one furthest below the roofline (the most headroom for the
    geomean objective: gqa_decode at B=1 is starved of programs while B=128 is not), else the largest.
    Interpreter times say nothing about the roofline, so CPU runs profile the largest shape."""
    rows = [r for r in (result.metrics.per_shape if result is not None else []) if r.roofline_pct]
    if device != "cuda" or not rows:
        return largest_workload(task, device)
    worst = min(rows, key=lambda r: (r.roofline_pct, -math.prod(r.shape.values())))
    return dict(worst.shape), worst.dtype


def take_snapshot(
    state: dict[str, Any], task: Task, best: dict[str, Any]
) -> tuple[dict[str, Any] | None, str]:
    """(snapshot of the best at the shape with the most headroom, why ncu was not used or "")."""
    device = state["device"]
    result = load_result(state["run_dir"], best["identity"])
    shape, dtype = profiled_workload(task, device, result)
    note = ""
    wanted = state["settings"]["profiler"]["ncu"]
    if device == "cuda" and wanted and not state.get("profiler", {}).get("ncu_unavailable"):
        snap, note = _ncu_snapshot(state, task, best, shape, dtype)
        if snap is not None:
            return snap, ""
    if result is None:
        return None, note
    sm_count = state["settings"]["device_limits"]["sm_count"]
    return derived_snapshot(result.model_dump(), shape, sm_count=sm_count), note


def _ncu_snapshot(state, task, best, shape, dtype) -> tuple[dict[str, Any] | None, str]:
    reason = ncu_available()
    if reason:
        return None, reason
    run_dir = Path(state["run_dir"])
    where = "_".join(f"{k}{v}" for k, v in shape.items())
    out_csv = run_dir / "profiles" / f"{best['identity']}_{where}_{dtype}.csv"  # one profile per shape
    try:
        if not out_csv.exists():  # this node may run again after a kill: keep a finished profile
            timeout = state["settings"]["profiler"]["timeout_s"]
            profile_candidate(
                task.folder,
                run_dir / best["candidate"],
                best["config"],
                shape,
                dtype,
                out_csv,
                timeout_s=timeout,
            )
        snaps = snapshots_from_csv(out_csv)
    except Exception as exc:  # ncu failing is reported once; the run goes on with derived snapshots
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if not snaps:
        return None, "ncu profiled no launch of the candidate's kernels"
    # With several kernels per launch (split + combine), the longest one carries the work.
    return max(snaps, key=lambda s: s.get("duration_us") or 0.0), ""
