"""The budget: rounds, candidates and active minutes, whichever is spent first.

The minutes are a promise: a round is not started when the rounds so far say it would end past them
(the mean round: the active time since the baseline was timed, over the rounds done), and a round's
candidates are checked only until they run out (``seconds_left``, passed to the judge by nodes/evaluate).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, Field

from loop.settings import BudgetSettings
from loop.state import RunState


class Budget(BaseModel):
    """What the run has spent against its limits."""

    limits: BudgetSettings
    rounds_done: int = 0
    evaluated: int = Field(default=0, description="candidates evaluated after the baseline")
    active_s: float = Field(default=0.0, description="seconds spent inside nodes (human waits excluded)")
    setup_s: float | None = Field(
        default=None, description="the active seconds once the baseline was timed (None: not recorded)"
    )

    def after_round(self, evaluated: int, active_s: float) -> Budget:
        """The budget once one more round of ``evaluated`` candidates took ``active_s`` seconds."""
        return self.model_copy(
            update={
                "rounds_done": self.rounds_done + 1,
                "evaluated": self.evaluated + evaluated,
                "active_s": self.active_s + active_s,
            }
        )

    @property
    def candidates_left(self) -> int:
        return max((self.limits.candidates or 0) - self.evaluated, 0)

    def seconds_left(self) -> float:
        """Active seconds left of the minutes budget (0 when spent)."""
        return max(self.limits.minutes * 60 - self.active_s, 0.0)

    def mean_round_s(self) -> float | None:
        """Mean active seconds per evaluated round since the baseline was timed; None before the first
        round, or for a run whose setup did not record its active seconds."""
        if self.setup_s is None or self.rounds_done < 1:
            return None
        return max(self.active_s - self.setup_s, 0.0) / self.rounds_done

    def eta_s(self) -> float | None:
        """Active seconds the rest of the run should take at the mean round so far (within the minutes
        left); None before the first round or when no round is left."""
        per_round = self.mean_round_s()
        limits = self.limits
        rounds_left = limits.rounds - self.rounds_done
        if limits.candidates:
            rounds_left = min(rounds_left, math.ceil(self.candidates_left / limits.candidates_per_round))
        if per_round is None or rounds_left <= 0:
            return None
        return min(per_round * rounds_left, max(limits.minutes * 60 - self.active_s, 0.0))

    def spent(self, project: bool = True) -> str | None:
        """Why the budget is spent, or None. With ``project``, also when another round would end past
        the minutes; without, only the hard limits."""
        limits, minutes = self.limits, self.active_s / 60
        if self.rounds_done >= limits.rounds:
            return f"{self.rounds_done} of {limits.rounds} rounds done"
        if self.evaluated >= (limits.candidates or 0):
            return f"{self.evaluated} of {limits.candidates} candidates evaluated"
        if minutes >= limits.minutes:
            return f"{minutes:.1f} of {limits.minutes} minutes spent"
        per_round = self.mean_round_s() if project else None
        if per_round and minutes + per_round / 60 > limits.minutes:
            return (
                f"{minutes:.1f} of {limits.minutes} minutes spent; a round takes {per_round / 60:.1f} "
                "minutes, so another would end past the budget"
            )
        return None


def budget_of(state: RunState) -> Budget:
    """The run's budget as the state has it."""
    setup = state.progress[0] if state.progress else None
    return Budget(
        limits=state.settings.budget,
        rounds_done=state.rounds_done,
        evaluated=sum(1 for a in state.attempts if a.round > 0),
        active_s=state.active_s,
        setup_s=setup.active_s if setup is not None and setup.round == 0 else None,
    )
