"""Judging an evaluated round: the new best, the streaks, the progress entry.

The round's fastest pass challenges the best (``challenger``; an interpreted tie keeps the best); on a GPU the watchdog re-times it
against the best before it takes over (the node's job, the one impure step). Progress is the single
best or the per-shape table getting faster by more than ``routing.stall_improvement``: a round with
neither counts toward a stall.
"""

from __future__ import annotations

from pydantic import BaseModel

from loop.records import Attempt, ProgressEntry
from loop.scoring import improved, table_geomean
from loop.settings import RoutingSettings
from loop.streaks import Streaks, round_outcome
from loop.ties import tied


class Judgement(BaseModel):
    best: Attempt
    streaks: Streaks
    progress: ProgressEntry


def _passing(attempts: list[Attempt]) -> list[Attempt]:
    return [a for a in attempts if a.passed and a.geomean_us]


def challenger(new: list[Attempt], best: Attempt | None) -> Attempt | None:
    """The round's fastest pass when it beats the best (any pass beats no best); interpreted timings
    within each other's noise are a tie, and a tie keeps the best (loop.ties)."""
    passing = _passing(new)
    if not passing:
        return None
    fastest = min(passing, key=lambda a: a.geomean_us or 0.0)
    if best is None or not best.geomean_us:
        return fastest
    faster = (fastest.geomean_us or 0.0) < best.geomean_us
    return fastest if faster and not tied(fastest, best) else None


def judge_round(
    *,
    round: int,
    before: list[Attempt],
    new: list[Attempt],
    previous: Attempt,
    best: Attempt,
    approved: list[int],
    streaks: Streaks,
    rules: RoutingSettings,
) -> Judgement:
    """``before``: the attempts of earlier rounds; ``new``: this round's; ``best``: the best after it
    (``previous`` or the challenger the watchdog let through); ``approved``: held attempts a human
    approved, which count in the per-shape table."""
    passing = _passing(new)
    table_before = table_geomean(before, approved)
    table_us = table_geomean([*before, *new], approved)
    threshold = rules.stall_improvement
    got_better = improved(previous.geomean_us, best.geomean_us, threshold) or improved(
        table_before, table_us, threshold
    )
    outcome = round_outcome(new, rules.compile_error_types)
    progress = ProgressEntry(
        round=round,
        best_us=best.geomean_us,
        round_best_us=min(a.geomean_us or 0.0 for a in passing) if passing else None,
        table_us=table_us,
        evaluated=len(new),
        passed=len(passing),
    )
    return Judgement(best=best, streaks=streaks.after(outcome, got_better), progress=progress)
