"""Where the best kernel has room left, shape by shape, and which shapes the profiler should look at.

Each timed shape is read against its own ceiling (``loop.scoring.judged_pct``: a device copy of the
same bytes). The ceiling also says what kind of size it is: where even a copy of its bytes streams at
less than ``launch_bound_below_pct`` of the device's copy bandwidth, launch, ramp-up and tail dominate
(launch-bound: a few programs, microseconds); elsewhere the bytes dominate (bandwidth-bound).

The objective is the geomean of the per-shape times, in which every (shape, dtype) row is one factor
of exponent 1/N: bringing a row at p% of its ceiling to it cuts the geomean by 1 - (p/100)^(1/N). That
is the row's ``gain_pct``; the profiler looks first where it is largest, and at the largest shape the
roofline target judges, where the bandwidth-bound behaviour shows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from pydantic import BaseModel, Field

from loop.records import ShapeRow
from loop.scoring import judged_pct
from tools.dispatch import shape_label
from tools.results import SizeClass, size_class
from tools.task import meets_min_dims


class ShapeStanding(BaseModel):
    """One timed (shape, dtype) of a kernel against its ceiling."""

    shape: dict[str, int]
    dtype: str | None = None
    median_us: float | None = None
    copy_pct: float | None = Field(default=None, description="% of the device's copy bandwidth")
    ceiling_pct: float | None = Field(default=None, description="% of its ceiling (loop.scoring.judged_pct)")
    size_class: SizeClass | None = Field(
        default=None, description="None without a same-size ceiling to tell (a CPU, an old record)"
    )
    at_ceiling: bool = False
    gain_pct: float | None = Field(
        default=None, description="how much the geomean would drop if this shape reached its ceiling"
    )
    judged: bool = Field(default=True, description="a roofline target judges it (target.min_dims)")

    @property
    def label(self) -> str:
        return f"{shape_label(self.shape)} {self.dtype or ''}".strip()


def shape_standings(
    rows: Iterable[ShapeRow],
    near_pct: float,
    launch_bound_below_pct: float,
    min_dims: dict[str, int] | None = None,
) -> list[ShapeStanding]:
    """Every timed row as a standing; ``near_pct`` (search.near_roofline_pct) is "at its ceiling"."""
    rows = list(rows)
    standings = []
    for row in rows:
        pct = judged_pct(row)
        gain = None if pct is None else 100 * (1 - (min(pct, 100.0) / 100) ** (1 / len(rows)))
        standings.append(
            ShapeStanding(
                shape=row.shape,
                dtype=row.dtype,
                median_us=row.median_us,
                copy_pct=row.roofline_pct,
                ceiling_pct=pct,
                size_class=size_class(row.roofline_pct, row.ceiling_pct, launch_bound_below_pct),
                at_ceiling=pct is not None and pct >= near_pct,
                gain_pct=gain,
                judged=meets_min_dims(row.shape, min_dims),
            )
        )
    return standings


def profile_choice(standings: list[ShapeStanding]) -> list[ShapeStanding]:
    """The shapes to profile, first the one whose reaching its ceiling would gain the objective most,
    then the largest judged shape when that is another; [] when no shape has a measured figure."""
    measured = [s for s in standings if s.gain_pct is not None]
    if not measured:
        return []
    most = max(measured, key=lambda s: (s.gain_pct, -math.prod(s.shape.values())))
    judged = [s for s in measured if s.judged] or measured
    largest = max(judged, key=lambda s: math.prod(s.shape.values()))
    return [most] if largest is most else [most, largest]


def standing_of(
    standings: list[ShapeStanding], shape: dict | None, dtype: str | None
) -> ShapeStanding | None:
    return next((s for s in standings if s.shape == shape and (dtype is None or s.dtype == dtype)), None)


def size_class_lines(standings: list[ShapeStanding]) -> list[str]:
    """The shapes by kind of size, each class with how close its shapes are to their ceilings."""
    lines = []
    names = {"launch_bound": "launch-bound", "bandwidth_bound": "bandwidth-bound"}
    why = {
        "launch_bound": "a copy of their bytes is itself dominated by launch and ramp-up",
        "bandwidth_bound": "their bytes dominate",
    }
    for kind in ("launch_bound", "bandwidth_bound"):
        members = [s for s in standings if s.size_class == kind]
        if not members:
            continue
        each = ", ".join(f"{s.label} {s.ceiling_pct:.0f}%" for s in members)
        state = "all at their ceiling" if all(s.at_ceiling for s in members) else "room left"
        lines.append(f"{names[kind]} shapes ({why[kind]}): {each} of their same-size ceiling; {state}")
    return lines
