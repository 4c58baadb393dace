"""Escalation counters: how many rounds in a row failed, how, and how long nothing improved.

A round fails when none of its candidates passes; its error type is the most frequent one, and it is
a compile failure when that type is one of ``routing.compile_error_types``. A passing round resets the
failure ladders; a round that makes the best or the per-shape table faster resets the stall counter.
"""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel

from loop.records import Attempt


class RoundOutcome(BaseModel):
    """One evaluated round in brief."""

    passed: bool
    error_type: str | None = None
    compile_failure: bool = False
    failures: int = 0


class SameError(BaseModel):
    error_type: str | None = None
    count: int = 0


class Streaks(BaseModel):
    compile_failures: int = 0
    same_error: SameError = SameError()
    failed_validations: int = 0
    no_improvement: int = 0
    last_round: RoundOutcome | None = None

    def after(self, outcome: RoundOutcome, improved: bool) -> Streaks:
        """The counters after one more round."""
        if outcome.passed:
            compile_failures, failed_validations, same = 0, 0, SameError()
        else:
            compile_failures = self.compile_failures + 1 if outcome.compile_failure else 0
            failed_validations = 0 if outcome.compile_failure else self.failed_validations + 1
            repeated = self.same_error.error_type == outcome.error_type
            same = SameError(
                error_type=outcome.error_type, count=self.same_error.count + 1 if repeated else 1
            )
        return Streaks(
            compile_failures=compile_failures,
            same_error=same,
            failed_validations=failed_validations,
            no_improvement=0 if improved else self.no_improvement + 1,
            last_round=outcome,
        )


def round_outcome(attempts: list[Attempt], compile_error_types: list[str]) -> RoundOutcome:
    """Passed?, the dominant error type, compile failure? (an empty round counts as passed)."""
    passed = any(a.passed for a in attempts) or not attempts
    errors = [a.error_type or "unknown" for a in attempts if not a.passed]
    dominant = Counter(errors).most_common(1)[0][0] if errors and not passed else None
    return RoundOutcome(
        passed=passed,
        error_type=dominant,
        compile_failure=dominant in compile_error_types if dominant else False,
        failures=len(errors),
    )
