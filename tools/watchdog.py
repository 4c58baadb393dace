"""Performance watchdog: a new best must not be slower than the previous best at any shape, and each
shape's time should sit on the curve the other shapes draw.

- ``check_regression(new, previous)``: per-shape ratio new/previous; any shape more than
  ``max_regression`` (3%) slower, in its median and in its best repeat alike, rejects the new best
  (noise moves one of the two, a real slowdown moves both). Meant for two results re-timed back to
  back in one process (``Evaluator.retime``), so run-to-run drift cannot hide or fake a regression.
  With ``launch_bound_below_pct``, a launch-bound shape (a copy of its bytes reaches less than that %
  of the copy bandwidth: its time is a launch, microseconds, not a stream) slower by more is
  tolerated when the new best is faster in geomean: it is named in the verdict, and the per-shape
  table (``tools.dispatch``) still holds that shape's faster config. Without it, a few tiny shapes
  would keep a config that is several times slower at every streaming shape.
- ``expected_curve_outliers(per_shape)``: each shape's time against a latency + bandwidth curve
  (time = t0 + bytes / bandwidth) fitted to the *other* shapes; a shape off the curve by more than
  ``factor`` is flagged (a config that suits the large shapes may starve the small ones).
- ``guard_new_best(evaluator, new, previous)``: re-time two candidates back to back, then judge;
  ``recheck_new_best(task, device, new, previous)`` opens the evaluator for it (a GPU only).

Pure functions over EvalResult objects (or their JSON dicts), apart from the two that re-time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from tools.dispatch import geomean_or_none
from tools.results import EvalResult, ShapeTiming, size_class

if TYPE_CHECKING:
    from tools.candidate import Candidate
    from tools.evaluate import EvalSettings, Evaluator
    from tools.task import Task

MAX_REGRESSION = 0.03
OUTLIER_FACTOR = 1.3


class ShapeChange(BaseModel):
    shape: dict[str, int]
    dtype: str
    previous_us: float
    new_us: float
    ratio: float = Field(description="new / previous median: above 1 is slower")
    min_ratio: float = Field(description="new / previous best repeat")
    launch_bound: bool = Field(default=False, description="a launch-bound size (see check_regression)")


class WatchdogVerdict(BaseModel):
    accepted: bool
    reason: str
    max_regression: float
    compared: bool = Field(description="both results had timings to compare")
    same_process: bool = Field(
        description="both were timed in one process (the copy bandwidth each carries is the same measurement)"
    )
    interpreted: bool = Field(description="interpreter wall times: a ranking, not a speed claim")
    regressions: list[ShapeChange] = []
    tolerated: list[ShapeChange] = Field(
        default=[], description="launch-bound shapes slower by more than max_regression, the geomean faster"
    )
    changes: list[ShapeChange] = []
    geomean_ratio: float | None = None


class CurveOutlier(BaseModel):
    shape: dict[str, int]
    dtype: str
    median_us: float
    expected_us: float
    ratio: float = Field(description="measured / expected")
    direction: Literal["slow", "fast"]
    size: float = Field(description="bytes moved (or elements when no bandwidth was measured)")
    basis: Literal["bytes", "elements"]


def _key(row: ShapeTiming) -> tuple[str, str]:
    return json.dumps(row.shape, sort_keys=True), row.dtype


def _as_result(value: EvalResult | dict) -> EvalResult:
    return value if isinstance(value, EvalResult) else EvalResult.model_validate(value)


def check_regression(
    new: EvalResult | dict,
    previous: EvalResult | dict,
    max_regression: float = MAX_REGRESSION,
    launch_bound_below_pct: float | None = None,
) -> WatchdogVerdict:
    """Accept ``new`` only if no shape is more than ``max_regression`` slower than in ``previous``,
    in the median and the best repeat alike; with ``launch_bound_below_pct``, a launch-bound shape's
    regression is tolerated when ``new`` is faster in geomean (the module doc says why).

    A new result that failed (or lacks a shape the previous one timed) is rejected. A previous result
    that failed its re-time leaves nothing to compare against: the new one is accepted, ``compared``
    False, and the reason says so."""
    new, previous = _as_result(new), _as_result(previous)
    same = (
        new.metrics.copy_gbps is not None
        and new.metrics.copy_gbps == previous.metrics.copy_gbps
        and not new.device.interpreted
    )
    base = {
        "max_regression": max_regression,
        "same_process": same,
        "interpreted": new.device.interpreted or previous.device.interpreted,
    }
    if not new.passed:
        return WatchdogVerdict(
            accepted=False,
            compared=False,
            reason=f"the new best failed its re-time: {new.error_type}: {new.message}",
            **base,
        )
    if not previous.passed or not previous.metrics.per_shape:
        why = f"{previous.error_type}: {previous.message}" if not previous.passed else "no timings"
        return WatchdogVerdict(
            accepted=True,
            compared=False,
            reason=f"the previous best could not be re-timed ({why}); nothing to compare against",
            **base,
        )
    timed = {_key(r): r for r in new.metrics.per_shape}
    missing = [r for r in previous.metrics.per_shape if _key(r) not in timed]
    if missing:
        return WatchdogVerdict(
            accepted=False,
            compared=False,
            reason=f"the new best has no timing at {missing[0].shape} {missing[0].dtype}",
            **base,
        )
    changes = [
        ShapeChange(
            shape=p.shape,
            dtype=p.dtype,
            previous_us=p.median_us,
            new_us=timed[_key(p)].median_us,
            ratio=timed[_key(p)].median_us / p.median_us,
            min_ratio=timed[_key(p)].min_us / p.min_us if p.min_us > 0 else math.inf,
            launch_bound=_launch_bound(p, launch_bound_below_pct),
        )
        for p in previous.metrics.per_shape
    ]
    slower = [c for c in changes if min(c.ratio, c.min_ratio) > 1 + max_regression]
    slower.sort(key=lambda c: -c.ratio)
    geomean_ratio = geomean_or_none(c.ratio for c in changes if c.ratio > 0)
    faster_overall = geomean_ratio is not None and geomean_ratio < 1
    tolerated = [c for c in slower if c.launch_bound and faster_overall]
    regressions = [c for c in slower if c not in tolerated]
    if regressions:
        worst = regressions[0]
        reason = (
            f"{len(regressions)} shape(s) slower than the previous best by more than "
            f"{100 * max_regression:g}%; worst {worst.shape} {worst.dtype}: {worst.previous_us:.2f} -> "
            f"{worst.new_us:.2f} us (+{100 * (worst.ratio - 1):.1f}%)"
        )
    else:
        where = "shape" if not tolerated else "bandwidth-bound shape"
        reason = (
            f"no {where} slower by more than {100 * max_regression:g}% "
            f"(geomean {100 * ((geomean_ratio or 1) - 1):+.1f}%)"
        )
    if tolerated and not regressions:
        worst = tolerated[0]
        reason += (
            f"; {len(tolerated)} launch-bound shape(s) slower, tolerated as the geomean is faster: worst "
            f"{worst.shape} {worst.dtype}: {worst.previous_us:.2f} -> {worst.new_us:.2f} us "
            f"(+{100 * (worst.ratio - 1):.1f}%); the per-shape table keeps each shape's fastest config"
        )
    return WatchdogVerdict(
        accepted=not regressions,
        compared=True,
        reason=reason,
        regressions=regressions,
        tolerated=tolerated,
        changes=changes,
        geomean_ratio=geomean_ratio,
        **base,
    )


def _launch_bound(row: ShapeTiming, below_pct: float | None) -> bool:
    return below_pct is not None and size_class(row.roofline_pct, row.ceiling_pct, below_pct) == "launch_bound"


# -- the expected curve ------------------------------------------------------------------------------
def _size(row: ShapeTiming) -> tuple[float, str]:
    if row.gbps:
        return row.gbps * 1e9 * row.median_us * 1e-6, "bytes"
    return float(math.prod(row.shape.values())), "elements"


def shape_timing(data: dict) -> ShapeTiming:
    """A per-shape row from an EvalResult's JSON, or a row that keeps fewer fields (median, GB/s)."""
    return ShapeTiming.model_validate({"min_us": data.get("median_us"), "spread": 1.0, **data})


def _fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(t0, seconds per unit) of time = t0 + k * size, least squares on relative error, t0, k >= 0."""
    w = [1 / t**2 for _, t in points]

    def sse(t0: float, k: float) -> float:
        return sum(wi * (t0 + k * s - t) ** 2 for wi, (s, t) in zip(w, points, strict=True))

    sw = sum(w)
    sx = sum(wi * s for wi, (s, _) in zip(w, points, strict=True))
    sy = sum(wi * t for wi, (_, t) in zip(w, points, strict=True))
    sxx = sum(wi * s * s for wi, (s, _) in zip(w, points, strict=True))
    sxy = sum(wi * s * t for wi, (s, t) in zip(w, points, strict=True))
    det = sw * sxx - sx * sx
    fits = []
    if det > 0:
        k = (sw * sxy - sx * sy) / det
        t0 = (sy - k * sx) / sw
        if t0 >= 0 and k >= 0:
            fits.append((t0, k))
    fits.append((sy / sw, 0.0))  # latency only
    if sxx > 0:
        fits.append((0.0, sxy / sxx))  # bandwidth only
    return min(fits, key=lambda f: sse(*f))


def expected_curve_outliers(
    per_shape: Iterable[ShapeTiming | dict], factor: float = OUTLIER_FACTOR, min_points: int = 3
) -> list[CurveOutlier]:
    """Shapes whose time is off the curve the other shapes draw by more than ``factor`` either way.

    Problem size is the bytes moved (GB/s x time) when the bandwidth was measured, else the element
    count. Each shape is judged against a fit that leaves it out. The worst shape beyond ``factor`` is
    set aside and the rest judged again without it, so one bad shape cannot drag the curve off its
    neighbours. Fewer than ``min_points`` shapes to fit from flag nothing."""
    rows = [r if isinstance(r, ShapeTiming) else shape_timing(r) for r in per_shape]
    rows = [r for r in rows if r.median_us > 0]
    sized = [(r, *_size(r)) for r in rows]
    if len({basis for _, _, basis in sized}) > 1:  # mixed: compare like with like
        sized = [(r, float(math.prod(r.shape.values())), "elements") for r in rows]
    points = [(size, r.median_us) for r, size, _ in sized]
    aside: dict[int, float] = {}  # index -> expected time from the shapes still on the curve
    while True:
        kept = [i for i in range(len(points)) if i not in aside]
        if len(kept) - 1 < min_points:
            break
        worst, worst_expected, worst_off = None, 0.0, math.log(factor)
        for i in kept:
            t0, k = _fit([points[j] for j in kept if j != i])
            expected = t0 + k * points[i][0]
            off = abs(math.log(points[i][1] / expected)) if expected > 0 else 0.0
            if off > worst_off:
                worst, worst_expected, worst_off = i, expected, off
        if worst is None:
            break
        aside[worst] = worst_expected
    if aside:  # judged against the final curve, fitted without any of them
        t0, k = _fit([points[j] for j in range(len(points)) if j not in aside])
        aside = {i: t0 + k * points[i][0] for i in aside}
    outliers = []
    for i, expected in sorted(aside.items()):
        row, size, basis = sized[i]
        ratio = row.median_us / expected
        if expected > 0 and (ratio > factor or ratio < 1 / factor):
            outliers.append(
                CurveOutlier(
                    shape=row.shape,
                    dtype=row.dtype,
                    median_us=row.median_us,
                    expected_us=expected,
                    ratio=ratio,
                    direction="slow" if ratio > 1 else "fast",
                    size=size,
                    basis=basis,
                )
            )
    return outliers


def render_markdown(verdict: WatchdogVerdict | None, outliers: list[CurveOutlier]) -> str:
    """A report section: the re-time verdict and the shapes off the expected curve."""
    lines = ["## Watchdog", ""]
    if verdict is not None:
        where = "same process" if verdict.same_process else "separate measurements"
        lines.append(
            f"- re-time against the previous best ({where}): "
            f"{'accepted' if verdict.accepted else 'rejected'}: {verdict.reason}"
        )
        for c in verdict.regressions + verdict.tolerated:
            lines.append(
                f"  - {c.shape} {c.dtype}: {c.previous_us:.2f} -> {c.new_us:.2f} us (+{100 * (c.ratio - 1):.1f}%)"
                + (" (launch-bound, tolerated)" if c in verdict.tolerated else "")
            )
    if outliers:
        lines.append(
            "- shapes off the expected curve (time = latency + size / bandwidth from the other shapes):"
        )
        for o in outliers:
            lines.append(
                f"  - {o.shape} {o.dtype}: {o.median_us:.2f} us, expected {o.expected_us:.2f} us "
                f"({o.ratio:.2f}x, {o.direction})"
            )
    else:
        lines.append("- every shape is on the expected curve")
    return "\n".join(lines) + "\n"


def _no_retime(max_regression: float) -> WatchdogVerdict:
    return WatchdogVerdict(
        accepted=True,
        compared=False,
        same_process=False,
        interpreted=True,
        max_regression=max_regression,
        reason="interpreted timings: no same-process re-time on the CPU",
    )


def guard_new_best(
    evaluator: Evaluator,
    new: Candidate,
    previous: Candidate,
    max_regression: float = MAX_REGRESSION,
    launch_bound_below_pct: float | None = None,
) -> WatchdogVerdict:
    """Re-time ``previous`` and ``new`` back to back in one process and judge ``new``.

    On the CPU (interpreter) there is nothing to re-time: accepted, ``compared`` False."""
    if evaluator.device != "cuda":
        return _no_retime(max_regression)
    previous_result, new_result = evaluator.retime([previous, new])
    return check_regression(new_result, previous_result, max_regression, launch_bound_below_pct)


def recheck_new_best(
    task: Task,
    device: str,
    new: Candidate,
    previous: Candidate,
    max_regression: float = MAX_REGRESSION,
    settings: EvalSettings | None = None,
    launch_bound_below_pct: float | None = None,
) -> WatchdogVerdict:
    """Re-time a new best against the previous one on the GPU (fresh workers of the run's own judge) and
    judge it; on the CPU nothing is re-timed (accepted, ``compared`` False). The run's judge, not a second
    one: a second judge would make every input set and reference again, beside the first one's in memory."""
    from tools.evaluate import EvalSettings, Evaluator, resolve_device, shared_backend

    if resolve_device(device) != "cuda":
        return _no_retime(max_regression)
    settings = settings or EvalSettings.for_task(task)
    evaluator = Evaluator(task, "cuda", settings, backend=shared_backend(task, "cuda", settings))
    return guard_new_best(evaluator, new, previous, max_regression, launch_bound_below_pct)


__all__ = [
    "CurveOutlier",
    "ShapeChange",
    "WatchdogVerdict",
    "check_regression",
    "expected_curve_outliers",
    "guard_new_best",
    "recheck_new_best",
    "render_markdown",
]
