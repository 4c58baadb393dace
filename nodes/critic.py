"""critic: rule on each pending proposal (approve / revise / reject, with objections), then route."""

from __future__ import annotations

from typing import Literal

from langgraph.types import Command

from loop.reviews import close, ruled
from loop.routes import after_critic
from loop.state import RunState
from nodes.step import Step, node
from nodes.view import agent_context


@node("critic")
def critic(state: RunState, step: Step) -> Command[Literal["propose", "evaluate", "human"]]:
    reviews = list(state.proposals)
    pending = [i for i, r in enumerate(reviews) if r.status == "pending"]
    if pending:
        ctx = agent_context(state, step.task, step.folder)
        verdicts = step.agents[2].critique(ctx, [reviews[i].proposal for i in pending])
        if len(verdicts) != len(pending):
            raise ValueError(f"the critic ruled on {len(verdicts)} of {len(pending)} proposals")
        for i, verdict in zip(pending, verdicts, strict=True):
            reviews[i] = ruled(reviews[i], verdict)
            p = reviews[i].proposal
            why = f": {'; '.join(verdict.objections)}" if verdict.objections else ""
            step.audit(f"{verdict.verdict} {p.module} {p.config}{why}")
    used = state.critic_round
    decision = after_critic(reviews, used, state.settings.critic_rounds)
    closed = close(reviews, decision, used)
    approved = sum(r.status == "approved" for r in closed.proposals)
    step.emit("critic", round=state.round, approved=approved, rejected=len(closed.rejected))
    update = {"proposals": closed.proposals, "rejected": closed.rejected, "critic_round": closed.critic_round}
    return step.go(decision, update, key=f"route{used}")
