"""The routing rules of loop/routes.py as pure functions: every row of the table.

The rules take typed records (loop.records, loop.state); each case here is written as a plain state
dict, as a checkpoint holds it, and the adapters below type it and hand the decision back as a dict.
"""

from __future__ import annotations

from typing import Any

import pytest
from graph_support import record
from graph_support import typed_state as typed

from loop import routes, scoring, streaks
from loop.records import Review
from loop.roles import Proposal, Proposed
from loop.settings import default_settings
from tools.task import Target


def after_evaluate(state: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    s = typed(state)
    standing = routes.standing_of(s, Target(**target))
    return routes.after_evaluate(standing, s.streaks, s.settings.routing).model_dump()


def finish(state: dict[str, Any], target: dict[str, Any]) -> dict[str, Any] | None:
    end = routes.standing_of(typed(state), Target(**target)).end()
    return end.model_dump() if end else None


def target_met(state: dict[str, Any], target: dict[str, Any]) -> str | None:
    s = typed(state)
    return scoring.target_met(s.best, s.baseline, Target(**target))


def after_critic(state: dict[str, Any]) -> dict[str, Any]:
    reviews = [
        Review.model_validate(
            {"proposal": Proposal(module="baseline.py", config={}, rationale="r"), "origin": "expert", **r}
        )  # fmt: skip
        for r in state["proposals"]
    ]
    used, rounds = state.get("critic_round", 0), state["settings"]["critic_rounds"]
    return routes.after_critic(reviews, used, rounds).model_dump()


def after_propose(_: dict, proposed: int, mode: str, reason: str, converged: bool) -> dict[str, Any]:
    return routes.after_propose(proposed, mode, Proposed(reason=reason, converged=converged)).model_dump()


def fresh_streaks() -> dict[str, Any]:
    return streaks.Streaks().model_dump()


def round_outcome(attempts: list[dict[str, Any]], compile_error_types: list[str]) -> dict[str, Any]:
    return streaks.round_outcome([record(a) for a in attempts], compile_error_types).model_dump()


def update_streaks(current: dict[str, Any], outcome: dict[str, Any], improved: bool) -> dict[str, Any]:
    return (
        streaks.Streaks.model_validate(current).after(streaks.RoundOutcome(**outcome), improved).model_dump()
    )


def table_geomean(attempts: list[dict[str, Any]], approved: list[int] | tuple = ()) -> float | None:
    return scoring.table_geomean([record(a) for a in attempts], approved)


COMPILE = ["syntax_error", "compile_error", "resource_limit", "no_kernel_launched"]


def settings() -> dict[str, Any]:
    s = default_settings()
    s["budget"] = {"rounds": 10, "candidates_per_round": 2, "minutes": 30, "candidates": 20}
    return s


def attempt(verdict: str = "pass", error_type: str | None = None, round_: int = 1, us: float = 10.0) -> dict:
    return {
        "verdict": verdict,
        "error_type": error_type,
        "round": round_,
        "geomean_us": us if verdict == "pass" else None,
    }


def state_after(
    rounds: list[list[dict]], improvements: list[bool] | None = None, **extra: Any
) -> dict[str, Any]:
    """A state whose streaks went through ``rounds`` (each a list of attempts)."""
    streaks = fresh_streaks()
    improvements = improvements or [True] * len(rounds)
    for attempts, better in zip(rounds, improvements, strict=True):
        streaks = update_streaks(streaks, round_outcome(attempts, COMPILE), better)
    base = {"settings": settings(), "streaks": streaks, "rounds_done": len(rounds), "attempts": [],
            "active_s": 0.0, "baseline": {"geomean_us": 100.0}, "best": {"geomean_us": 100.0, "interpreted": True}}  # fmt: skip
    return {**base, **extra}


def route(state: dict[str, Any], target: dict | None = None) -> tuple[str, str]:
    d = after_evaluate(state, target or {})
    return d["to"], d["mode"]


FAIL = attempt("fail", "compile_error")
MISMATCH = attempt("fail", "mismatch")
NAN = attempt("fail", "nan")


def test_round_outcome_dominant_error_and_pass():
    assert round_outcome([attempt(), FAIL], COMPILE)["passed"] is True
    out = round_outcome([MISMATCH, FAIL, attempt("fail", "compile_error")], COMPILE)
    assert out == {"passed": False, "error_type": "compile_error", "compile_failure": True, "failures": 3}


def test_a_passing_round_goes_to_diagnose():
    assert route(state_after([[attempt()]])) == ("diagnose", "explore")


def test_compile_failure_goes_to_propose_in_fix_mode():
    assert route(state_after([[FAIL]], [False])) == ("propose", "fix")


def test_three_compile_failures_of_different_types_go_to_reflect():
    rounds = [[attempt("fail", "syntax_error")], [FAIL], [attempt("fail", "resource_limit")]]
    assert route(state_after(rounds, [False] * 3)) == ("reflect", "reflect")


def test_same_error_twice_reflects_and_three_times_asks_the_human():
    assert route(state_after([[MISMATCH], [MISMATCH]], [False] * 2)) == ("reflect", "reflect")
    # A compile error repeated: the second time reflects, the third asks the human.
    assert route(state_after([[FAIL], [FAIL]], [False] * 2))[0] == "reflect"
    assert route(state_after([[FAIL], [FAIL], [FAIL]], [False] * 3))[0] == "human"


def test_three_failed_validations_in_a_row_ask_the_human():
    rounds = [[MISMATCH], [NAN], [attempt("fail", "input_modified")]]
    assert route(state_after(rounds, [False] * 3))[0] == "human"


def test_a_pass_resets_the_failure_ladders():
    rounds = [[MISMATCH], [NAN], [attempt()], [MISMATCH]]
    s = state_after(rounds, [False, False, True, False])
    assert s["streaks"]["failed_validations"] == 1 and s["streaks"]["same_error"]["count"] == 1
    assert route(s)[0] == "diagnose"


def test_stall_asks_the_human():
    s = state_after([[attempt()]] * 3, [False] * 3)
    d = after_evaluate(s, {})
    assert d["to"] == "human" and "stall" in d["reason"]
    assert route(state_after([[attempt()]] * 3, [False, False, True]))[0] == "diagnose"


def test_a_failed_round_takes_its_ladder_before_the_stall():
    s = state_after([[attempt()], [attempt()], [FAIL]], [False] * 3)
    assert route(s) == ("propose", "fix")


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"rounds_done": 10}, "rounds"),
        ({"attempts": [attempt(round_=1)] * 20}, "candidates"),
        ({"active_s": 30 * 60.0}, "minutes"),
    ],
)
def test_budget_spent_goes_to_report(extra, why):
    s = state_after([[FAIL]], [False], **extra)
    d = after_evaluate(s, {})
    assert d["to"] == "report" and why in d["reason"]
    assert finish(s, {})["status"] == "budget_exhausted"


def test_a_round_that_would_end_past_the_minutes_is_not_started():
    # As evaluate hands it over after round 4: setup took 60 s (the setup progress entry says when it
    # ended), four rounds 400 s, 7.7 of 8 minutes spent; another round would end at 9.3.
    progress = [{"round": 0, "active_s": 60.0}] + [{"round": r} for r in range(1, 4)]
    s = state_after([[attempt()]] * 4, [True] * 4, progress=progress, active_s=460.0)
    s["settings"]["budget"]["minutes"] = 8
    d = after_evaluate(s, {})
    assert d["to"] == "report" and "another would end past the budget" in d["reason"]
    assert "a round takes 1.7 minutes" in d["reason"]
    assert finish(s, {})["status"] == "budget_exhausted"
    # After round 1 alone (2.7 minutes spent): its 100 s already say that a second does not fit in 3.5.
    one = state_after([[attempt()]], [True], progress=progress[:1], active_s=160.0)
    one["settings"]["budget"]["minutes"] = 3.5
    assert "another would end past the budget" in after_evaluate(one, {})["reason"]
    s["settings"]["budget"]["minutes"] = 9.5  # room for one more round: the search goes on
    assert route(s)[0] == "diagnose"
    # A run whose setup entry predates active_s (resumed from an old checkpoint): minutes alone decide.
    s["settings"]["budget"]["minutes"] = 8
    old = [{k: v for k, v in p.items() if k != "active_s"} for p in progress]
    assert route({**s, "progress": old})[0] == "diagnose"


def test_a_held_candidate_is_shown_before_the_projected_end_of_the_minutes():
    progress = [{"round": 0, "active_s": 60.0}]
    held = {"n": 3, "held": "speedup", "geomean_us": 5.0, "round": 1}
    s = state_after([[attempt()]], [True], progress=progress, active_s=160.0, attempts=[held])
    s["settings"]["budget"]["minutes"] = 3.5  # 2.7 spent, a round takes 1.7
    d = after_evaluate(s, {})
    assert d["to"] == "human" and "held for review" in d["reason"]
    # Once it has been shown, the projection ends the run.
    assert route({**s, "held_reviewed": [3]})[0] == "report"
    # The hard limits still come first: spent minutes end the run with the review undone, as before.
    assert after_evaluate({**s, "active_s": 150.0 * 60}, {})["to"] == "report"


def test_target_met_goes_to_report_but_never_on_interpreted_timings():
    best = {"geomean_us": 50.0, "interpreted": False, "origin": "expert",
            "per_shape": [{"shape": {"M": 4096}, "roofline_pct": 93.0}, {"shape": {"M": 1}, "roofline_pct": 20.0}]}  # fmt: skip
    s = state_after([[attempt()]], best=best)
    assert finish(s, {"speedup": 1.5})["status"] == "target_met"
    assert after_evaluate(s, {"roofline_pct": 92, "min_dims": {"M": 4096}})["to"] == "report"
    assert finish(s, {"roofline_pct": 92}) is None  # without min_dims M=1 (20%) is judged too
    assert finish(s, {"roofline_pct": 95, "min_dims": {"M": 4096}}) is None
    assert finish({**s, "best": {**best, "interpreted": True}}, {"speedup": 1.5}) is None


def gqa_best(b8: float, b1: float = 30.0) -> dict[str, Any]:
    """A GPU best of a gqa_decode-like task (B=1, 8, 32, 128), roofline % per shape."""
    pcts = {1: b1, 8: b8, 32: 88.0, 128: 89.0}
    rows = [{"shape": {"B": b, "S": 1024}, "dtype": "bfloat16", "roofline_pct": p} for b, p in pcts.items()]
    return {"geomean_us": 50.0, "interpreted": False, "origin": "expert", "per_shape": rows}


def test_the_roofline_target_waits_for_every_judged_shape_not_only_the_largest():
    target = {"roofline_pct": 85, "min_dims": {"B": 8}}
    lagging = state_after([[attempt()]], best=gqa_best(b8=82.0))  # the H200 run that stopped after 1 round
    assert target_met(lagging, target) is None
    assert after_evaluate(lagging, target)["to"] != "report"
    reached = gqa_best(b8=86.0)  # B=1 at 30% is not judged
    reason = target_met(state_after([[attempt()]], best=reached), target)
    assert reason == "86.0% of the copy bandwidth at the lowest judged shape (B >= 8) >= target 85%"
    assert finish(state_after([[attempt()]], best=reached), target)["status"] == "target_met"
    fp32 = {"shape": {"B": 128, "S": 1024}, "dtype": "float32", "roofline_pct": 70.0}  # every dtype counts
    fp32_lags = {**reached, "per_shape": [*reached["per_shape"], fp32]}
    assert target_met(state_after([[attempt()]], best=fp32_lags), target) is None


def test_without_min_dims_every_shape_is_judged():
    target = {"roofline_pct": 85, "min_dims": None}  # what Target.model_dump() gives when absent
    assert target_met(state_after([[attempt()]], best=gqa_best(b8=86.0)), target) is None  # B=1 at 30%
    reason = target_met(state_after([[attempt()]], best=gqa_best(b8=86.0, b1=87.0)), target)
    assert reason == "86.0% of the copy bandwidth at the lowest judged shape (all shapes) >= target 85%"


def unseen_best(ceilings: dict[int, float]) -> dict[str, Any]:
    """A GPU best of a task written without min_dims (scale_shift_cpu_gen on the H200): M=1 moves 86 kB
    and reads 0.4% of the copy bandwidth, as does a copy of its bytes; the large shapes stream."""
    copy_pct = {1: 0.4, 2048: 97.0, 16384: 98.8}
    rows = [{"shape": {"M": m, "N": 21504}, "dtype": "bfloat16", "roofline_pct": copy_pct[m], "ceiling_pct": c}
            for m, c in ceilings.items()]  # fmt: skip
    return {"geomean_us": 50.0, "interpreted": False, "origin": "expert", "per_shape": rows}


def test_a_roofline_target_without_min_dims_is_judged_against_each_sizes_own_ceiling():
    target = {"roofline_pct": 90, "min_dims": None}
    at_ceiling = state_after([[attempt()]], best=unseen_best({1: 96.0, 2048: 98.0, 16384: 99.5}))
    reason = target_met(at_ceiling, target)
    assert reason == "96.0% of the same-size ceiling at the lowest judged shape (all shapes) >= target 90%"
    assert finish(at_ceiling, target)["status"] == "target_met"
    lagging = state_after([[attempt()]], best=unseen_best({1: 96.0, 2048: 81.0, 16384: 99.5}))
    assert target_met(lagging, target) is None  # M=2048 at 81% of what a copy of its bytes reaches
    scoped = {"roofline_pct": 90, "min_dims": {"M": 4096}}  # min_dims still scopes it
    assert target_met(lagging, scoped) == (
        "99.5% of the same-size ceiling at the lowest judged shape (M >= 4096) >= target 90%"
    )


def test_after_critic_revise_approve_repropose_and_human():
    def st(statuses: list[str], used: int = 0) -> dict[str, Any]:
        return {"settings": settings(), "critic_round": used, "proposals": [{"status": s} for s in statuses]}

    assert (after_critic(st(["approved", "revise"]))["to"], after_critic(st(["revise"]))["mode"]) == (
        "propose",
        "revise",
    )
    assert after_critic(st(["approved", "revise"], used=2))["to"] == "evaluate"
    assert after_critic(st(["approved", "rejected"]))["to"] == "evaluate"
    assert after_critic(st(["rejected"]))["to"] == "propose"
    assert after_critic(st(["rejected"], used=2))["to"] == "human"
    human = {
        **st([]),
        "proposals": [{"status": "rejected", "origin": "human", "objections": ["forbidden: x"]}],
    }
    assert after_critic(human)["to"] == "human" and "forbidden: x" in after_critic(human)["reason"]


def test_after_propose():
    assert after_propose({}, 2, "explore", "", False)["to"] == "critic"
    assert after_propose({}, 0, "revise", "", False)["to"] == "critic"
    assert after_propose({}, 0, "explore", "near the roofline", True)["to"] == "report"
    assert after_propose({}, 0, "explore", "space exhausted", False)["to"] == "human"


def test_the_table_geomean_takes_each_shapes_fastest_passing_time():
    def attempt(verdict: str, *times: float) -> dict:
        shapes = [{"M": 1}, {"M": 8}]
        rows = [{"shape": s, "dtype": "bfloat16", "median_us": t} for s, t in zip(shapes, times, strict=True)]
        return {"verdict": verdict, "per_shape": rows}

    assert table_geomean([]) is None
    attempts = [attempt("pass", 100.0, 100.0), attempt("pass", 25.0, 400.0), attempt("fail", 1.0, 1.0)]
    assert table_geomean(attempts) == pytest.approx(50.0)  # sqrt(25 x 100): the failure is no time
    held = attempts[2] | {"n": 2}  # held for review (a failure) until a human approves it
    assert table_geomean([*attempts[:2], held], approved=[2]) == pytest.approx(1.0)
    fp32 = {"verdict": "pass", "per_shape": [{"shape": {"M": 1}, "dtype": "float32", "median_us": 1.0}]}
    assert table_geomean([*attempts, fp32]) == pytest.approx((25.0 * 100.0 * 1.0) ** (1 / 3))
