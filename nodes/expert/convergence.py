"""When the expert search has converged: further evaluations are unlikely to help.

The rule, both halves at once:
- the top ``search.converge_top`` passing configs are local optima of the space as far as it has been
  walked: every one-step neighbour of each (a key one value up or down, or the same config on another
  variant) has been evaluated, or is ruled out (a value that failed twice and never passed, a config
  that failed in a similar past case);
- and the last ``search.converge_rounds`` evaluated rounds gained no more than ``search.converge_gain``
  (1%) on the best geomean or on the per-shape table (each shape's fastest config); a table gain counts
  only while the table beats the best config by export's margin (tools.dispatch.table_wins, 2%), since
  otherwise export hands back the one config and the gain is nobody's.

Restarts and the neighbours of the lower-ranked configs may still find something; the rule says they
are unlikely to, not that they cannot, and the reason names what was checked.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from loop.records import Attempt
from loop.roles import AgentContext
from loop.scoring import table_geomean
from nodes.expert.space import neighbours
from tools.dispatch import table_wins

Seen = Callable[[str, dict[str, Any]], bool]


def last_gain(history: list[dict[str, Any]], threshold: float) -> tuple[int, int]:
    """(the last round that made the best passing geomean, or the per-shape table's geomean while the table
    would ship, faster by more than ``threshold``, the evaluated rounds since); round 0 sets both."""
    by_round: dict[int, list[Attempt]] = {}
    for h in history:
        by_round.setdefault(h.get("round", 0), []).append(Attempt.model_validate(h))
    best = table = math.inf
    done: list[Attempt] = []
    gained_at, stale = 0, 0
    for rnd in sorted(by_round):
        done += by_round[rnd]
        passing = [a.geomean_us for a in by_round[rnd] if a.passed and a.geomean_us]
        round_best = min(passing, default=math.inf)
        round_table = table_geomean(done) or math.inf
        shipped = table_wins(round_table, min(best, round_best))  # the table is what export hands back
        if round_best < best * (1 - threshold) or (shipped and round_table < table * (1 - threshold)) or rnd == 0:
            gained_at, stale = rnd, 0
        else:
            stale += 1
        best, table = min(best, round_best), min(table, round_table)
    return gained_at, stale


def rounds_without_gain(history: list[dict[str, Any]], threshold: float) -> int:
    """Evaluated rounds in a row, up to the last, that gained no more than ``threshold`` (``last_gain``)."""
    return last_gain(history, threshold)[1]


def top_configs(ctx: AgentContext, k: int, up_to_round: int | None = None) -> list[dict[str, Any]]:
    """The k fastest passing configs of the searchable modules (evaluated by ``up_to_round``)."""
    passing = [
        h
        for h in ctx.history
        if h.get("verdict") == "pass"
        and h.get("geomean_us")
        and h.get("module") in ctx.search_spaces
        and (up_to_round is None or h.get("round", 0) <= up_to_round)
    ]
    return sorted(passing, key=lambda h: (h["geomean_us"], h.get("n", 0)))[:k]


def unexplored(ctx: AgentContext, parent: dict[str, Any], done: Seen) -> list[dict[str, Any]]:
    """The one-step moves from ``parent`` (nodes.expert.space.neighbours) not yet done."""
    moves = neighbours(parent["module"], parent["config"], ctx.search_spaces, list(ctx.search_spaces))
    return [m for m in moves if not done(m["module"], m["config"])]


def anchors(ctx: AgentContext, search: dict[str, Any]) -> list[dict[str, Any]]:
    """The configs the rule checks: the top ``converge_top`` as of the last round that gained, so that
    a best replaced by one within the noise (< converge_gain faster) does not move the check."""
    gained_at, _ = last_gain(ctx.history, search["converge_gain"])
    return top_configs(ctx, search["converge_top"], gained_at)


def converged(ctx: AgentContext, search: dict[str, Any], done: Seen) -> str:
    """Why the search has converged ("" while it has not); ``done``: a point evaluated or ruled out."""
    rounds, gain = search["converge_rounds"], search["converge_gain"]
    stale = rounds_without_gain(ctx.history, gain)
    if stale < rounds:
        return ""
    top = anchors(ctx, search)
    if not top or any(unexplored(ctx, parent, done) for parent in top):
        return ""
    names = ", ".join(f"#{h.get('n', 0)} {h['module']} {h['config']} ({h['geomean_us']:.2f} us)" for h in top)
    return (
        f"every one-step neighbour of the top {len(top)} config(s) ({names}) has been evaluated, and "
        f"{stale} round(s) in a row gained no more than {100 * gain:g}% on the best or the per-shape table"
    )
