"""critic: rule on each pending proposal (approve / revise / reject, with objections), then route."""

from __future__ import annotations

import time
from typing import Any, Literal

from langgraph.config import get_stream_writer
from langgraph.runtime import Runtime
from langgraph.types import Command

from graph.routing import after_critic
from nodes.audit import audit
from nodes.roles import Proposal
from nodes.runtime import RunContext, agent_context, agents_for, run_task

STATUS = {"approve": "approved", "revise": "revise", "reject": "rejected"}


def critic(
    state: dict[str, Any], runtime: Runtime[RunContext]
) -> Command[Literal["propose", "evaluate", "human"]]:
    started = time.monotonic()
    task = run_task(state)
    records = [dict(r) for r in state.get("proposals", [])]
    pending = [r for r in records if r["status"] == "pending"]
    if pending:
        ctx = agent_context(state, task)
        verdicts = agents_for(state, runtime)[2].critique(
            ctx, [Proposal.model_validate(r["proposal"]) for r in pending]
        )
        if len(verdicts) != len(pending):
            raise ValueError(f"the critic ruled on {len(verdicts)} of {len(pending)} proposals")
        for record, verdict in zip(pending, verdicts, strict=True):
            record["status"] = STATUS[verdict.verdict]
            # A revision keeps the objections it answered; this ruling's objections follow them.
            record["objections"] = [*record["objections"], *verdict.objections]
            p = record["proposal"]
            why = f": {'; '.join(verdict.objections)}" if verdict.objections else ""
            audit(
                state["run_dir"],
                "critic",
                f"{verdict.verdict} {p['module']} {p['config']}{why}",
                round=state["round"],
            )

    used = state.get("critic_round", 0)
    routed = after_critic({**state, "proposals": records})
    rejected = [r for r in records if r["status"] == "rejected"]
    if routed["to"] != "propose":
        # No more reviews for this batch: what is still objected to is rejected.
        for r in records:
            if r["status"] == "revise":
                r["status"] = "rejected"
                r["objections"] = [*r["objections"], f"still objected to after {used + 1} review(s)"]
                rejected.append(r)
    keep = [r for r in records if r["status"] != "rejected"]
    audit(
        state["run_dir"],
        "critic",
        f"-> {routed['to']}: {routed['reason']}",
        round=state["round"],
        key=f"route{used}",
    )
    get_stream_writer()(
        {
            "event": "critic",
            "round": state["round"],
            "approved": sum(r["status"] == "approved" for r in keep),
            "rejected": len(rejected),
        }
    )
    return Command(
        goto=routed["to"],
        update={
            "proposals": keep if routed["to"] != "propose" or routed["mode"] == "revise" else records,
            "rejected": rejected,
            "critic_round": used + 1 if routed["to"] == "propose" else used,
            "route": routed,
            "active_s": time.monotonic() - started,
        },
    )
