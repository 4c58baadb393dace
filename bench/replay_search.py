"""Replay the expert search against a brute-force table: how many evaluations it needs, how close it gets.

    python bench/replay_search.py BRUTE.json [--task TASK_DIR] [--seeds 0-9] [--rounds N] [--set KEY=VALUE]

BRUTE.json is what ``bench/brute_force.py`` writes (every config of the space, evaluated once). The
replay runs the expert proposer and critic round by round as the graph does (rounds of the task's
``candidates_per_round``, the critic's revisions answered once), answers each candidate from the table
instead of the GPU, and stops where the graph would: the target met (judged against each shape's
ceiling), the proposer converged or out of proposals, or the rounds spent. No profiler runs, so the
search is unsteered (no diagnosis): a replay measures the strategy, not the steering. Held candidates
stay failures (nobody approves them). A round's fastest config becomes the best only where the graph's
watchdog would let it (tools.watchdog.check_regression on the table's timings: no shape more than
``watchdog.max_regression`` slower than the best's, a launch-bound one tolerated when the geomean is faster),
so the best, the proposer's context and the target follow the same path as a run's. Prints, per seed: rounds, configs evaluated (the baseline's
included) and their share of the space, the best found against the brute-force best, what export would
hand back (the per-shape table of the configs evaluated where it beats the best by export's margin, else
the best) against the same made of every config, and why it stopped; then the medians over the seeds,
each with its worst, and how many runs ended converged; exit 2 on a bad table.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.task_folders import task_folder  # noqa: E402
from loop.headroom import shape_standings  # noqa: E402
from loop.judge import challenger  # noqa: E402
from loop.records import Attempt  # noqa: E402
from loop.roles import AgentContext, Proposal  # noqa: E402
from loop.scoring import table_geomean, target_met  # noqa: E402
from loop.settings import Settings, load_settings, parse_assignments  # noqa: E402
from nodes.expert import ExpertCritic, ExpertProposer  # noqa: E402
from nodes.expert.space import point_key  # noqa: E402
from tools.candidate import candidate_identity  # noqa: E402
from tools.dispatch import table_wins  # noqa: E402
from tools.results import EvalResult, Metrics  # noqa: E402
from tools.task import Task, TaskError, load_task  # noqa: E402
from tools.watchdog import check_regression, shape_timing  # noqa: E402


class Measured(BaseModel):
    module: str
    config: dict[str, Any]
    verdict: str
    error_type: str | None = None
    held: str | None = None
    geomean_us: float | None = None
    per_shape: list[dict[str, Any]] = []
    resources: dict[str, Any] = {}


class BruteForce(BaseModel):
    task: str
    space_size: int
    measured: list[Measured]

    def best(self) -> Measured | None:
        """The fastest config that passes unattended (a held one needs a human)."""
        passing = [m for m in self.measured if m.verdict == "pass" and m.geomean_us]
        return min(passing, key=lambda m: m.geomean_us, default=None)


@dataclass
class Outcome:
    seed: int
    rounds: int
    evaluated: int  # configs of the space evaluated, the baseline's included
    best_us: float | None
    brute_us: float | None
    stop: str
    shipped_us: float | None = None  # what export hands back from the configs evaluated
    brute_shipped_us: float | None = None  # ... from every config of the space

    @property
    def gap_pct(self) -> float | None:
        return 100 * (self.best_us / self.brute_us - 1) if self.best_us and self.brute_us else None

    @property
    def shipped_gap_pct(self) -> float | None:
        if not (self.shipped_us and self.brute_shipped_us):
            return None
        return 100 * (self.shipped_us / self.brute_shipped_us - 1)


def shipped_us(attempts: list[Attempt], best: float | None = None) -> float | None:
    """What export hands back from these attempts: the per-shape table's geomean where it beats the best
    config (the run's ``best``, by default the fastest) by export's margin (tools.dispatch.table_wins), else
    the best config's."""
    if best is None:
        best = min((a.geomean_us for a in attempts if a.passed and a.geomean_us), default=None)
    table = table_geomean(attempts)
    if best is None or table is None:
        return best
    return table if table_wins(table, best) else best


def _attempt(n: int, rnd: int, m: Measured, task: Task, origin: str) -> dict[str, Any]:
    source = task.source(m.module)
    verdict = m.verdict if m.held is None else "fail"
    return {"n": n, "round": rnd, "module": m.module, "config": m.config, "origin": origin, "verdict": verdict,
            "error_type": m.error_type, "geomean_us": m.geomean_us if verdict == "pass" else None,
            "per_shape": m.per_shape, "resources": m.resources, "identity": candidate_identity(source, m.config),
            "interpreted": False}  # fmt: skip


def _as_result(record: dict[str, Any]) -> EvalResult:
    rows = [shape_timing(r) for r in record["per_shape"]]
    return EvalResult(verdict="pass", stage="done", metrics=Metrics(per_shape=rows))


def watchdog_accepts(new: dict[str, Any], best: dict[str, Any], settings: Settings) -> bool:
    """The graph's watchdog on the table's timings (a run re-times the two back to back instead)."""
    verdict = check_regression(_as_result(new), _as_result(best), settings.watchdog.max_regression,
                               settings.profiler.launch_bound_below_pct)  # fmt: skip
    return verdict.accepted


def _context(
    task: Task, settings: Settings, history: list[dict[str, Any]], best: dict[str, Any], rnd: int, seed: int
) -> AgentContext:
    rows = Attempt.model_validate(best).per_shape
    s = settings.search
    standings = shape_standings(rows, s.near_roofline_pct, settings.profiler.launch_bound_below_pct,
                                task.spec.target.min_dims)  # fmt: skip
    return AgentContext(
        task_name=task.name, description=task.spec.description, baseline_module=task.baseline_name,
        search_spaces={m: task.search_space(m) for m in task.module_names},
        module_sources={m: task.source(m) for m in task.module_names}, best=best, history=history,
        evaluated=[h["identity"] for h in history], round=rnd, seed=seed,
        n_candidates=settings.budget.candidates_per_round, device_limits=settings.device_limits.model_dump(),
        target=task.spec.target.model_dump(), standings=[st.model_dump() for st in standings],
    )  # fmt: skip


def _reviewed(ctx: AgentContext, proposer: ExpertProposer, proposals: list[Proposal]) -> list[Proposal]:
    """The approved proposals, the critic's revisions answered once as the graph's revise round does."""
    critic = ExpertCritic()
    verdicts = critic.critique(ctx, proposals)
    approved = [p for p, v in zip(proposals, verdicts, strict=True) if v.verdict == "approve"]
    sent_back = [{"proposal": p.model_dump(), "objections": v.objections}
                 for p, v in zip(proposals, verdicts, strict=True) if v.verdict == "revise"]  # fmt: skip
    if not sent_back:
        return approved
    revise_ctx = ctx.model_copy(update={"mode": "revise", "revise": sent_back})
    revised = proposer.propose(revise_ctx).proposals
    again = critic.critique(ctx, revised) if revised else []
    return approved + [p for p, v in zip(revised, again, strict=True) if v.verdict == "approve"]


def replay(task: Task, brute: BruteForce, seed: int, settings: Settings) -> Outcome:
    table = {point_key(m.module, m.config): m for m in brute.measured}
    baseline = table[point_key(task.baseline_name, task.default_config())]
    history = [_attempt(0, 0, baseline, task, "baseline")]
    best = history[0]
    proposer = ExpertProposer(settings.search.model_dump())
    stop, rounds = "rounds spent", 0
    for rnd in range(1, settings.budget.rounds + 1):
        met = target_met(Attempt.model_validate(best), Attempt.model_validate(history[0]), task.spec.target)
        if met:
            stop = f"target met: {met}"
            break
        ctx = _context(task, settings, history, best, rnd, seed)
        answer = proposer.propose(ctx)
        if not answer.proposals:
            stop = ("converged: " if answer.converged else "nothing to propose: ") + answer.reason
            break
        rounds = rnd
        seen = {point_key(h["module"], h["config"]) for h in history}
        first_new = len(history)
        for p in _reviewed(ctx, proposer, answer.proposals):
            key = point_key(p.module, p.config)
            if key not in seen and key in table:
                seen.add(key)
                history.append(_attempt(len(history), rnd, table[key], task, "expert"))
        # the round judged as the graph judges it: its fastest pass that beats the best, then the watchdog
        new = [Attempt.model_validate(h) for h in history[first_new:]]
        contender = challenger(new, Attempt.model_validate(best))
        if contender is not None and watchdog_accepts(history[contender.n], best, settings):
            best = history[contender.n]
    brute_best = brute.best()
    every = [Attempt.model_validate(_attempt(i, 0, m, task, "brute")) for i, m in enumerate(brute.measured)]
    shipped = shipped_us([Attempt.model_validate(h) for h in history], best["geomean_us"])
    return Outcome(seed, rounds, len(history), best["geomean_us"], brute_best.geomean_us if brute_best else None,
                   stop, shipped, shipped_us(every))  # fmt: skip


def _seeds(text: str) -> list[int]:
    if "-" in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return [int(s) for s in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python bench/replay_search.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("brute", type=Path)
    parser.add_argument(
        "--task", type=Path, help="the task folder (default: looked up by the table's task name)"
    )
    parser.add_argument("--seeds", default="0-9")
    parser.add_argument("--rounds", type=int, help="rounds (default: the task's budget)")
    parser.add_argument("--set", action="append", default=[], help="a setting, as graph.run --set takes it")
    args = parser.parse_args(argv)
    try:
        brute = BruteForce.model_validate(json.loads(args.brute.read_text()))
        folder = args.task or task_folder(brute.task)
        if folder is None:
            raise ValueError("no task folder named after the table")
        task = load_task(folder)
        overrides = parse_assignments(args.set)
        if args.rounds:
            overrides.setdefault("budget", {})["rounds"] = args.rounds
        settings = load_settings(task, overrides)
    except (OSError, ValueError, ValidationError, TaskError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    outcomes = [replay(task, brute, seed, settings) for seed in _seeds(args.seeds)]
    first = outcomes[0]
    print(f"{task.name}: {brute.space_size} configs, brute-force best {first.brute_us:.2f} us; export of every "
          f"config {first.brute_shipped_us:.2f} us")  # fmt: skip
    for o in outcomes:
        print(f"  seed {o.seed}: {o.rounds} rounds, {o.evaluated} evaluated ({100 * o.evaluated / brute.space_size:.0f}%),"
              f" best {o.best_us:.2f} us ({o.gap_pct:+.1f}%), export {o.shipped_us:.2f} us ({o.shipped_gap_pct:+.1f}%);"
              f" {o.stop}")  # fmt: skip
    shares = [o.evaluated / brute.space_size for o in outcomes]
    done = sum(o.stop.startswith("converged: ") for o in outcomes)
    print(f"median: {100 * statistics.median(shares):.0f}% (worst {100 * max(shares):.0f}%) of the space evaluated, "
          f"{_median_gap(outcomes, 'gap_pct')} from the best, {_median_gap(outcomes, 'shipped_gap_pct')} from the "
          f"export of every config; {done} of {len(outcomes)} ended converged")  # fmt: skip
    return 0


def _median_gap(outcomes: list[Outcome], field: str) -> str:
    gaps = [g for o in outcomes if (g := getattr(o, field)) is not None]
    if not gaps:
        return "n/a"
    return f"{statistics.median(gaps):+.1f}% (worst {max(gaps, default=math.nan):+.1f}%)"


if __name__ == "__main__":
    sys.exit(main())
