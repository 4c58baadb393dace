"""The expert diagnoser: the snapshot's bottleneck, weighed by where it came from and by the history."""

from __future__ import annotations

from typing import Any

from loop.headroom import ShapeStanding, size_class_lines, standing_of
from loop.records import ShapeRow
from loop.roles import BOTTLENECKS, AgentContext, Diagnosis
from loop.scoring import ceiling_name, judged_at, judged_pct, lowest_judged
from tools.dispatch import shape_label

DERIVED_CONFIDENCE_CAP = 0.6
NO_SNAPSHOT_CONFIDENCE = 0.2


class ExpertDiagnoser:
    """Reads the profile snapshot of the best and the attempts so far; never calls a model."""

    def diagnose(self, ctx: AgentContext) -> Diagnosis:
        snap: dict[str, Any] = ctx.snapshot or {}
        bottleneck = snap.get("bottleneck")
        if bottleneck in BOTTLENECKS:
            evidence = [str(e) for e in snap.get("evidence", [])]
            confidence = float(snap.get("confidence", 0.5))
        else:
            bottleneck = "latency_bound"
            evidence = ["no profile snapshot of the best: assuming nothing is saturated"]
            confidence = NO_SNAPSHOT_CONFIDENCE
        if snap.get("source") == "derived":
            confidence = min(confidence, DERIVED_CONFIDENCE_CAP)
            evidence.append("snapshot derived from timings, launch grid and resources (no ncu)")
        evidence.extend(_shape_evidence(ctx, snap))
        evidence.extend(_history_evidence(ctx))
        lead = evidence[0] if evidence else ""
        at = f" at {shape_label(snap['shape'])}" if snap.get("shape") else ""
        return Diagnosis(
            bottleneck=bottleneck,
            evidence=evidence,
            confidence=round(confidence, 2),
            summary=f"{bottleneck}{at} (confidence {confidence:.2f}): {lead}",
        )


def _shape_evidence(ctx: AgentContext, snap: dict[str, Any]) -> list[str]:
    """Which shape the snapshot describes and why, the shapes by kind of size, the other profiles."""
    standings = [ShapeStanding.model_validate(s) for s in ctx.standings]
    notes = []
    profiled = standing_of(standings, snap.get("shape"), snap.get("dtype"))
    if profiled is not None and profiled.gain_pct is not None:
        notes.append(
            f"profiled at {profiled.label}: {profiled.ceiling_pct:.0f}% of its same-size ceiling, the furthest "
            f"from it (reaching it would cut the geomean by {profiled.gain_pct:.1f}%)"
        )
    elif snap.get("shape"):
        notes.append(
            f"profiled at {shape_label(snap['shape'])}, the largest timed shape (no ceiling measured)"
        )
    notes.extend(size_class_lines(standings))
    for other in snap.get("others") or []:
        standing = standing_of(standings, other.get("shape"), other.get("dtype"))
        where = standing.label if standing else shape_label(other.get("shape") or {})
        pct = f", {standing.ceiling_pct:.0f}% of its ceiling" if standing and standing.ceiling_pct else ""
        lead = f": {other['evidence'][0]}" if other.get("evidence") else ""
        notes.append(f"at {where} (the largest judged shape{pct}): {other.get('bottleneck')}{lead}")
    return notes


def _history_evidence(ctx: AgentContext) -> list[str]:
    notes = []
    best = ctx.best or {}
    baseline = next((h for h in ctx.history if h.get("origin") == "baseline"), None)
    if best.get("geomean_us") and baseline and baseline.get("geomean_us"):
        notes.append(
            f"best #{best.get('n', 0)} at {best['geomean_us']:.2f} us geomean, "
            f"{baseline['geomean_us'] / best['geomean_us']:.2f}x the baseline"
        )
    min_dims = ctx.target.get("min_dims")
    rows = [ShapeRow.model_validate(r) for r in best.get("per_shape") or []]
    row = lowest_judged(rows, min_dims)
    if row is not None and ctx.target.get("roofline_pct"):
        notes.append(
            f"{judged_pct(row):.0f}% of {ceiling_name(row)} at the lowest judged shape ({judged_at(min_dims)})"
        )
    elif row is not None:
        notes.append(f"{judged_pct(row):.0f}% of {ceiling_name(row)} at its lowest shape")
    if best.get("interpreted"):
        notes.append("timings are Triton-interpreter wall times: they rank configs, they are no speed claim")
    recent = [h for h in ctx.history if h.get("round") == ctx.round - 1 and h.get("verdict") == "fail"]
    if recent:
        kinds = sorted({h.get("error_type") or "unknown" for h in recent})
        notes.append(f"{len(recent)} candidate(s) of the last round failed ({', '.join(kinds)})")
    return notes
