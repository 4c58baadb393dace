"""evaluate: run every approved candidate through the evaluator, judge the round, route.

Each finished EvalResult lands in results/<identity>.json as it arrives; when this node runs again
(resumed after a kill) those are reused, so a finished candidate is never evaluated twice.
"""

from __future__ import annotations

import time
from typing import Literal

from langgraph.types import Command

from loop.budget import budget_of
from loop.judge import Judgement, challenger, judge_round
from loop.records import Attempt, ExtraModule, Review
from loop.routes import Standing, after_evaluate
from loop.scoring import held_for_review
from loop.state import RunState
from nodes.case_memory import RunCache, served_from_cache
from nodes.records import attempt_record, with_log
from nodes.runtime import eval_settings, evaluator_for, module_source, space_module
from nodes.step import Step, node
from nodes.watch import watchdog_accepts
from tools.candidate import Candidate
from tools.results import EvalResult


@node("evaluate")
def evaluate(
    state: RunState, step: Step
) -> Command[Literal["report", "propose", "reflect", "human", "diagnose"]]:
    budget = budget_of(state)
    approved = [r for r in state.proposals if r.status == "approved"][: budget.candidates_left]
    candidates, modules, extra_modules = to_candidates(approved, step)
    n0, min_dims = len(state.attempts), step.task.spec.target.min_dims
    results, cached = results_for(step, candidates, modules, n0)
    attempts = [
        attempt_record(n0 + i, state.round, c, modules[i], r, approved[i], min_dims).model_copy(
            update={"cached": c.identity in cached}
        )
        for i, (c, r) in enumerate(zip(candidates, results, strict=True))
    ]
    for a in attempts:
        if a.module in extra_modules and a.passed:
            extra_modules[a.module].passed = True
    judged = judge(step, attempts)
    say(step, attempts, judged)
    shown = [*state.held_reviewed, *state.approved]
    standing = Standing(
        best=judged.best,
        baseline=state.baseline,
        target=step.task.spec.target,
        budget=budget.after_round(len(attempts), step.elapsed()),
        held=held_for_review([*state.attempts, *attempts], shown, judged.best.geomean_us),
        stop=state.stop,
    )
    decision = after_evaluate(standing, judged.streaks, state.settings.routing)
    progress = judged.progress.model_dump(exclude={"active_s"})
    every = [*state.attempts, *attempts]
    step.emit("round", **progress, baseline_us=state.baseline.geomean_us, interpreted=judged.best.interpreted,
              evaluated_total=standing.budget.evaluated, budget_candidates=standing.budget.limits.candidates,
              cache_hits=sum(1 for a in every if a.cached),
              eta_s=None if decision.to == "report" else standing.budget.eta_s())  # fmt: skip
    failures = [a for a in attempts if not a.passed]
    update = {
        "attempts": attempts,
        "best": judged.best,
        "streaks": judged.streaks,
        "rounds_done": state.rounds_done + 1,
        "round": state.round + 1,
        "progress": [judged.progress],
        "extra_modules": extra_modules,
        "last_failure": with_log(failures[-1], step.folder) if failures else None,
        "proposals": [],
        "critic_round": 0,
    }
    return step.go(decision, update)


def to_candidates(
    approved: list[Review], step: Step
) -> tuple[list[Candidate], list[str], dict[str, ExtraModule]]:
    """Approved proposals as candidates (files written), each one's module name, the new-source modules."""
    state = step.run
    candidates, modules = [], []
    extra_modules = {name: e.model_copy() for name, e in state.extra_modules.items()}
    for r in approved:
        p = r.proposal
        source = p.source if p.source is not None else module_source(step.task, state, step.folder, p.module)
        cand = Candidate(
            source=source,
            config=p.config,
            rationale=p.rationale,
            origin=r.origin,
            module=space_module(state, p.module),
            parent=state.best.identity,
        )
        path = step.folder.write_candidate(cand)
        if p.source is not None:  # a new module once it passes: later rounds may tune its config
            name = f"{r.origin.split(':')[0]}_{cand.identity[:8]}.py"
            extra_modules.setdefault(name, ExtraModule(path=path, space_of=cand.module))
            modules.append(name)
        else:
            modules.append(p.module)
        candidates.append(cand)
    return candidates, modules, extra_modules


def results_for(
    step: Step, candidates: list[Candidate], modules: list[str], n0: int
) -> tuple[list[EvalResult], set[str]]:
    """Each candidate's result: read back from results/, served by the validation cache, or evaluated
    (each saved the moment it arrives); and the identities the cache served. Every candidate is shown
    as it is settled, numbered as its attempt (#``n0`` + its place), the way the trail and report say."""
    folder, state = step.folder, step.run
    results: list[EvalResult | None] = [folder.load_result(c.identity) for c in candidates]
    reused = sum(r is not None for r in results)
    if reused:
        step.audit(f"reused {reused} finished result(s) from results/")
    baseline = folder.load_result(state.baseline.identity)
    cache = RunCache.for_run(state, step.task, baseline)
    cached = served_from_cache(cache, candidates, results, folder)
    if cached:
        names = ", ".join(sorted(i[:12] for i in cached))
        message = f"validation cache: {len(cached)} candidate(s) served without evaluation ({names})"
        step.audit(message, cache_hits=len(cached))
    pending = [i for i, r in enumerate(results) if r is None]
    done = [0]

    def settled(i: int, result: EvalResult, source: str) -> None:
        done[0] += 1
        step.emit("candidate", round=state.round, n=n0 + i, module=modules[i], config=candidates[i].config,
                  done=done[0], total=len(candidates), verdict=result.verdict, error_type=result.error_type,
                  geomean_us=result.metrics.geomean_us, source=source)  # fmt: skip

    for i, result in enumerate(results):
        if result is not None:
            settled(i, result, "cache" if candidates[i].identity in cached else "results")

    def arrived(j: int, result: EvalResult) -> None:
        i = pending[j]
        folder.save_result(candidates[i].identity, result)
        if cache is not None:
            cache.put(candidates[i], result)
        results[i] = result
        settled(i, result, "evaluated")

    if pending:
        settings = eval_settings(step.task, state.settings, step.context)
        # a candidate that would hold the round past the run's minutes is cut there (tools/session.py)
        settings.run_deadline_unix = time.time() + budget_of(state).seconds_left() - step.elapsed()
        evaluate_many = evaluator_for(step.context)
        evaluate_many(step.task, [candidates[i] for i in pending], device=state.device, baseline=baseline,
                      on_result=arrived, settings=settings)  # fmt: skip
    missing = [candidates[i].identity for i, r in enumerate(results) if r is None]
    if missing:
        raise RuntimeError(f"the evaluator returned no result for {', '.join(missing)}")
    return [r for r in results if r is not None], cached


def judge(step: Step, attempts: list[Attempt]) -> Judgement:
    """The round judged: its fastest pass becomes the best when it beats it and the watchdog agrees."""
    state = step.run
    best = state.best
    contender = challenger(attempts, best)
    # The watchdog re-times a new best against the previous one (GPU): a regression keeps the previous.
    if contender is not None and watchdog_accepts(step, contender, best):
        best = contender
    return judge_round(
        round=state.round,
        before=state.attempts,
        new=attempts,
        previous=state.best,
        best=best,
        approved=state.approved,
        streaks=state.streaks,
        rules=state.settings.routing,
    )


def say(step: Step, attempts: list[Attempt], judged: Judgement) -> None:
    """The round in the trail: each attempt, and the new best."""
    for a in attempts:
        us = f"{a.geomean_us:.2f} us" if a.geomean_us else f"{a.stage}/{a.error_type}: {a.message}"
        step.audit(f"#{a.n} {a.module} {a.config}: {a.verdict} {us}")
    best = judged.best
    if best.n != step.run.best.n:
        speedup = (step.run.baseline.geomean_us or 0.0) / (best.geomean_us or 1.0)
        step.audit(f"new best #{best.n}: {best.geomean_us:.2f} us ({speedup:.2f}x the baseline)")
