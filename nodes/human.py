"""human: pause with a summary and the choices; apply the answer.

Answers are text, as typed at the terminal or passed with --answer (Studio may send the same text);
nodes/answers.py parses and checks them. Everything before ``interrupt()`` is idempotent: the node runs
again from its top on resume.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Literal

from langgraph.types import Command, interrupt

from loop.records import Attempt, ExtraModule, Pause
from loop.roles import Proposal
from loop.routes import after_human, standing_of
from loop.state import RunState
from loop.streaks import Streaks
from loop.unattended import PolicyAnswer, evaluated_so_far, policy_answer
from nodes.answers import CHOICES, AnswerError, parse_answer
from nodes.propose import review_record
from nodes.report import write_report
from nodes.step import Step, Update, node
from nodes.view import agent_context
from nodes.watch import watchdog_accepts
from tools.task import Task


# -- the node --------------------------------------------------------------------------------------
def pause_summary(state: RunState) -> dict[str, Any]:
    """What the human is shown: why the run paused, the best, the last errors, the held candidates."""
    best, baseline_us = state.best, state.baseline.geomean_us or 0.0

    def brief(a: Attempt, *keys: str) -> dict[str, Any]:
        return a.model_dump(mode="json", include={"n", "module", "config", *keys})

    failures = [a for a in state.attempts if not a.passed][-5:]
    held = [a for a in state.attempts if a.held == "speedup" and a.n not in state.approved and a.geomean_us]
    return {
        "why": state.route.reason,
        "round": state.round,
        "rounds_done": state.rounds_done,
        "baseline_us": baseline_us,
        "best": brief(best, "geomean_us", "interpreted")
        | {"speedup": round(baseline_us / (best.geomean_us or 1.0), 3)},
        "last_errors": [brief(a, "error_type", "message") for a in failures],
        "search_spaces": state.search_spaces,
        "forbid": state.forbid,
        # held for review and not approved yet: ``approve N`` accepts one
        "held": [
            brief(a, "geomean_us", "message") | {"speedup": round(baseline_us / (a.geomean_us or 1.0), 3)}
            for a in held
        ],
    }


@node("human")
def human(state: RunState, step: Step) -> Command[Literal["diagnose", "critic", "report"]]:
    summary = pause_summary(state)
    asked = len(state.attempts)
    standing = standing_of(state, step.task.spec.target)
    step.audit(f"paused: {summary['why']}", key=f"pause{asked}")
    if step.context.unattended:
        policy = unattended_answer(state, step, standing.held)
        parsed, by, stop = {"action": policy.answer}, "policy", policy.stop
        said = f"{policy.answer} (unattended: {policy.why})"
    else:
        write_report(step, "awaiting_human", paused=summary)
        answer, parsed = ask(state, step.task, summary)
        by, stop = "human", None
        said = answer if isinstance(answer, str) else json.dumps(answer)
    update = apply_answer(parsed, step)
    decision = after_human(
        parsed["action"], standing.model_copy(update={"best": update.get("best", state.best)}), stop
    )
    update["human"] = parsed
    update["pauses"] = [
        Pause(round=state.rounds_done, why=summary["why"], answer=said, by=by,
              evaluated=evaluated_so_far(state.attempts))
    ]  # fmt: skip
    # Whatever the answer, the held candidates were shown: they do not ask again.
    update["held_reviewed"] = sorted(set(state.held_reviewed) | {a.n for a in standing.held})
    return step.go(decision, update, key=f"answer{asked}", said=f"answer: {said} -> {decision.to}")


def unattended_answer(state: RunState, step: Step, held: list[Attempt]) -> PolicyAnswer:
    """The policy's answer: it asks the proposer what it would do next (has the search converged?)."""
    proposed = step.agents[1].propose(agent_context(state, step.task, step.folder, "explore"))
    return policy_answer(state.pauses, evaluated_so_far(state.attempts), held, proposed)


def ask(state: RunState, task: Task, summary: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Pause until an answer parses: (the answer as given, parsed). The node runs again from its top on
    resume, so everything before ``interrupt()`` is idempotent."""
    payload: dict[str, Any] = {
        "question": f"The run needs a decision ({summary['why']}).",
        "summary": summary,
        "choices": CHOICES,
        "error": None,
    }
    while True:
        answer = interrupt(payload)
        try:
            return answer, parse_answer(answer, state.search_spaces, state.attempts, task)
        except AnswerError as exc:
            payload = {**payload, "error": str(exc)}


def apply_answer(parsed: dict[str, Any], step: Step) -> Update:
    """The state's changes for an answer (where it leads is loop.routes.after_human's)."""
    action, state = parsed["action"], step.run
    if action == "stop":
        return {}
    if action == "approve":
        return approve(parsed["attempts"], step)
    if action in ("widen", "constrain"):
        return {**reshaped(parsed, state), "streaks": Streaks()}
    if action == "candidate":
        prop = Proposal(
            module=parsed["module"],
            config=parsed["config"],
            source=Path(parsed["path"]).read_text(),
            rationale=f"supplied by a human at round {state.round} ({Path(parsed['path']).name})",
            expected_effect="the human's judgement",
        )
        return {"proposals": [review_record(prop, step, "human")], "critic_round": 0, "streaks": Streaks()}
    return {"streaks": Streaks()}  # continue


def reshaped(parsed: dict[str, Any], state: RunState) -> Update:
    """The search space widened or constrained, the forbidden constructs extended."""
    spaces = copy.deepcopy(state.search_spaces)
    for change in parsed["changes"]:
        for m in change["modules"]:
            current = spaces[m][change["key"]]
            if parsed["action"] == "widen":
                spaces[m][change["key"]] = current + [v for v in change["values"] if v not in current]
            else:
                spaces[m][change["key"]] = [v for v in current if v in change["values"]]
    forbid = list(state.forbid)
    forbid += [c for c in parsed.get("forbid", []) if c not in forbid]
    return {"search_spaces": spaces, "forbid": forbid}


def approve(numbers: list[int], step: Step) -> Update:
    """Held candidates accepted as results: their result files become passes, their modules join the
    search, and the fastest faces the watchdog before it becomes the best."""
    state = step.run
    approved = [a for a in state.attempts if a.n in numbers]
    extra: dict[str, ExtraModule] = {name: e.model_copy() for name, e in state.extra_modules.items()}
    for a in approved:
        _persist_approval(step, a)
        if a.module in extra:
            extra[a.module].passed = True  # its module joins the search like a passing one
    update: Update = {
        "approved": sorted(set(state.approved) | set(numbers)),
        "streaks": Streaks(),
        "extra_modules": extra,
    }
    fastest = min(approved, key=lambda a: a.geomean_us or 0.0)
    if (fastest.geomean_us or 0.0) < (state.best.geomean_us or 0.0):
        # An approved candidate faces the watchdog like any new best; the approval stands either way.
        candidate = fastest.approved()
        if watchdog_accepts(step, candidate, state.best):
            update["best"] = candidate
        else:
            step.audit(f"approved #{candidate.n} stays out of the best: the watchdog kept #{state.best.n}")
    return update


def _persist_approval(step: Step, attempt: Attempt) -> None:
    """The approved result file becomes a pass (what export and later tools read), saying who approved."""
    result = step.folder.load_result(attempt.identity)
    if result is None or result.passed:
        return
    result.verdict, result.stage, result.error_type = "pass", "done", None
    result.message = f"held for review ({result.message}); approved by a human"
    result.details = {**result.details, "approved_by": "human"}
    step.folder.save_result(attempt.identity, result)
