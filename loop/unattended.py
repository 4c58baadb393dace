"""The unattended policy: how a run nobody watches answers its own pauses (graph.run --unattended).

First match wins:

| answer   | when                                                                                   |
|----------|----------------------------------------------------------------------------------------|
| stop     | the proposer says the search has converged (``Proposed.converged``): status converged   |
| stop     | nothing was evaluated since the policy's last answer: nothing new to try (converged)    |
| continue | otherwise: the search goes on inside the human's space, restarting on the plateau;      |
|          | candidates held for review stay failures (nobody approves them)                         |
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from loop.records import Attempt, Pause, Stop
from loop.roles import Proposed


class PolicyAnswer(BaseModel):
    answer: Literal["continue", "stop"]
    why: str
    stop: Stop | None = None


def evaluated_so_far(attempts: list[Attempt]) -> int:
    """Candidates evaluated after the baseline."""
    return sum(1 for a in attempts if a.round > 0)


def policy_answer(pauses: list[Pause], evaluated: int, held: list[Attempt], proposer: Proposed) -> PolicyAnswer:
    """``pauses``: the run's pauses so far; ``evaluated``: candidates evaluated now; ``held``: candidates
    held for review that this pause shows; ``proposer``: what the proposer would do next."""
    if proposer.converged:
        reason = proposer.reason or "the proposer has nothing left to try"
        return PolicyAnswer(answer="stop", why=reason, stop=Stop(status="converged", reason=reason))
    last = next((p for p in reversed(pauses) if p.by == "policy"), None)
    if last is not None and last.evaluated == evaluated:
        reason = (
            f"nothing was evaluated since the last unattended answer (after {last.why}): "
            "the search has nothing new to try"
        )
        return PolicyAnswer(answer="stop", why=reason, stop=Stop(status="converged", reason=reason))
    if held:
        numbers = ", ".join(f"#{a.n}" for a in held)
        return PolicyAnswer(answer="continue", why=f"{numbers} held for review stay failures")
    return PolicyAnswer(answer="continue", why="the search goes on inside the space, restarting on the plateau")
