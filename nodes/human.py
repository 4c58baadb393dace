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
import time
from pathlib import Path
from typing import Any, Literal

import yaml
from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt

from graph.routing import decision, finish, fresh_streaks, held_for_review
from nodes.audit import audit
from nodes.propose import review_record
from nodes.records import approved_record, load_result, save_result
from nodes.report import write_report
from nodes.roles import Proposal
from nodes.runtime import RunContext, run_task, watchdog_accepts
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


def parse_answer(answer: Any, state: dict[str, Any], task: Task) -> dict[str, Any]:
    """The answer as {action, ...}; raises AnswerError naming what is wrong."""
    if isinstance(answer, dict):
        answer = answer.get("answer", "")
    if not isinstance(answer, str) or not answer.strip():
        raise AnswerError(f"an answer is one of: {', '.join(ACTIONS)}")
    tokens = answer.split()
    action, args = tokens[0].lower(), tokens[1:]
    spaces = state["search_spaces"]
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
        return _parse_approve(args, state)
    raise AnswerError(f"unknown answer {tokens[0]!r}; choose one of: {', '.join(ACTIONS)}")


def _parse_approve(args: list[str], state: dict[str, Any]) -> dict[str, Any]:
    """``approve N [N ...]`` (``#N`` or comma lists too): every N must be a candidate held as a speedup."""
    numbers = [t.strip().lstrip("#") for arg in args for t in arg.split(",") if t.strip()]
    if not numbers:
        raise AnswerError("approve needs the number of a held candidate, e.g. approve 12")
    attempts = {a["n"]: a for a in state.get("attempts", [])}
    chosen = []
    for raw in numbers:
        if not raw.isdigit() or int(raw) not in attempts:
            raise AnswerError(f"approve {raw}: no evaluated candidate #{raw}")
        attempt = attempts[int(raw)]
        if attempt.get("held") == "roofline":
            raise AnswerError(
                f"approve {raw}: #{raw} measured faster than the copy bandwidth, so the measurement "
                "itself is wrong; it cannot be approved"
            )
        if attempt.get("held") != "speedup":
            raise AnswerError(f"approve {raw}: #{raw} was not held for review ({attempt['verdict']})")
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
def pause_summary(state: dict[str, Any]) -> dict[str, Any]:
    best, baseline = state["best"], state["baseline"]
    failures = [a for a in state.get("attempts", []) if a["verdict"] != "pass"][-5:]
    return {
        "why": state.get("route", {}).get("reason", ""),
        "round": state["round"],
        "rounds_done": state.get("rounds_done", 0),
        "baseline_us": baseline["geomean_us"],
        "best": {
            "n": best["n"],
            "module": best["module"],
            "config": best["config"],
            "geomean_us": best["geomean_us"],
            "speedup": round(baseline["geomean_us"] / best["geomean_us"], 3),
            "interpreted": best.get("interpreted"),
        },
        "last_errors": [
            {
                "n": a["n"],
                "module": a["module"],
                "config": a["config"],
                "error_type": a["error_type"],
                "message": a["message"],
            }
            for a in failures
        ],
        "search_spaces": state["search_spaces"],
        "forbid": state.get("forbid", []),
        # held for review and not approved yet: ``approve N`` accepts one
        "held": [
            {
                "n": a["n"],
                "module": a["module"],
                "config": a["config"],
                "geomean_us": a["geomean_us"],
                "speedup": round(baseline["geomean_us"] / a["geomean_us"], 3),
                "message": a["message"],
            }
            for a in state.get("attempts", [])
            if a.get("held") == "speedup" and a["n"] not in state.get("approved", []) and a.get("geomean_us")
        ],
    }


def human(
    state: dict[str, Any], runtime: Runtime[RunContext]
) -> Command[Literal["diagnose", "critic", "report"]]:
    task = run_task(state)
    summary = pause_summary(state)
    write_report(state, status="awaiting_human", paused=summary, target=task.spec.target.model_dump())
    audit(
        state["run_dir"],
        "human",
        f"paused: {summary['why']}",
        round=state["round"],
        key=f"pause{len(state.get('attempts', []))}",
    )
    payload: dict[str, Any] = {
        "question": f"The run needs a decision ({summary['why']}).",
        "summary": summary,
        "choices": CHOICES,
        "run_dir": state["run_dir"],
        "error": None,
    }
    while True:
        answer = interrupt(payload)
        try:
            parsed = parse_answer(answer, state, task)
            break
        except AnswerError as exc:
            payload = {**payload, "error": str(exc)}
    started = time.monotonic()
    update, goto = apply_answer(parsed, state, task)
    if goto == "diagnose":
        # An answer that resumes the search still keeps the budget: a held candidate's review can come
        # when the minutes left are too few for another round.
        done = finish({**state, **update}, task.spec.target.model_dump())
        if done:
            update["stop"], goto = done, "report"
    audit(
        state["run_dir"],
        "human",
        f"answer: {answer if isinstance(answer, str) else json.dumps(answer)} -> {goto}",
        round=state["round"],
        key=f"answer{len(state.get('attempts', []))}",
    )
    update["human"] = parsed
    # Whatever the answer, the held candidates were shown: they do not ask again.
    update["held_reviewed"] = sorted(
        set(state.get("held_reviewed", [])) | {a["n"] for a in held_for_review(state)}
    )
    update["route"] = decision("human", goto, f"human: {parsed['action']}")
    update["active_s"] = time.monotonic() - started
    return Command(goto=goto, update=update)


def _persist_approval(run_dir: str, attempt: dict[str, Any]) -> None:
    """The approved result file becomes a pass (what export and later tools read), saying who approved."""
    result = load_result(run_dir, attempt["identity"])
    if result is None or result.passed:
        return
    result.verdict, result.stage, result.error_type = "pass", "done", None
    result.message = f"held for review ({result.message}); approved by a human"
    result.details = {**result.details, "approved_by": "human"}
    save_result(run_dir, attempt["identity"], result)


def apply_answer(parsed: dict[str, Any], state: dict[str, Any], task: Task) -> tuple[dict[str, Any], str]:
    action = parsed["action"]
    if action == "stop":
        return {"stop": {"status": "stopped_by_human", "reason": "the human chose to stop"}}, "report"
    fresh = fresh_streaks()
    if action == "continue":
        return {"streaks": fresh}, "diagnose"
    if action == "approve":
        approved = [a for a in state["attempts"] if a["n"] in parsed["attempts"]]
        fastest = min(approved, key=lambda a: a["geomean_us"])
        update: dict[str, Any] = {
            "approved": sorted(set(state.get("approved", [])) | set(parsed["attempts"])),
            "streaks": fresh,
        }
        extra = copy.deepcopy(state.get("extra_modules", {}))
        for a in approved:
            _persist_approval(state["run_dir"], a)
            if a["module"] in extra:
                extra[a["module"]]["passed"] = True  # its module joins the search like a passing one
        update["extra_modules"] = extra
        if fastest["geomean_us"] < state["best"]["geomean_us"]:
            # An approved candidate faces the watchdog like any new best; the approval stands either way.
            candidate = approved_record(fastest)
            if watchdog_accepts(task, state, candidate, state["best"], "human"):
                update["best"] = candidate
            else:
                audit(
                    state["run_dir"], "human",
                    f"approved #{candidate['n']} stays out of the best: the watchdog kept #{state['best']['n']}",
                    round=state["round"],
                )  # fmt: skip
        return update, "diagnose"
    if action in ("widen", "constrain"):
        spaces = copy.deepcopy(state["search_spaces"])
        for change in parsed["changes"]:
            for m in change["modules"]:
                current = spaces[m][change["key"]]
                if action == "widen":
                    spaces[m][change["key"]] = current + [v for v in change["values"] if v not in current]
                else:
                    spaces[m][change["key"]] = [v for v in current if v in change["values"]]
        forbid = list(state.get("forbid", []))
        forbid += [c for c in parsed.get("forbid", []) if c not in forbid]
        return {"search_spaces": spaces, "forbid": forbid, "streaks": fresh}, "diagnose"
    source = Path(parsed["path"]).read_text()
    prop = Proposal(
        module=parsed["module"],
        config=parsed["config"],
        source=source,
        rationale=f"supplied by a human at round {state['round']} ({Path(parsed['path']).name})",
        expected_effect="the human's judgement",
    )
    record = review_record(prop, task, state, "human")
    return {"proposals": [record], "critic_round": 0, "streaks": fresh}, "critic"
