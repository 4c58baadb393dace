"""Ties: interpreted (CPU) timings that cannot tell two candidates apart rank neither above the other.

The Triton interpreter's wall times move with the machine's load. Each interpreted shape is timed over
several calls and its ``spread`` (median/min) is the noise seen; two interpreted attempts are tied when
their geomeans differ by no more than the larger noise of the two, and never by less than
``RESOLUTION`` (what the interpreter resolves on a quiet machine). A tied challenger does not take
the best, and the report names the attempts tied with the best instead of ranking them.
"""

from __future__ import annotations

from collections.abc import Iterable

from loop.records import Attempt

RESOLUTION = 1.10


def noise(attempt: Attempt) -> float:
    """The largest spread its interpreted shapes showed (1.0 when none was recorded)."""
    spreads = [r.spread for r in attempt.per_shape if r.spread]
    return max(spreads, default=1.0)


def tied(a: Attempt, b: Attempt) -> bool:
    """Whether interpreted timings cannot order ``a`` and ``b``; GPU timings always can."""
    if not (a.interpreted and b.interpreted and a.geomean_us and b.geomean_us):
        return False
    ratio = max(a.geomean_us, b.geomean_us) / min(a.geomean_us, b.geomean_us)
    return ratio <= max(RESOLUTION, noise(a), noise(b))


def tied_with(best: Attempt, attempts: Iterable[Attempt]) -> list[Attempt]:
    """The passing attempts (other than ``best``) the interpreter cannot tell from it."""
    return [a for a in attempts if a.n != best.n and a.passed and tied(a, best)]
