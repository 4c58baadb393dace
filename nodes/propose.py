"""propose: ask the proposer for this round's candidates, in the mode the route says.

Modes: explore (after diagnose), fix (after a compile failure: the context carries the failed attempt
with its full log), reflect (after the reflect step), revise (after the critic: each proposal sent
back must come back answering every objection, or it is dropped).
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.types import Command

from loop.records import Review
from loop.reviews import take_revisions
from loop.roles import AgentContext, Proposal, Proposed, ProposeMode
from loop.routes import after_propose
from loop.state import RunState
from nodes.case_memory import out_of_space_starts
from nodes.expert import ExpertProposer
from nodes.runtime import module_source, searchable_modules
from nodes.step import Step, node
from nodes.view import agent_context
from tools.candidate import candidate_identity

OUTSIDE_NOTE = " [its config is outside this task's space]"


@node("propose")
def propose(state: RunState, step: Step) -> Command[Literal["critic", "human", "report"]]:
    mode: ProposeMode = state.route.mode if state.route.to == "propose" else "explore"
    revising = [r for r in state.proposals if r.status == "revise"] if mode == "revise" else []
    mode = "explore" if mode == "revise" and not revising else mode
    cases, memory = checked_cases(step)
    ctx = agent_context(state, step.task, step.folder, mode, retrieved_cases=cases, **asked(state, revising))
    origin = "expert" if state.model == "expert" else f"llm:{state.model}"
    answer = step.agents[1].propose(ctx)
    if revising:
        kept = [r for r in state.proposals if r.status == "approved"]
        new = [review_record(p, step, origin) for p in answer.proposals]
        batch, dropped = take_revisions(revising, kept, new)
    else:
        batch, dropped = fresh_reviews(step, ctx, answer, origin, mode), []
    fresh = [r for r in batch if r.status == "pending"]
    for r in fresh:
        p = r.proposal
        answers = f" | answers: {'; '.join(r.answers)}" if r.answers else ""
        step.audit(f"({mode} mode) {p.module} {p.config}: {p.rationale}{answers}")
    for r in dropped:
        step.audit(f"dropped {r.proposal.module} {r.proposal.config}: {r.objections[-1]}")
    step.emit("proposed", round=state.round, mode=mode, count=len(fresh))
    update: dict[str, Any] = {
        "proposals": batch,
        "rejected": dropped,
        "reflection": "" if mode == "reflect" else state.reflection,
    }
    if cases:  # the starting points now say whether they fit this space (report.json shows it)
        update["retrieved_cases"] = cases
    if memory is not None:
        update["memory"] = memory
    return step.go(after_propose(len(fresh), mode, answer), update)


def asked(state: RunState, revising: list[Review]) -> dict[str, Any]:
    """What the proposer is asked to answer: the proposals sent back and their objections, or, after
    the critic rejected everything, the reasons."""
    if revising:
        return {
            "revise": [{"proposal": r.proposal.model_dump(), "objections": r.objections} for r in revising],
            "objections": [o for r in revising for o in r.objections],
        }
    return {"objections": [o for r in state.proposals if r.status == "rejected" for o in r.objections]}


def review_record(prop: Proposal, step: Step, origin: str, **fields: Any) -> Review:
    """A proposal as the state tracks it through the critic: status, objections, answers, identity."""
    task, state = step.task, step.run
    known = prop.module in task.module_names or prop.module in state.extra_modules
    source = prop.source
    if source is None and known:
        source = module_source(task, state, step.folder, prop.module)
    return Review(
        proposal=prop,
        origin=origin,
        answers=list(prop.answers),
        identity=candidate_identity(source, prop.config) if source is not None else None,
        critic_round=state.critic_round,
        **fields,
    )


def fresh_reviews(step: Step, ctx: AgentContext, answer: Proposed, origin: str, mode: str) -> list[Review]:
    """The proposals of an explore, fix or reflect round; a model's explore round that falls short is
    filled by the search (``search.fill_llm_rounds``)."""
    reviews = [review_record(p, step, origin) for p in answer.proposals[: ctx.n_candidates]]
    if origin.startswith("llm:") and mode == "explore" and step.run.settings.search.fill_llm_rounds:
        filled = search_fill(ctx, step, reviews)
        if filled:
            step.audit(
                f"the model proposed {len(reviews)} of {ctx.n_candidates}: the search fills {len(filled)}"
            )
        reviews += filled
    return reviews


def search_fill(ctx: AgentContext, step: Step, reviews: list[Review]) -> list[Review]:
    """The search strategy fills the slots a model left empty in an explore round, so a model that
    proposes one idea per round still explores the space: the same random/local/restart search the
    expert policy runs, fed with the model's history and diagnosis."""
    missing = ctx.n_candidates - len(reviews)
    if missing <= 0 or not reviews:
        return []  # a model that proposed nothing keeps its own route (re-propose, then the human)
    seen = {r.identity for r in reviews}
    filled = []
    for prop in ExpertProposer(step.run.settings.search.model_dump()).propose(ctx).proposals:
        review = review_record(prop, step, "search")
        if review.identity not in seen:
            seen.add(review.identity)
            filled.append(review)
        if len(filled) == missing:
            break
    return filled


def checked_cases(step: Step) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The retrieved cases with each starting point marked ``in_space``; a config from another task (or
    from before the human narrowed the space) must fit this task's space to be tried. Skipped ones
    are logged once per run; returns the state's memory record when it gained a skipped case."""
    state, task = step.run, step.task
    cases = [dict(c) for c in state.retrieved_cases]
    if not cases:
        return cases, None
    skipped = {c["id"]: why for c, why in out_of_space_starts(cases, task, searchable_modules(task, state))}
    logged = dict(state.memory.get("skipped_cases") or {})
    for case in cases:
        if case.get("role") == "start":
            case["in_space"] = case["id"] not in skipped
            if not case["in_space"] and not case["summary"].endswith(OUTSIDE_NOTE):
                case["summary"] += OUTSIDE_NOTE  # what LLM roles read of a case
    new = {cid: why for cid, why in skipped.items() if cid not in logged}
    for cid, why in new.items():
        step.audit(f"memory: not starting from case {cid}: outside this task's space ({why})")
    if not new:
        return cases, None
    return cases, {**state.memory, "skipped_cases": {**logged, **new}}
