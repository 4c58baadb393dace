"""evaluate: run every approved candidate through the evaluator, keep the best, count the streaks, route.

Each finished EvalResult lands in results/<identity>.json as it arrives; when this node runs again
(resumed after a kill) those are reused, so a finished candidate is never evaluated twice.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from langgraph.config import get_stream_writer
from langgraph.runtime import Runtime
from langgraph.types import Command

from graph.routing import after_evaluate, finish, improved, round_outcome, table_geomean, update_streaks
from nodes.audit import audit
from nodes.case_memory import RunCache, served_from_cache
from nodes.records import attempt_record, load_result, save_result, with_log, write_candidate
from nodes.runtime import (
    RunContext,
    eval_settings,
    evaluator_for,
    module_source,
    run_task,
    space_module,
    watchdog_accepts,
)
from tools.candidate import Candidate
from tools.results import EvalResult
from tools.task import Task


def _candidates(
    approved: list[dict[str, Any]], task: Task, state: dict[str, Any]
) -> tuple[list[Candidate], list[str], dict[str, dict[str, Any]]]:
    """Approved proposals as candidates (files written), each one's module name, the new-source modules."""
    candidates, modules, extra_modules = [], [], dict(state.get("extra_modules", {}))
    for r in approved:
        p = r["proposal"]
        new_source = p.get("source") is not None
        cand = Candidate(
            source=p["source"] if new_source else module_source(task, state, p["module"]),
            config=p["config"],
            rationale=p["rationale"],
            origin=r["origin"],
            module=space_module(state, p["module"]),
            parent=state["best"]["identity"],
        )
        path = write_candidate(state["run_dir"], cand)
        if new_source:  # a new module once it passes: later rounds may tune its config
            name = f"{r['origin'].split(':')[0]}_{cand.identity[:8]}.py"
            extra_modules.setdefault(name, {"path": str(path), "space_of": cand.module, "passed": False})
            modules.append(name)
        else:
            modules.append(p["module"])
        candidates.append(cand)
    return candidates, modules, extra_modules


def evaluate(
    state: dict[str, Any], runtime: Runtime[RunContext]
) -> Command[Literal["report", "propose", "reflect", "human", "diagnose"]]:
    started = time.monotonic()
    task = run_task(state)
    run_dir, rnd, settings = state["run_dir"], state["round"], state["settings"]
    evaluated_before = sum(1 for a in state.get("attempts", []) if a["round"] > 0)
    room = max(settings["budget"]["candidates"] - evaluated_before, 0)
    approved = [r for r in state.get("proposals", []) if r["status"] == "approved"][:room]
    write = get_stream_writer()

    candidates, modules, extra_modules = _candidates(approved, task, state)
    results: list[EvalResult | None] = [load_result(run_dir, c.identity) for c in candidates]
    reused = sum(r is not None for r in results)
    if reused:
        audit(run_dir, "evaluate", f"reused {reused} finished result(s) from results/", round=rnd)
    baseline = load_result(run_dir, state["baseline"]["identity"])
    cache = RunCache.for_run(state, task, baseline)
    cached = served_from_cache(cache, candidates, results, run_dir, rnd)
    pending = [i for i, r in enumerate(results) if r is None]
    done = [reused + len(cached)]

    def arrived(j: int, result: EvalResult) -> None:
        i = pending[j]
        save_result(run_dir, candidates[i].identity, result)
        if cache is not None:
            cache.put(candidates[i], result)
        results[i] = result
        done[0] += 1
        write(
            {
                "event": "candidate",
                "round": rnd,
                "done": done[0],
                "total": len(candidates),
                "verdict": result.verdict,
                "error_type": result.error_type,
                "geomean_us": result.metrics.geomean_us,
            }
        )

    if pending:
        evaluator_for(runtime)(
            task,
            [candidates[i] for i in pending],
            device=state["device"],
            baseline=baseline,
            on_result=arrived,
            settings=eval_settings(task, state["settings"]),
        )
    missing = [candidates[i].identity for i, r in enumerate(results) if r is None]
    if missing:
        raise RuntimeError(f"the evaluator returned no result for {', '.join(missing)}")

    n0 = len(state.get("attempts", []))
    attempts = []
    for i, (cand, result) in enumerate(zip(candidates, results, strict=True)):
        review = approved[i]
        attempts.append(
            attempt_record(
                n0 + i,
                rnd,
                cand,
                modules[i],
                result,
                run_dir,
                review,
                review["proposal"].get("expected_effect", ""),
                min_dims=task.spec.target.min_dims,
            )
            | {"cached": cand.identity in cached}
        )
        if modules[i] in extra_modules and result.passed:
            extra_modules[modules[i]]["passed"] = True

    previous = state["best"]
    passing = [a for a in attempts if a["verdict"] == "pass" and a["geomean_us"]]
    round_best = min(passing, key=lambda a: a["geomean_us"]) if passing else None
    best = round_best if round_best and round_best["geomean_us"] < previous["geomean_us"] else previous
    # The watchdog re-times a new best against the previous one (GPU): a regression keeps the previous.
    if best is not previous and not watchdog_accepts(task, state, best, previous, "evaluate"):
        best = previous
    # Progress is the single best or the per-bucket table getting faster: a stall is neither.
    stall_improvement = settings["routing"]["stall_improvement"]
    approved_n = state.get("approved", [])
    table_before = table_geomean(state.get("attempts", []), approved_n)
    table_us = table_geomean([*state.get("attempts", []), *attempts], approved_n)
    got_better = improved(previous["geomean_us"], best["geomean_us"], stall_improvement) or improved(
        table_before, table_us, stall_improvement
    )
    outcome = round_outcome(attempts, settings["routing"]["compile_error_types"])
    streaks = update_streaks(state["streaks"], outcome, got_better)
    failures = [a for a in attempts if a["verdict"] != "pass"]
    last_failure = with_log(failures[-1], run_dir) if failures else None
    elapsed = time.monotonic() - started

    for a in attempts:
        us = (
            f"{a['geomean_us']:.2f} us"
            if a["geomean_us"]
            else f"{a['stage']}/{a['error_type']}: {a['message']}"
        )
        audit(run_dir, "evaluate", f"#{a['n']} {a['module']} {a['config']}: {a['verdict']} {us}", round=rnd)
    if best is not previous:
        audit(
            run_dir,
            "evaluate",
            f"new best #{best['n']}: {best['geomean_us']:.2f} us "
            f"({state['baseline']['geomean_us'] / best['geomean_us']:.2f}x the baseline)",
            round=rnd,
        )

    after = {
        **state,
        "attempts": [*state.get("attempts", []), *attempts],
        "best": best,
        "streaks": streaks,
        "rounds_done": state.get("rounds_done", 0) + 1,
        "active_s": state.get("active_s", 0.0) + elapsed,
    }
    target = task.spec.target.model_dump()
    routed = after_evaluate(after, target)
    audit(run_dir, "evaluate", f"-> {routed['to']}: {routed['reason']}", round=rnd)
    progress = {
        "round": rnd,
        "best_us": best["geomean_us"],
        "round_best_us": round_best["geomean_us"] if round_best else None,
        "table_us": table_us,
        "evaluated": len(attempts),
        "passed": len(passing),
    }
    write({"event": "round", **progress, "baseline_us": state["baseline"]["geomean_us"]})
    update: dict[str, Any] = {
        "attempts": attempts,
        "best": best,
        "streaks": streaks,
        "rounds_done": after["rounds_done"],
        "round": rnd + 1,
        "progress": [progress],
        "extra_modules": extra_modules,
        "last_failure": last_failure,
        "proposals": [],
        "critic_round": 0,
        "route": routed,
        "active_s": elapsed,
    }
    if routed["to"] == "report":
        update["stop"] = finish(after, target)
    return Command(goto=routed["to"], update=update)
