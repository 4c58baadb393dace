"""When the expert search has converged: further evaluations are unlikely to help.

The rule, both halves at once:
- the best config and the per-shape table are local optima as far as the space has been walked: every
  one-step neighbour (a key one value up or down, or the same config on another variant) of the top
  ``search.converge_top`` passing configs, and of each shape's fastest config where it beats the best
  config by more than ``search.converge_gain`` of the geomean (that shape's share of what the table gains:
  1/S of the log over S shapes), has been evaluated, or is ruled out (a value that failed twice and never
  passed, a config that failed in a similar past case);
- and the last ``search.converge_rounds`` evaluated rounds gained no more than ``search.converge_gain`` on
  the best geomean, nor on the per-shape table (each shape's fastest config) through configs more than one
  step from every config evaluated before their round; a table gain counts only while the table beats the
  best config by export's margin (tools.dispatch.table_wins, 2%), since otherwise export hands back the
  one config and the gain is nobody's.

A table gain one step from an evaluated config is a shape's fastest config moving by one step: that config
becomes one of those whose neighbourhoods the first half checks, so the walk of each shape goes on exactly
as long as it finds something, without two more rounds of restarts after every step. A table gain farther
away is a region no walk had reached, and the rounds start over, as they do after any gain on the best.
Restarts and the neighbours of lower-ranked configs may still find something; the rule says they are
unlikely to, not that they cannot, and the reason names what was checked.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from loop.records import Attempt
from loop.roles import AgentContext
from loop.scoring import fastest_at_each_shape, table_geomean
from nodes.expert.space import distance, neighbours
from tools.dispatch import shape_key, shape_label, table_wins

Seen = Callable[[str, dict[str, Any]], bool]


def last_gain(history: list[dict[str, Any]], threshold: float, new_regions: bool = False) -> tuple[int, int]:
    """(the last round that made the best passing geomean, or the per-shape table's geomean while the table
    would ship, faster by more than ``threshold``, the evaluated rounds since); round 0 sets both. With
    ``new_regions``, a round's table counts only its configs more than one step from every config evaluated
    before it (rounds 0 and 1 count whole: nothing, or the baseline alone, came before them)."""
    by_round: dict[int, list[Attempt]] = {}
    for h in history:
        by_round.setdefault(h.get("round", 0), []).append(Attempt.model_validate(h))
    best = table = math.inf
    done: list[Attempt] = []
    gained_at, stale = 0, 0
    for rnd in sorted(by_round):
        batch = by_round[rnd]
        round_best = min((a.geomean_us for a in batch if a.passed and a.geomean_us), default=math.inf)
        away = [a for a in batch if _away(a, done)] if new_regions and rnd > 1 else batch
        round_table = table_geomean(done + away) or math.inf
        shipped = table_wins(round_table, min(best, round_best))  # the table is what export hands back
        if (
            rnd == 0
            or round_best < best * (1 - threshold)
            or (shipped and round_table < table * (1 - threshold))
        ):
            gained_at, stale = rnd, 0
        else:
            stale += 1
        done += batch
        best, table = min(best, round_best), min(table, table_geomean(done) or math.inf)
    return gained_at, stale


def _away(a: Attempt, done: list[Attempt]) -> bool:
    """More than one step from every config evaluated before it."""
    return all(distance((a.module, a.config), (b.module, b.config)) > 1 for b in done)


def rounds_without_gain(history: list[dict[str, Any]], threshold: float) -> int:
    """Evaluated rounds in a row, up to the last, that gained no more than ``threshold`` (``last_gain``)."""
    return last_gain(history, threshold)[1]


def rounds_without_news(history: list[dict[str, Any]], threshold: float) -> int:
    """Evaluated rounds in a row, up to the last, that gained no more than ``threshold`` on the best, nor on
    the table through configs more than one step from those evaluated before them (the rule's second half)."""
    return last_gain(history, threshold, new_regions=True)[1]


def top_configs(ctx: AgentContext, k: int, up_to_round: int | None = None) -> list[dict[str, Any]]:
    """The k fastest passing configs of the searchable modules (evaluated by ``up_to_round``)."""
    passing = [h for h in _searchable(ctx) if up_to_round is None or h.get("round", 0) <= up_to_round]
    return sorted(passing, key=lambda h: (h["geomean_us"], h.get("n", 0)))[:k]


def shape_leaders(ctx: AgentContext, gain: float) -> list[dict[str, Any]]:
    """The fastest config at each shape (and dtype) where it beats the best config by more than ``gain`` of
    the geomean, marked with the shape (``leads``), largest share first. The earliest config within ``gain``
    of the fastest stands for the shape, so that a later one faster by noise alone does not move it."""
    passing = _searchable(ctx)
    if not passing:
        return []
    attempts = [Attempt.model_validate(h) for h in passing]
    best = min(attempts, key=lambda a: (a.geomean_us, a.n))
    at_best = {shape_key(r.shape, str(r.dtype)): r.median_us for r in best.per_shape if r.median_us}
    fastest = fastest_at_each_shape(attempts)
    leaders: list[tuple[float, dict[str, Any]]] = []
    for key, (us, _, row) in fastest.items():
        if key not in at_best:
            continue
        share = (at_best[key] / us) ** (1 / len(fastest))
        if share <= 1 + gain:
            continue
        first = min((a for a in attempts if _time_at(a, key) <= us * (1 + gain)), key=lambda a: a.n)
        label = f"{shape_label(row.shape)} {row.dtype}" if row.dtype else shape_label(row.shape)
        record = next(h for h in passing if h.get("n") == first.n)
        leaders.append((share, {**record, "leads": label}))
    leaders.sort(key=lambda sl: -sl[0])
    return [leader for _, leader in leaders]


def _time_at(a: Attempt, key: tuple[str, str]) -> float:
    """The attempt's time at one shape (inf where it has none)."""
    times = (r.median_us for r in a.per_shape if r.median_us and shape_key(r.shape, str(r.dtype)) == key)
    return next(times, math.inf)


def _searchable(ctx: AgentContext) -> list[dict[str, Any]]:
    """The passing attempts of the modules the search walks."""
    return [
        h
        for h in ctx.history
        if h.get("verdict") == "pass" and h.get("geomean_us") and h.get("module") in ctx.search_spaces
    ]


def unexplored(ctx: AgentContext, parent: dict[str, Any], done: Seen) -> list[dict[str, Any]]:
    """The one-step moves from ``parent`` (nodes.expert.space.neighbours) not yet done."""
    moves = neighbours(parent["module"], parent["config"], ctx.search_spaces, list(ctx.search_spaces))
    return [m for m in moves if not done(m["module"], m["config"])]


def anchors(ctx: AgentContext, search: dict[str, Any]) -> list[dict[str, Any]]:
    """The configs the rule checks: the top ``converge_top`` as of the last round that gained (so that a best
    replaced by one within the noise, < converge_gain faster, does not move the check), then the shape
    leaders among the others (``shape_leaders``, each marked with the shape it leads)."""
    gained_at, _ = last_gain(ctx.history, search["converge_gain"])
    checked = top_configs(ctx, search["converge_top"], gained_at)
    for leader in shape_leaders(ctx, search["converge_gain"]):
        if leader.get("n") not in {h.get("n") for h in checked}:  # a config leading two shapes counts once
            checked.append(leader)
    return checked


def converged(ctx: AgentContext, search: dict[str, Any], done: Seen) -> str:
    """Why the search has converged ("" while it has not); ``done``: a point evaluated or ruled out."""
    rounds, gain = search["converge_rounds"], search["converge_gain"]
    quiet = rounds_without_news(ctx.history, gain)
    if quiet < rounds:
        return ""
    checked = anchors(ctx, search)
    if not checked or any(unexplored(ctx, parent, done) for parent in checked):
        return ""
    top = [h for h in checked if not h.get("leads")]
    leaders = [h for h in checked if h.get("leads")]
    names = ", ".join(f"#{h.get('n', 0)} {h['module']} {h['config']} ({h['geomean_us']:.2f} us)" for h in top)
    reason = f"every one-step neighbour of the top {len(top)} config(s) ({names})"
    if leaders:
        fastest = ", ".join(f"#{h.get('n', 0)} at {h['leads']}" for h in leaders)
        reason += (
            f" and of the fastest config at {len(leaders)} shape(s) where the table gains more than "
            f"{100 * gain:g}% ({fastest})"
        )
    return (
        f"{reason} has been evaluated, and {quiet} round(s) in a row gained no more than {100 * gain:g}% on the "
        f"best, nor on the per-shape table more than one step from the configs evaluated before"
    )
