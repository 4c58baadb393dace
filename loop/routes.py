"""Where the loop goes next: every route of the graph is decided here, once, as a pure function.

The deciding nodes (propose, critic, evaluate, human) hand these what they found and follow the
``Decision`` they get back (``Command(goto=decision.to)``); a decision that ends the run carries its
``Stop``. After evaluate, first match wins:

| to        | condition                                                                        |
|-----------|----------------------------------------------------------------------------------|
| report    | target met, or budget (rounds / candidates / minutes) spent                     |
| human     | a candidate held for review (> `suspicious_speedup` x the baseline) would beat the best; `held_to_human` |
| report    | another round would end past the minutes (a held candidate's review starts no round, so it comes first) |
| human     | failed round and the same error type `same_error_to_human` rounds in a row       |
| human     | failed round and `failed_validations_to_human` failed (non-compile) rounds in a row |
| reflect   | failed round and `compile_failures_to_reflect` compile-failure rounds in a row   |
| reflect   | failed round and the same error type `same_error_to_reflect` rounds in a row     |
| propose   | failed round whose failures are compile failures (fix mode, full log)            |
| human     | no improvement > `stall_improvement` for `stall_rounds` rounds (stall)          |
| diagnose  | otherwise (re-profile the new best)                                               |

After critic: revise (while reviews are left) -> propose; any approved -> evaluate; a rejected human
candidate -> human; all rejected -> propose again while reviews are left, else human. After propose:
proposals -> critic; none and converged -> report; none -> human. After the human: stop -> report;
a candidate -> critic; otherwise diagnose, unless the target is met or the budget spent.
"""

from __future__ import annotations

from pydantic import BaseModel

from loop.budget import Budget, budget_of
from loop.records import Attempt, Decision, Review, Stop
from loop.roles import Proposed, ProposeMode
from loop.scoring import held_for_review, target_met
from loop.settings import RoutingSettings
from loop.state import RunState
from loop.streaks import Streaks
from tools.task import Target


class Standing(BaseModel):
    """Where the run stands when a route is chosen."""

    best: Attempt
    baseline: Attempt
    target: Target
    budget: Budget
    held: list[Attempt] = []
    stop: Stop | None = None

    def end(self, project: bool = True) -> Stop | None:
        """Why the run should end now (an earlier stop, the target, the budget), or None."""
        if self.stop is not None:
            return self.stop
        reason = target_met(self.best, self.baseline, self.target)
        if reason:
            return Stop(status="target_met", reason=reason)
        reason = self.budget.spent(project)
        if reason:
            return Stop(status="budget_exhausted", reason=reason)
        return None


def standing_of(state: RunState, target: Target) -> Standing:
    """Where the run stands as the state has it."""
    shown = [*state.held_reviewed, *state.approved]
    return Standing(
        best=state.best,
        baseline=state.baseline,
        target=target,
        budget=budget_of(state),
        held=held_for_review(state.attempts, shown, state.best.geomean_us),
        stop=state.stop,
    )


def ending(source: str, stop: Stop) -> Decision:
    return Decision(source=source, to="report", reason=f"{stop.status}: {stop.reason}", stop=stop)


def after_evaluate(standing: Standing, streaks: Streaks, rules: RoutingSettings) -> Decision:
    hard = standing.end(project=False)
    if hard:
        return ending("evaluate", hard)
    if standing.held and rules.held_to_human:
        base = standing.baseline.geomean_us or 0.0
        which = ", ".join(f"#{a.n} ({base / (a.geomean_us or 1):.1f}x the baseline)" for a in standing.held)
        return Decision(
            source="evaluate", to="human", reason=f"held for review: {which}; approve it after checking it"
        )
    projected = standing.end()
    if projected:
        return ending("evaluate", projected)
    return _after_round(streaks, rules)


def _after_round(streaks: Streaks, rules: RoutingSettings) -> Decision:
    """The failure ladders, then the stall, then the next round."""
    last, same = streaks.last_round, streaks.same_error

    def to(node: str, reason: str, mode: ProposeMode = "explore") -> Decision:
        return Decision(source="evaluate", to=node, reason=reason, mode=mode)

    if last is not None and not last.passed:
        if same.count >= rules.same_error_to_human:
            return to("human", f"{same.error_type} {same.count} rounds in a row")
        if streaks.failed_validations >= rules.failed_validations_to_human:
            return to("human", f"{streaks.failed_validations} failed validations in a row")
        if streaks.compile_failures >= rules.compile_failures_to_reflect:
            return to("reflect", f"{streaks.compile_failures} compile failures in a row", "reflect")
        if same.count >= rules.same_error_to_reflect:
            return to("reflect", f"{same.error_type} {same.count} rounds in a row", "reflect")
        if last.compile_failure:
            return to("propose", f"compile failure ({last.error_type}): fix it", "fix")
    if streaks.no_improvement >= rules.stall_rounds:
        pct = rules.stall_improvement * 100
        return to("human", f"stall: no improvement > {pct:g}% for {streaks.no_improvement} rounds")
    passed = last is None or last.passed
    return to("diagnose", "round passed" if passed else f"failed round ({last.error_type})")


def after_critic(reviews: list[Review], used: int, critic_rounds: int) -> Decision:
    """``used``: how many times this batch went back to the proposer already."""
    revise = [r for r in reviews if r.status == "revise"]
    approved = [r for r in reviews if r.status == "approved"]

    def to(node: str, reason: str, mode: ProposeMode = "explore") -> Decision:
        return Decision(source="critic", to=node, reason=reason, mode=mode)

    if revise and used < critic_rounds:
        return to("propose", f"{len(revise)} proposal(s) sent back with objections", "revise")
    if approved:
        return to("evaluate", f"{len(approved)} proposal(s) approved")
    if reviews and all(r.origin == "human" for r in reviews):
        objections = "; ".join(o for r in reviews for o in r.objections)
        return to("human", f"the human's candidate was rejected: {objections}")
    if used < critic_rounds:
        return to("propose", "every proposal was rejected: propose again")
    return to("human", f"no proposal survived the critic in {used + 1} review(s)")


def after_propose(proposed: int, mode: ProposeMode, answer: Proposed) -> Decision:
    """``proposed``: how many proposals go to the critic; ``answer``: what the proposer said."""
    if proposed or mode == "revise":
        return Decision(
            source="propose", to="critic", reason=f"{proposed} proposal(s) in {mode} mode", mode=mode
        )
    if answer.converged:
        return ending("propose", Stop(status="converged", reason=answer.reason))
    why = answer.reason or "no reason given"
    return Decision(source="propose", to="human", reason=f"the proposer has nothing to propose: {why}")


def after_human(action: str, standing: Standing, stop: Stop | None = None) -> Decision:
    """``action``: the answer's action; ``standing``: the run with the answer applied; ``stop``: why a
    stop ends the run when the unattended policy, not the human, answered it."""
    reason = f"human: {action}"
    if action == "stop":
        stop = stop or Stop(status="stopped_by_human", reason="the human chose to stop")
        return Decision(source="human", to="report", reason=reason, stop=stop)
    if action == "candidate":
        return Decision(source="human", to="critic", reason=reason)
    # An answer that resumes the search still keeps the budget: a held candidate's review can come when
    # the minutes left are too few for another round.
    end = standing.end()
    if end:
        return Decision(source="human", to="report", reason=reason, stop=end)
    return Decision(source="human", to="diagnose", reason=reason)
