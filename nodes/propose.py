"""propose: ask the proposer for this round's candidates, in the mode the route says.

Modes: explore (after diagnose), fix (after a compile failure: the context carries the failed attempt
with its full log), reflect (after the reflect step), revise (after the critic: each proposal sent
back must come back answering every objection, or it is dropped).
"""

from __future__ import annotations

import time
from typing import Any, Literal

from langgraph.config import get_stream_writer
from langgraph.runtime import Runtime
from langgraph.types import Command

from graph.routing import after_propose
from nodes.audit import audit
from nodes.case_memory import out_of_space_starts
from nodes.expert import ExpertProposer
from nodes.roles import AgentContext, Proposal
from nodes.runtime import (
    RunContext,
    agent_context,
    agents_for,
    module_source,
    run_task,
    searchable_modules,
)
from tools.candidate import candidate_identity
from tools.task import Task


def review_record(
    prop: Proposal, task: Task, state: dict[str, Any], origin: str, **fields: Any
) -> dict[str, Any]:
    """A proposal as the state tracks it through the critic: status, objections, answers, identity."""
    known = prop.module in task.module_names or prop.module in state.get("extra_modules", {})
    source = (
        prop.source
        if prop.source is not None
        else (module_source(task, state, prop.module) if known else None)
    )
    return {
        "proposal": prop.model_dump(),
        "origin": origin,
        "status": "pending",
        "objections": [],
        "answers": list(prop.answers),
        "identity": candidate_identity(source, prop.config) if source is not None else None,
        "critic_round": state.get("critic_round", 0),
        **fields,
    }


OUTSIDE_NOTE = " [its config is outside this task's space]"


def checked_cases(state: dict[str, Any], task: Task) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The retrieved cases with each starting point marked ``in_space``; a config from another task (or
    from before the human narrowed the space) must fit this task's space to be tried. Skipped ones
    are logged once per run; returns the state's memory record when it gained a skipped case."""
    cases = [dict(c) for c in state.get("retrieved_cases", [])]
    if not cases:
        return cases, None
    modules = searchable_modules(task, state)
    skipped = {c["id"]: why for c, why in out_of_space_starts(cases, task, modules)}
    memory = dict(state.get("memory") or {})
    logged = dict(memory.get("skipped_cases") or {})
    for case in cases:
        if case.get("role") == "start":
            case["in_space"] = case["id"] not in skipped
            if not case["in_space"] and not case["summary"].endswith(OUTSIDE_NOTE):
                case["summary"] += OUTSIDE_NOTE  # what LLM roles read of a case
    new = {cid: why for cid, why in skipped.items() if cid not in logged}
    for cid, why in new.items():
        audit(
            state["run_dir"],
            "propose",
            f"memory: not starting from case {cid}: outside this task's space ({why})",
            round=state["round"],
        )
    if not new:
        return cases, None
    return cases, {**memory, "skipped_cases": {**logged, **new}}


def search_fill(
    ctx: AgentContext, task: Task, state: dict[str, Any], records: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The search strategy fills the slots a model left empty in an explore round, so a model that
    proposes one idea per round still explores the space: the same random/local/restart search the
    expert policy runs, fed with the model's history and diagnosis."""
    missing = ctx.n_candidates - len(records)
    if missing <= 0 or not records:
        return []  # a model that proposed nothing keeps its own route (re-propose, then the human)
    seen = {r["identity"] for r in records}
    filled = []
    for prop in ExpertProposer(state["settings"]["search"]).propose(ctx):
        record = review_record(prop, task, state, "search")
        if record["identity"] not in seen:
            seen.add(record["identity"])
            filled.append(record)
        if len(filled) == missing:
            break
    return filled


def propose(
    state: dict[str, Any], runtime: Runtime[RunContext]
) -> Command[Literal["critic", "human", "report"]]:
    started = time.monotonic()
    task = run_task(state)
    route = state.get("route") or {}
    mode = route.get("mode", "explore") if route.get("to") == "propose" else "explore"
    current = state.get("proposals", [])
    revising = [p for p in current if p["status"] == "revise"] if mode == "revise" else []
    extra: dict[str, Any] = {}
    if revising:
        extra["revise"] = [{"proposal": p["proposal"], "objections": p["objections"]} for p in revising]
        extra["objections"] = [o for p in revising for o in p["objections"]]
    else:
        # Proposing again after the critic rejected everything: the reasons travel along.
        extra["objections"] = [o for p in current if p["status"] == "rejected" for o in p["objections"]]
        mode = "explore" if mode == "revise" else mode
    cases, memory = checked_cases(state, task)
    ctx = agent_context(state, task, mode, retrieved_cases=cases, **extra)
    proposer = agents_for(state, runtime)[1]
    origin = "expert" if (state.get("model") or "expert") == "expert" else f"llm:{state['model']}"
    new = proposer.propose(ctx)
    run_dir, rnd = state["run_dir"], state["round"]

    dropped: list[dict[str, Any]] = []
    if revising:
        records = [p for p in current if p["status"] == "approved"]
        answered: set[int] = set()
        for prop in new:
            i = prop.revises
            if i is None or not 0 <= i < len(revising) or i in answered:
                records.append(review_record(prop, task, state, origin))
                continue
            answered.add(i)
            objections = revising[i]["objections"]
            record = review_record(prop, task, state, origin, objections=objections)
            if len(prop.answers) < len(objections):
                record.update(status="rejected", objections=[*objections, "unanswered objection(s): dropped"])
                dropped.append(record)
            else:
                records.append(record)
        for i, item in enumerate(revising):
            if i not in answered:
                dropped.append(
                    {**item, "status": "rejected", "objections": [*item["objections"], "withdrawn"]}
                )
    else:
        records = [review_record(p, task, state, origin) for p in new[: ctx.n_candidates]]
        if (
            origin.startswith("llm:")
            and mode == "explore"
            and state["settings"]["search"].get("fill_llm_rounds", True)
        ):
            filled = search_fill(ctx, task, state, records)
            if filled:
                audit(
                    state["run_dir"],
                    "propose",
                    f"the model proposed {len(records)} of {ctx.n_candidates}: the search fills {len(filled)}",
                    round=state["round"],
                )
            records += filled

    fresh = [r for r in records if r["status"] == "pending"]
    for r in fresh:
        p = r["proposal"]
        answers = f" | answers: {'; '.join(r['answers'])}" if r["answers"] else ""
        audit(
            run_dir,
            "propose",
            f"({mode} mode) {p['module']} {p['config']}: {p['rationale']}{answers}",
            round=rnd,
        )
    for r in dropped:
        audit(
            run_dir,
            "propose",
            f"dropped {r['proposal']['module']} {r['proposal']['config']}: {r['objections'][-1]}",
            round=rnd,
        )
    stop_reason = getattr(proposer, "last_reason", "") or ""
    converged = bool(getattr(proposer, "converged", False)) and not fresh
    decision = after_propose(state, len(fresh), mode, stop_reason, converged)
    audit(run_dir, "propose", f"-> {decision['to']}: {decision['reason']}", round=rnd)
    get_stream_writer()({"event": "proposed", "round": rnd, "mode": mode, "count": len(fresh)})
    update: dict[str, Any] = {
        "proposals": records,
        "rejected": dropped,
        "reflection": "" if mode == "reflect" else state.get("reflection", ""),
        "route": decision,
        "active_s": time.monotonic() - started,
    }
    if cases:  # the starting points now say whether they fit this space (report.json shows it)
        update["retrieved_cases"] = cases
    if memory is not None:
        update["memory"] = memory
    if converged:
        update["stop"] = {"status": "converged", "reason": stop_reason}
    return Command(goto=decision["to"], update=update)
