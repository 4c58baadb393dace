"""KernelBench's metrics over a set of problems, and ours beside them: pure functions of the results.

Definitions, as KernelBench's own scoring code states them (ScalingIntelligence/KernelBench,
src/score.py):
- ``fastp``: the fraction of ALL problems whose kernel is correct AND whose speedup over the anchor
  (anchor time / kernel time) is strictly greater than p. An incorrect problem counts in the
  denominator, never in the numerator; p = 0 gives the correctness rate.
- ``geometric_mean_speed_ratio_correct_only``: the geomean of the speedups of the correct problems.

KernelBench times one size per problem, so its metrics here use each problem's own size (the first
shape of an imported task). Ours: the geomean over every timed shape of the problem as well.
The anchors are the reference itself, in eager mode and under torch.compile, timed in the same process
as the candidates.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from pydantic import BaseModel

ANCHORS = ("eager", "compile")
THRESHOLDS = (1.0, 1.2, 1.5, 2.0)


class ShapeTime(BaseModel):
    shape: dict[str, int]
    best_us: float | None
    anchors_us: dict[str, float] = {}  # {"eager": us, "compile": us}


class ProblemResult(BaseModel):
    name: str
    correct: bool
    shapes: list[ShapeTime] = []  # the first is the problem's own size


def shape_speedup(row: ShapeTime, anchor: str) -> float | None:
    """anchor time / our time at one shape; None when either was not timed."""
    base = row.anchors_us.get(anchor)
    if not base or not row.best_us or row.best_us <= 0 or base <= 0:
        return None
    return base / row.best_us


def own_speedup(result: ProblemResult, anchor: str) -> float | None:
    """The speedup at the problem's own size (KernelBench's one size), None if incorrect or untimed."""
    if not result.correct or not result.shapes:
        return None
    return shape_speedup(result.shapes[0], anchor)


def all_shapes_speedup(result: ProblemResult, anchor: str) -> float | None:
    """Geomean of the speedups over every shape timed against the anchor (None if incorrect or none)."""
    if not result.correct:
        return None
    return geomean(s for s in (shape_speedup(r, anchor) for r in result.shapes) if s is not None)


def correctness_rate(results: list[ProblemResult]) -> float:
    return sum(r.correct for r in results) / len(results) if results else 0.0


def fast_p(results: list[ProblemResult], anchor: str, p: float) -> float:
    """KernelBench's fast_p: correct and own-size speedup > p, over all problems (untimed: not fast)."""
    if not results:
        return 0.0
    fast = sum(1 for r in results if (s := own_speedup(r, anchor)) is not None and s > p)
    return fast / len(results)


def geomean_speedup(results: list[ProblemResult], anchor: str) -> float | None:
    """KernelBench's geomean over the correct problems (own size); None when none is correct and timed."""
    return geomean(s for s in (own_speedup(r, anchor) for r in results) if s is not None)


def geomean(values: Iterable[float]) -> float | None:
    values = list(values)
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summary(results: list[ProblemResult]) -> dict:
    """Every metric, by anchor: KernelBench's (own size) and ours (every shape)."""
    by_anchor = {}
    for anchor in ANCHORS:
        by_anchor[anchor] = {
            "fast_p": {f"{p:g}": fast_p(results, anchor, p) for p in THRESHOLDS},
            "geomean_speedup": geomean_speedup(results, anchor),
            "geomean_speedup_all_shapes": geomean(
                s for s in (all_shapes_speedup(r, anchor) for r in results) if s is not None
            ),
            "timed": sum(1 for r in results if own_speedup(r, anchor) is not None),
        }
    return {"problems": len(results), "correctness_rate": correctness_rate(results), "anchors": by_anchor}
