"""Routing rules (DESIGN.md section 5) as pure functions over the state.

The deciding nodes (propose, critic, evaluate, human) call these, log the one-line reason in the
audit trail and return ``Command(goto=decision["to"])``. Keeping the rules here, free of side
effects, lets tests drive every edge from plain dicts.

After evaluate, first match wins:

| to        | condition                                                                        |
|-----------|----------------------------------------------------------------------------------|
| report    | target met, or budget (rounds / candidates / minutes) spent                     |
| human     | a candidate held for review (> `suspicious_speedup` x the baseline) would beat the best; `held_to_human` |
| human     | failed round and the same error type `same_error_to_human` rounds in a row       |
| human     | failed round and `failed_validations_to_human` failed (non-compile) rounds in a row |
| reflect   | failed round and `compile_failures_to_reflect` compile-failure rounds in a row   |
| reflect   | failed round and the same error type `same_error_to_reflect` rounds in a row     |
| propose   | failed round whose failures are compile failures (fix mode, full log)            |
| human     | no improvement > `stall_improvement` for `stall_rounds` rounds (stall)          |
| diagnose  | otherwise (re-profile the new best)                                               |

A round fails when none of its candidates passes; its error type is the most frequent one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, Literal, TypedDict

from tools.dispatch import geomean, shape_key
from tools.task import meets_min_dims

Node = Literal["setup", "diagnose", "propose", "critic", "evaluate", "reflect", "human", "report"]
Mode = Literal["explore", "fix", "reflect", "revise"]
Status = Literal["target_met", "budget_exhausted", "stopped_by_human", "converged", "awaiting_human"]


class Decision(TypedDict):
    source: str
    to: str
    mode: str
    reason: str


def decision(source: str, to: str, reason: str, mode: str = "explore") -> Decision:
    return {"source": source, "to": to, "mode": mode, "reason": reason}


# -- outcomes and counters -----------------------------------------------------------------------
def round_outcome(attempts: list[dict[str, Any]], compile_error_types: list[str]) -> dict[str, Any]:
    """Summary of one evaluated round: passed?, the dominant error type, compile failure?"""
    passed = any(a["verdict"] == "pass" for a in attempts) or not attempts
    errors = [a.get("error_type") or "unknown" for a in attempts if a["verdict"] != "pass"]
    dominant = Counter(errors).most_common(1)[0][0] if errors and not passed else None
    return {
        "passed": passed,
        "error_type": dominant,
        "compile_failure": dominant in compile_error_types if dominant else False,
        "failures": len(errors),
    }


def fresh_streaks() -> dict[str, Any]:
    return {
        "compile_failures": 0,
        "same_error": {"error_type": None, "count": 0},
        "failed_validations": 0,
        "no_improvement": 0,
        "last_round": None,
    }


def update_streaks(streaks: dict[str, Any], outcome: dict[str, Any], improved: bool) -> dict[str, Any]:
    """Counters after one more round. A passing round resets the failure ladders."""
    same = streaks["same_error"]
    if outcome["passed"]:
        compile_failures, failed_validations, same = 0, 0, {"error_type": None, "count": 0}
    else:
        compile_failures = streaks["compile_failures"] + 1 if outcome["compile_failure"] else 0
        failed_validations = 0 if outcome["compile_failure"] else streaks["failed_validations"] + 1
        count = same["count"] + 1 if same["error_type"] == outcome["error_type"] else 1
        same = {"error_type": outcome["error_type"], "count": count}
    return {
        "compile_failures": compile_failures,
        "same_error": same,
        "failed_validations": failed_validations,
        "no_improvement": 0 if improved else streaks["no_improvement"] + 1,
        "last_round": outcome,
    }


def improved(previous_best_us: float | None, new_best_us: float | None, threshold: float) -> bool:
    """True when the best got faster by more than ``threshold`` (relative)."""
    if new_best_us is None:
        return False
    if previous_best_us is None:
        return True
    return new_best_us < previous_best_us * (1 - threshold)


def fastest_at_each_shape(
    attempts: Iterable[dict[str, Any]],
) -> dict[tuple[str, str], tuple[float, dict[str, Any], dict[str, Any]]]:
    """(shape, dtype) -> (median us, attempt, per-shape row) of the fastest of ``attempts`` there (the
    caller picks which attempts count)."""
    fastest: dict[tuple[str, str], tuple[float, dict[str, Any], dict[str, Any]]] = {}
    for a in attempts:
        for row in a.get("per_shape") or []:
            us = row.get("median_us")
            key = shape_key(row["shape"], str(row.get("dtype")))
            if us and us > 0 and (key not in fastest or us < fastest[key][0]):
                fastest[key] = (us, a, row)
    return fastest


def table_geomean(attempts: list[dict[str, Any]], approved: Iterable[int] = ()) -> float | None:
    """Geomean over (shape, dtype) of the fastest passing time at each: what a per-bucket table of the
    configs evaluated so far takes (tools.dispatch builds that table at export). It can improve while
    the single best cannot: a config that wins some shapes and loses others is never the best.
    ``approved``: attempt numbers of held candidates a human approved, which count as passing."""
    approved = set(approved)
    counted = (a for a in attempts if a.get("verdict") == "pass" or a.get("n") in approved)
    fastest = fastest_at_each_shape(counted)
    return geomean(us for us, _, _ in fastest.values()) if fastest else None


# -- the end -------------------------------------------------------------------------------------
def target_met(state: dict[str, Any], target: dict[str, Any]) -> str | None:
    """Why the task's target is met, or None. Interpreted (CPU) timings never meet a target."""
    best, baseline = state.get("best") or {}, state.get("baseline") or {}
    if best.get("interpreted", True) or best.get("origin") == "baseline":
        return None
    if target.get("speedup") and baseline.get("geomean_us") and best.get("geomean_us"):
        speedup = baseline["geomean_us"] / best["geomean_us"]
        if speedup >= target["speedup"]:
            return f"speedup {speedup:.2f}x >= target {target['speedup']}x"
    if target.get("roofline_pct"):
        min_dims = target.get("min_dims")
        pct = judged_roofline(best.get("per_shape") or [], min_dims)
        if pct is not None and pct >= target["roofline_pct"]:
            return (
                f"{pct:.1f}% of the roofline at the lowest judged shape ({judged_at(min_dims)}) "
                f">= target {target['roofline_pct']:g}%"
            )
    return None


def judged_roofline(per_shape: list[dict[str, Any]], min_dims: dict[str, int] | None = None) -> float | None:
    """The roofline % a roofline target is judged on: the lowest among the per-shape rows (every dtype)
    whose shape has every dim >= ``min_dims`` (task.json target.min_dims; every row when None)."""
    pcts = [
        r["roofline_pct"]
        for r in per_shape
        if r.get("roofline_pct") is not None and meets_min_dims(r["shape"], min_dims)
    ]
    return min(pcts) if pcts else None


def judged_at(min_dims: dict[str, int] | None) -> str:
    """Which shapes a roofline target is judged at, in words: "B >= 8" or "all shapes"."""
    return ", ".join(f"{dim} >= {size}" for dim, size in min_dims.items()) if min_dims else "all shapes"


def budget_spent(state: dict[str, Any], project: bool = True) -> str | None:
    """Why the budget is spent, or None. With ``project``, also when another round would end past the
    minutes (the mean round so far); without, only the hard limits."""
    budget = state["settings"]["budget"]
    evaluated = sum(1 for a in state.get("attempts", []) if a.get("round", 0) > 0)
    minutes = state.get("active_s", 0.0) / 60
    if state.get("rounds_done", 0) >= budget["rounds"]:
        return f"{state.get('rounds_done', 0)} of {budget['rounds']} rounds done"
    if evaluated >= budget["candidates"]:
        return f"{evaluated} of {budget['candidates']} candidates evaluated"
    if minutes >= budget["minutes"]:
        return f"{minutes:.1f} of {budget['minutes']} minutes spent"
    # The minutes are a promise: a round is not started when rounds so far say it would end past them.
    per_round = mean_round_s(state) if project else None
    if per_round and minutes + per_round / 60 > budget["minutes"]:
        return (
            f"{minutes:.1f} of {budget['minutes']} minutes spent; a round takes {per_round / 60:.1f} "
            "minutes, so another would end past the budget"
        )
    return None


def mean_round_s(state: dict[str, Any]) -> float | None:
    """Mean active seconds per evaluated round: the run's active seconds since the baseline was timed
    (the setup progress entry's ``active_s``) over the rounds done. None before the first round, or for
    a run whose setup entry predates ``active_s``."""
    progress = state.get("progress") or [{}]
    setup_s = progress[0].get("active_s") if progress[0].get("round") == 0 else None
    rounds = state.get("rounds_done", 0)
    if setup_s is None or rounds < 1:
        return None
    return max(state.get("active_s", 0.0) - setup_s, 0.0) / rounds


def finish(state: dict[str, Any], target: dict[str, Any], project: bool = True) -> dict[str, str] | None:
    """{status, reason} when the run should end now, else None."""
    if state.get("stop"):
        return state["stop"]
    reason = target_met(state, target)
    if reason:
        return {"status": "target_met", "reason": reason}
    reason = budget_spent(state, project)
    if reason:
        return {"status": "budget_exhausted", "reason": reason}
    return None


def held_for_review(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Attempts held as suspicious speedups over the baseline (not beyond the roofline) that would beat
    the best and that no human has been shown yet."""
    seen = set(state.get("held_reviewed", [])) | set(state.get("approved", []))
    best_us = state["best"]["geomean_us"]
    return [
        a
        for a in state.get("attempts", [])
        if a.get("held") == "speedup"
        and a["n"] not in seen
        and a.get("geomean_us")
        and a["geomean_us"] < best_us
    ]


# -- decisions -----------------------------------------------------------------------------------
def after_evaluate(state: dict[str, Any], target: dict[str, Any]) -> Decision:
    done = finish(state, target, project=False)
    if done:
        return decision("evaluate", "report", f"{done['status']}: {done['reason']}")
    rules = state["settings"]["routing"]
    held = held_for_review(state)
    if held and rules.get("held_to_human", True):
        base = state["baseline"]["geomean_us"]
        which = ", ".join(f"#{a['n']} ({base / a['geomean_us']:.1f}x the baseline)" for a in held)
        return decision("evaluate", "human", f"held for review: {which}; approve it after checking it")
    # A review starts no round, so it comes before the projected end of the minutes.
    done = finish(state, target)
    if done:
        return decision("evaluate", "report", f"{done['status']}: {done['reason']}")
    streaks = state["streaks"]
    last = streaks["last_round"] or {"passed": True}
    same = streaks["same_error"]
    if not last["passed"]:
        if same["count"] >= rules["same_error_to_human"]:
            return decision("evaluate", "human", f"{same['error_type']} {same['count']} rounds in a row")
        if streaks["failed_validations"] >= rules["failed_validations_to_human"]:
            return decision(
                "evaluate", "human", f"{streaks['failed_validations']} failed validations in a row"
            )
        if streaks["compile_failures"] >= rules["compile_failures_to_reflect"]:
            return decision(
                "evaluate", "reflect", f"{streaks['compile_failures']} compile failures in a row", "reflect"
            )
        if same["count"] >= rules["same_error_to_reflect"]:
            return decision(
                "evaluate", "reflect", f"{same['error_type']} {same['count']} rounds in a row", "reflect"
            )
        if last["compile_failure"]:
            return decision("evaluate", "propose", f"compile failure ({last['error_type']}): fix it", "fix")
    if streaks["no_improvement"] >= rules["stall_rounds"]:
        pct = rules["stall_improvement"] * 100
        return decision(
            "evaluate", "human", f"stall: no improvement > {pct:g}% for {streaks['no_improvement']} rounds"
        )
    return decision(
        "evaluate", "diagnose", "round passed" if last["passed"] else f"failed round ({last['error_type']})"
    )


def after_critic(state: dict[str, Any]) -> Decision:
    proposals = state.get("proposals", [])
    critic_rounds = state["settings"]["critic_rounds"]
    used = state.get("critic_round", 0)
    revise = [p for p in proposals if p["status"] == "revise"]
    approved = [p for p in proposals if p["status"] == "approved"]
    if revise and used < critic_rounds:
        return decision("critic", "propose", f"{len(revise)} proposal(s) sent back with objections", "revise")
    if approved:
        return decision("critic", "evaluate", f"{len(approved)} proposal(s) approved")
    if proposals and all(p.get("origin") == "human" for p in proposals):
        objections = "; ".join(o for p in proposals for o in p.get("objections", []))
        return decision("critic", "human", f"the human's candidate was rejected: {objections}")
    if used < critic_rounds:
        return decision("critic", "propose", "every proposal was rejected: propose again")
    return decision("critic", "human", f"no proposal survived the critic in {used + 1} review(s)")


def after_propose(
    state: dict[str, Any], proposed: int, mode: str, stop_reason: str, converged: bool
) -> Decision:
    if proposed or mode == "revise":
        return decision("propose", "critic", f"{proposed} proposal(s) in {mode} mode", mode)
    if converged:
        return decision("propose", "report", f"converged: {stop_reason}")
    return decision(
        "propose", "human", f"the proposer has nothing to propose: {stop_reason or 'no reason given'}"
    )
