"""human: pause with a summary and the choices; apply the answer.

Answers (text, as typed at the terminal or passed with --answer; Studio may send the same text):
    continue                                  resume the search as it is
    stop                                      write the report and end
    widen [MODULE:]KEY=V1,V2 ...              add values to the search space
    constrain forbid=CONSTRUCT[,...]          forbid constructs in new code
    constrain [MODULE:]KEY=V1,V2 ...          keep only these values of a key
    candidate PATH [MODULE] [CONFIG-JSON]     evaluate your own kernel file (through the critic)
    approve N [N ...]                         accept candidates held for review (suspicious speedups)
Everything before ``interrupt()`` is idempotent: the node runs again from its top on resume.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from langgraph.types import Command, interrupt

from loop.records import Attempt, ExtraModule
from loop.roles import Proposal
from loop.routes import after_human, standing_of
from loop.state import RunState
from loop.streaks import Streaks
from nodes.propose import review_record
from nodes.report import write_report
from nodes.step import Step, Update, node
from nodes.watch import watchdog_accepts
from tools.task import Task

CHOICES = [
    "continue: resume the search as it is",
    "stop: write the report and end",
    "widen [MODULE:]KEY=V1,V2: add values to the search space (e.g. widen num_warps=32)",
    "constrain forbid=CONSTRUCT | constrain [MODULE:]KEY=V1,V2: forbid a construct, or keep only these",
    "candidate PATH [MODULE] [CONFIG-JSON]: evaluate your own kernel file (it goes through the critic)",
    "approve N [N ...]: accept candidates held for review (more than the suspicious-speedup limit faster "
    "than the baseline, within the roofline) as results, after you checked them",
]
ACTIONS = ("continue", "stop", "widen", "constrain", "candidate", "approve")
CANDIDATE_ARGS = re.compile(
    r"""^(?P<path>"[^"]+"|'[^']+'|\S+)(?:\s+(?P<module>[^\s{]+\.py))?\s*(?P<config>\{.*\})?\s*$"""
)


class AnswerError(ValueError):
    """The human's answer cannot be applied; the message says why and what would work."""


# -- parsing -----------------------------------------------------------------------------------------
def _values(raw: str) -> list[Any]:
    return [yaml.safe_load(v) for v in raw.split(",") if v.strip()]


def _assignment(token: str, spaces: dict[str, dict[str, list]]) -> tuple[list[str], str, list[Any]]:
    if "=" not in token:
        raise AnswerError(f"{token!r}: expected KEY=V1,V2 (optionally MODULE:KEY=...)")
    lhs, raw = token.split("=", 1)
    module, key = lhs.split(":", 1) if ":" in lhs else (None, lhs)
    if module is not None and module not in spaces:
        raise AnswerError(f"{token!r}: unknown module {module!r} (modules: {', '.join(spaces)})")
    modules = [module] if module else [m for m, space in spaces.items() if key in space]
    if not modules or any(key not in spaces[m] for m in modules):
        known = sorted({k for space in spaces.values() for k in space})
        raise AnswerError(f"{token!r}: unknown search-space key {key!r} (keys: {', '.join(known)})")
    values = _values(raw)
    if not values:
        raise AnswerError(f"{token!r}: no values given")
    return modules, key, values


def parse_answer(
    answer: Any, spaces: dict[str, dict[str, list]], attempts: list[Attempt], task: Task
) -> dict[str, Any]:
    """The answer as {action, ...}, against the run's search spaces and attempts; raises AnswerError
    naming what is wrong."""
    if isinstance(answer, dict):
        answer = answer.get("answer", "")
    if not isinstance(answer, str) or not answer.strip():
        raise AnswerError(f"an answer is one of: {', '.join(ACTIONS)}")
    tokens = answer.split()
    action, args = tokens[0].lower(), tokens[1:]
    if action in ("continue", "stop"):
        if args:
            raise AnswerError(f"{action} takes no arguments")
        return {"action": action}
    if action == "widen":
        if not args:
            raise AnswerError("widen needs KEY=V1,V2, e.g. widen num_warps=32")
        changes = []
        for token in args:
            modules, key, values = _assignment(token, spaces)
            changes.append({"modules": modules, "key": key, "values": values})
        return {"action": "widen", "changes": changes}
    if action == "constrain":
        if not args:
            raise AnswerError("constrain needs forbid=CONSTRUCT or KEY=V1,V2")
        forbid, changes = [], []
        for token in args:
            if token.startswith("forbid="):
                forbid += [c.strip() for c in token.split("=", 1)[1].split(",") if c.strip()]
                continue
            modules, key, values = _assignment(token, spaces)
            for m in modules:
                outside = [v for v in values if v not in spaces[m][key]]
                if outside:
                    raise AnswerError(
                        f"{token!r}: {outside} not in {m}'s {key} values {spaces[m][key]}; "
                        "constrain only keeps "
                        "values (use widen to add)"
                    )
            changes.append({"modules": modules, "key": key, "values": values})
        return {"action": "constrain", "forbid": forbid, "changes": changes}
    if action == "candidate":
        return _parse_candidate(answer.strip()[len(tokens[0]) :].strip(), spaces, task)
    if action == "approve":
        return _parse_approve(args, attempts)
    raise AnswerError(f"unknown answer {tokens[0]!r}; choose one of: {', '.join(ACTIONS)}")


def _parse_approve(args: list[str], attempts: list[Attempt]) -> dict[str, Any]:
    """``approve N [N ...]`` (``#N`` or comma lists too): every N must be a candidate held as a speedup."""
    numbers = [t.strip().lstrip("#") for arg in args for t in arg.split(",") if t.strip()]
    if not numbers:
        raise AnswerError("approve needs the number of a held candidate, e.g. approve 12")
    by_number = {a.n: a for a in attempts}
    chosen = []
    for raw in numbers:
        if not raw.isdigit() or int(raw) not in by_number:
            raise AnswerError(f"approve {raw}: no evaluated candidate #{raw}")
        attempt = by_number[int(raw)]
        if attempt.held == "roofline":
            raise AnswerError(
                f"approve {raw}: #{raw} measured faster than the copy bandwidth, so the measurement "
                "itself is wrong; it cannot be approved"
            )
        if attempt.held != "speedup":
            raise AnswerError(f"approve {raw}: #{raw} was not held for review ({attempt.verdict})")
        chosen.append(int(raw))
    return {"action": "approve", "attempts": chosen}


def _parse_candidate(text: str, spaces: dict[str, dict[str, list]], task: Task) -> dict[str, Any]:
    """``PATH [MODULE] [CONFIG-JSON]``; a PATH with spaces is quoted."""
    match = CANDIDATE_ARGS.match(text)
    if not match:
        raise AnswerError("candidate needs a file: candidate path/to/kernel.py [MODULE] [CONFIG-JSON]")
    path = Path(match["path"].strip("'\"")).expanduser().resolve()
    if not path.is_file():
        raise AnswerError(f"candidate file not found: {path}")
    module = match["module"] or task.baseline_name
    if module not in spaces:
        raise AnswerError(f"unknown module {module!r} (modules: {', '.join(spaces)})")
    if match["config"]:
        try:
            config = json.loads(match["config"])
        except json.JSONDecodeError as exc:
            raise AnswerError(f"candidate config is not JSON: {exc}") from None
        if not isinstance(config, dict):
            raise AnswerError("candidate config must be a JSON object, e.g. '{\"num_warps\": 8}'")
    else:
        config = task.default_config(module) if module in task.module_names else task.default_config()
    return {"action": "candidate", "path": str(path), "module": module, "config": config}


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
    write_report(step, "awaiting_human", paused=summary)
    asked = len(state.attempts)
    step.audit(f"paused: {summary['why']}", key=f"pause{asked}")
    answer, parsed = ask(state, step.task, summary, step.folder.root)
    update = apply_answer(parsed, step)
    standing = standing_of(state, step.task.spec.target)
    decision = after_human(
        parsed["action"], standing.model_copy(update={"best": update.get("best", state.best)})
    )
    update["human"] = parsed
    # Whatever the answer, the held candidates were shown: they do not ask again.
    update["held_reviewed"] = sorted(set(state.held_reviewed) | {a.n for a in standing.held})
    said = f"answer: {answer if isinstance(answer, str) else json.dumps(answer)} -> {decision.to}"
    return step.go(decision, update, key=f"answer{asked}", said=said)


def ask(state: RunState, task: Task, summary: dict[str, Any], run_dir: Path) -> tuple[Any, dict[str, Any]]:
    """Pause until an answer parses: (the answer as given, parsed). The node runs again from its top on
    resume, so everything before ``interrupt()`` is idempotent."""
    payload: dict[str, Any] = {
        "question": f"The run needs a decision ({summary['why']}).",
        "summary": summary,
        "choices": CHOICES,
        "run_dir": str(run_dir),
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
