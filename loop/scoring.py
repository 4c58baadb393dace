"""How the loop scores attempts: the judged roofline, the per-shape table, improvement, the target,
and which held candidates a human should see.

Interpreted (CPU) timings rank candidates and never meet a target.
"""

from __future__ import annotations

from collections.abc import Iterable

from loop.records import Attempt, ShapeRow
from tools.dispatch import ShapeKey, geomean, shape_key
from tools.task import Target, meets_min_dims


def judged_pct(row: ShapeRow) -> float | None:
    """How close one timed shape is to its ceiling, in %: of the same-size copy where the judge timed one
    (``ceiling_pct``: a short op pays the ramp-up and tail a copy of its bytes pays too), else of the
    device's copy bandwidth (``roofline_pct``, records without a ceiling). None on a CPU."""
    return row.ceiling_pct if row.ceiling_pct is not None else row.roofline_pct


def ceiling_name(row: ShapeRow) -> str:
    """What ``judged_pct`` of this row is a % of, in words."""
    return "the same-size ceiling" if row.ceiling_pct is not None else "the copy bandwidth"


def lowest_judged(per_shape: Iterable[ShapeRow], min_dims: dict[str, int] | None = None) -> ShapeRow | None:
    """The row a roofline target is judged on: the lowest ``judged_pct`` among the per-shape rows (every
    dtype) whose shape has every dim >= ``min_dims`` (task.json target.min_dims; every row when None)."""
    rows = [r for r in per_shape if judged_pct(r) is not None and meets_min_dims(r.shape, min_dims)]
    return min(rows, key=judged_pct) if rows else None


def judged_roofline(per_shape: Iterable[ShapeRow], min_dims: dict[str, int] | None = None) -> float | None:
    """The % a roofline target is judged on (``judged_pct`` of ``lowest_judged``)."""
    row = lowest_judged(per_shape, min_dims)
    return judged_pct(row) if row is not None else None


def near_ceiling(per_shape: Iterable[ShapeRow], min_dims: dict[str, int] | None, near_pct: float) -> bool:
    """Every shape a roofline target judges at >= ``near_pct`` (search.near_roofline_pct) of its ceiling
    (``judged_roofline``): nothing left for tuning, nor for a profile to point at."""
    pct = judged_roofline(per_shape, min_dims)
    return pct is not None and pct >= near_pct


def judged_at(min_dims: dict[str, int] | None) -> str:
    """Which shapes a roofline target is judged at, in words: "B >= 8" or "all shapes"."""
    return ", ".join(f"{dim} >= {size}" for dim, size in min_dims.items()) if min_dims else "all shapes"


def fastest_at_each_shape(attempts: Iterable[Attempt]) -> dict[ShapeKey, tuple[float, Attempt, ShapeRow]]:
    """(shape, dtype) -> (median us, attempt, per-shape row) of the fastest of ``attempts`` there (the
    caller picks which attempts count)."""
    fastest: dict[ShapeKey, tuple[float, Attempt, ShapeRow]] = {}
    for a in attempts:
        for row in a.per_shape:
            us = row.median_us
            key = shape_key(row.shape, str(row.dtype))
            if us and us > 0 and (key not in fastest or us < fastest[key][0]):
                fastest[key] = (us, a, row)
    return fastest


def table_geomean(attempts: Iterable[Attempt], approved: Iterable[int] = ()) -> float | None:
    """Geomean over (shape, dtype) of the fastest passing time at each: what a per-bucket table of the
    configs evaluated so far takes (tools.dispatch builds that table at export). It can improve while
    the single best cannot: a config that wins some shapes and loses others is never the best.
    ``approved``: attempt numbers of held candidates a human approved, which count as passing."""
    approved = set(approved)
    fastest = fastest_at_each_shape(a for a in attempts if a.passed or a.n in approved)
    return geomean(us for us, _, _ in fastest.values()) if fastest else None


def improved(previous_us: float | None, new_us: float | None, threshold: float) -> bool:
    """True when a time got faster by more than ``threshold`` (relative)."""
    if new_us is None:
        return False
    if previous_us is None:
        return True
    return new_us < previous_us * (1 - threshold)


def target_met(best: Attempt, baseline: Attempt, target: Target) -> str | None:
    """Why the task's target is met, or None. Interpreted (CPU) timings never meet a target."""
    if best.interpreted or best.origin == "baseline":
        return None
    if target.speedup and baseline.geomean_us and best.geomean_us:
        speedup = baseline.geomean_us / best.geomean_us
        if speedup >= target.speedup:
            return f"speedup {speedup:.2f}x >= target {target.speedup}x"
    row = lowest_judged(best.per_shape, target.min_dims) if target.roofline_pct else None
    if row is not None and judged_pct(row) >= target.roofline_pct:
        return (
            f"{judged_pct(row):.1f}% of {ceiling_name(row)} at the lowest judged shape "
            f"({judged_at(target.min_dims)}) >= target {target.roofline_pct:g}%"
        )
    return None


def held_for_review(
    attempts: Iterable[Attempt], shown: Iterable[int], best_us: float | None
) -> list[Attempt]:
    """Attempts held as suspicious speedups over the baseline (not beyond the roofline) that would beat
    the best and that no human has been shown yet (``shown``: attempt numbers reviewed or approved)."""
    seen = set(shown)
    return [
        a
        for a in attempts
        if a.held == "speedup" and a.n not in seen and a.geomean_us and best_us and a.geomean_us < best_us
    ]
