"""The expert proposer: random exploration, then one-step local search steered by the bottleneck.

- Exploration (the first ``explore_rounds`` rounds): distinct random points of the human's space,
  variants included as one more dimension, each drawn among the points farthest from those tried.
- Local search: one-step neighbours of the top ``top_k`` passing configs and of the fastest config at
  each shape, round-robin over the parents, the neighbours the convergence rule checks first, each
  parent's moves ordered by how well they answer the diagnosis (low_parallelism: smaller tiles, more
  splits; register_spills: smaller tiles, more warps; ...), never steered by a diagnosis read at a
  shape already at its ceiling. A share of each round goes to random restarts (drawn far from the
  configs tried, like exploration), more of it after a round without improvement; once the rounds the
  rule waits for have found nothing new, a round holds only the neighbours it has left to check.
- Pruning: failed configs are never parents; configs slower than ``prune_below_baseline`` of the
  baseline's speed are not mutated; values that failed twice and never passed are avoided.
- Every shape the roofline target judges (target.min_dims) near its same-size ceiling: nothing left to
  gain, say so and stop; likewise when the search has converged (nodes/expert/convergence.py: the top
  configs and the fastest config at each shape that matters to the table are local optima, and rounds
  in a row found no 1% gain away from the configs tried) and when every config of the space has been
  evaluated.
- Reflect mode: only neighbours of the best and the baseline (known-good code), no restarts.
- Revise mode: answers each critic objection (shrinks the tile for a resource objection) or withdraws.
- Memory (``ctx.retrieved_cases``): the configs of kept cases of similar past runs come first, before
  any exploration, when they fit this task's space; a config whose case failed on the same module
  code is never proposed.
Deterministic under the run's seed.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from loop.headroom import ShapeStanding, standing_of
from loop.records import Attempt, ShapeRow
from loop.roles import AgentContext, Proposal, Proposed
from loop.scoring import (
    ceiling_name,
    fastest_at_each_shape,
    judged_at,
    judged_pct,
    lowest_judged,
    near_ceiling,
)
from memory.cases.model import source_digest
from nodes.expert.convergence import anchors, converged, rounds_without_gain, rounds_without_news, unexplored
from nodes.expert.resources import resource_problems
from nodes.expert.space import key_role, neighbours, point_key, spread_points
from tools.candidate import candidate_identity
from tools.dispatch import shape_label
from tools.task import config_problems, meets_min_dims

# (role, step) -> (score, why, expected effect), per bottleneck.
STEERING: dict[str, dict[tuple[str, int], tuple[float, str, str]]] = {
    "low_parallelism": {
        ("tile", -1): (
            2.0,
            "smaller tiles give more programs to fill the SMs",
            "lower time where the grid is small",
        ),
        ("split", 1): (2.0, "more splits give more programs per row", "lower time where the grid is small"),
        ("warps", -1): (1.0, "fewer warps per program let more programs share an SM", "better SM fill"),
    },
    "register_spills": {
        ("tile", -1): (2.0, "smaller tiles need fewer registers", "fewer or no spills"),
        ("warps", 1): (1.0, "more threads share the tile, fewer registers each", "fewer spills"),
        ("stages", -1): (1.0, "fewer pipeline stages hold fewer buffers", "less register pressure"),
    },
    "memory_bound": {
        ("tile", 1): (1.0, "wider programs issue larger, coalesced loads", "higher achieved bandwidth"),
        ("warps", 1): (0.5, "more warps keep more loads in flight", "higher achieved bandwidth"),
    },
    "latency_bound": {
        ("warps", 1): (1.0, "more warps hide memory latency", "more loads in flight"),
        ("stages", 1): (1.0, "deeper pipelining overlaps loads with math", "latency hidden"),
        ("tile", 1): (1.0, "more work per program amortizes fixed costs", "fewer, busier programs"),
    },
    "memory_access_pattern": {
        ("tile", 1): (1.0, "wider contiguous tiles coalesce better", "fewer wasted sectors"),
    },
    "compute_bound": {
        ("tensor_cores", 1): (
            2.0,
            "fp32 products on the tensor cores (three TF32 passes, fp32-level accuracy) instead of FMA loops",
            "several times the math throughput",
        ),
        ("stages", 1): (1.0, "deeper pipelining keeps the math units fed", "higher pipe utilization"),
        ("tile", 1): (1.0, "larger tiles reuse each loaded value more", "fewer loads per FLOP"),
    },
    "contention": {
        ("split", -1): (2.0, "fewer splits, fewer partial results to combine", "less serialization"),
    },
}
# Words in a variant's file name that suggest it answers a bottleneck (a human named the variant).
VARIANT_HINTS: dict[str, tuple[str, ...]] = {
    "low_parallelism": ("split",),
    "memory_bound": ("group", "split", "multirow", "online", "prefetch"),
    "latency_bound": ("multirow", "group", "prefetch", "persistent"),
}
# Below this similarity a case is of another kind of op (library scores: ~0.85 for the same op family,
# 0.5-0.65 for others): shown to LLM roles, never tried as a starting point.
MEMORY_MIN_SCORE = 0.7
UNTRIED_VARIANT_BONUS = 1.0
JITTER = 0.5  # random share of a move's score: ties and unsure diagnoses are broken at random
HINTED_VARIANT_BONUS = 1.5


class ExpertProposer:
    """Proposes configs (never new source) from the task's search space."""

    def __init__(self, search: dict[str, Any]):
        self.search = search

    # -- entry point --------------------------------------------------------------------------------
    def propose(self, ctx: AgentContext) -> Proposed:
        if ctx.mode == "revise":
            return Proposed(proposals=self._revise(ctx))
        stop = self._near_roofline(ctx)
        if stop:
            return Proposed(reason=stop, converged=True)
        if ctx.mode == "explore" and ctx.round > self.search["explore_rounds"]:  # the rule judges a walk
            stop = converged(ctx, self.search, self._done(ctx))
            if stop:
                return Proposed(reason=stop, converged=True)
        picks = self._search(ctx)
        if picks:
            return Proposed(proposals=picks)
        # The space is exhausted (values that failed twice and never passed aside): the search is done.
        reason = "every config of the search space has been evaluated"
        if _avoided_values(ctx.history):
            reason += " except those using values that failed twice and never passed"
        if _failed_in_memory(ctx):
            reason += " (or failed in a similar past case)"
        return Proposed(reason=reason, converged=True)

    def _search(self, ctx: AgentContext) -> list[Proposal]:
        """This round's configs: memory's starting points, then random exploration or local search
        around the top configs with random restarts."""
        rng = random.Random(f"{ctx.seed}:{ctx.round}:{ctx.mode}:{len(ctx.history)}")
        evaluated = self._seen(ctx)
        failed_before = _failed_in_memory(ctx)
        avoid = _avoided_values(ctx.history)
        modules = list(ctx.search_spaces)
        n = ctx.n_candidates
        remembered = [] if ctx.mode == "reflect" else _memory_starts(ctx, evaluated, failed_before)[:n]
        picks: list[Proposal] = list(remembered)
        in_batch = {point_key(p.module, p.config) for p in picks}

        def seen(module: str, config: dict[str, Any]) -> bool:
            key = point_key(module, config)
            return evaluated(module, config) or key in in_batch or key in failed_before

        def ruled_out(module: str, config: dict[str, Any]) -> bool:
            # Inside the draw, so a variant's first point is one of its allowed configs when it has any.
            return seen(module, config) or _uses_avoided(module, config, avoid)

        tried = [(h["module"], h["config"]) for h in ctx.history if h.get("module") in ctx.search_spaces]
        exploring = ctx.round <= self.search["explore_rounds"] or not self._parents(ctx)
        if exploring and ctx.mode != "reflect":
            near = tried + [(p.module, p.config) for p in picks]
            for module, config in spread_points(
                rng, ctx.search_spaces, modules, n - len(picks), ruled_out, near
            ):
                picks.append(_random_proposal(module, config, ctx, "random exploration"))
        elif self._closing(ctx):
            picks += self._local(ctx, rng, seen, avoid, n - len(picks), checks_only=True)
        else:
            restarts = 0 if ctx.mode == "reflect" else math.floor(n * self._restart_fraction(ctx))
            picks += self._local(ctx, rng, seen, avoid, n - restarts - len(picks))
            taken = {point_key(p.module, p.config) for p in picks}

            def excluded(module: str, config: dict[str, Any]) -> bool:
                return ruled_out(module, config) or point_key(module, config) in taken

            near = tried + [(p.module, p.config) for p in picks]
            for module, config in spread_points(
                rng, ctx.search_spaces, modules, n - len(picks), excluded, near
            ):
                picks.append(_random_proposal(module, config, ctx, "random restart"))
        if ctx.mode == "fix" and ctx.last_failure:
            failed = ctx.last_failure
            note = f" (the failed config {failed.get('config')} is discarded: {failed.get('error_type')})"
            for p in picks:
                p.rationale += note
        return picks

    # -- pieces ---------------------------------------------------------------------------------
    @staticmethod
    def _seen(ctx: AgentContext) -> Callable[[str, dict[str, Any]], bool]:
        """Whether a point was evaluated already or approved this round (by identity, like the critic)."""
        evaluated = set(ctx.evaluated)
        in_history = {point_key(h["module"], h["config"]) for h in ctx.history if h.get("module")}

        def seen(module: str, config: dict[str, Any]) -> bool:
            source = ctx.module_sources.get(module)
            if source is not None and candidate_identity(source, config) in evaluated:
                return True
            return point_key(module, config) in in_history

        return seen

    def _done(self, ctx: AgentContext) -> Callable[[str, dict[str, Any]], bool]:
        """Whether a point was evaluated, or is ruled out as the search rules points out."""
        evaluated, failed_before = self._seen(ctx), _failed_in_memory(ctx)
        avoid = _avoided_values(ctx.history)

        def done(module: str, config: dict[str, Any]) -> bool:
            key = point_key(module, config)
            return evaluated(module, config) or key in failed_before or _uses_avoided(module, config, avoid)

        return done

    def _parents(self, ctx: AgentContext) -> list[dict[str, Any]]:
        """Top-k passing attempts, excluding those slower than the pruning bound, then the fastest
        attempt at each shape that is not among them (marked ``leads``): the winner may be a per-bucket
        table, so a config that is slow in geomean but best at one shape is worth its neighbours."""
        baseline = next((h for h in ctx.history if h.get("origin") == "baseline"), None)
        bound = None
        if baseline and baseline.get("geomean_us") and self.search["prune_below_baseline"] > 0:
            bound = baseline["geomean_us"] / self.search["prune_below_baseline"]
        passing = [
            h
            for h in ctx.history
            if h.get("verdict") == "pass"
            and h.get("geomean_us")
            and h.get("module") in ctx.search_spaces
            and (bound is None or h["geomean_us"] <= bound)
        ]
        passing.sort(key=lambda h: (h["geomean_us"], h.get("n", 0)))
        if ctx.mode == "reflect":
            keep = [passing[0]] if passing else []
            keep += [h for h in passing if h.get("origin") == "baseline" and h not in keep]
            return keep
        top = passing[: self.search["top_k"]]
        chosen = {h.get("n") for h in top}
        for label, leader in _shape_leaders(ctx).items():
            if leader.get("n") not in chosen:
                chosen.add(leader.get("n"))
                top.append({**leader, "leads": label})
        return top

    def _closing(self, ctx: AgentContext) -> bool:
        """Whether this round only closes the convergence check: the rounds the rule asks for found nothing
        new, and only neighbours of the configs it checks are left (a round of fewer than n candidates:
        more restarts now would only put off the stop the rule is about to give)."""
        if ctx.mode != "explore":
            return False
        if rounds_without_news(ctx.history, self.search["converge_gain"]) < self.search["converge_rounds"]:
            return False
        return any(unexplored(ctx, a, self._done(ctx)) for a in anchors(ctx, self.search))

    def _restart_fraction(self, ctx: AgentContext) -> float:
        """More restarts after a round without improvement, once the neighbourhoods the convergence
        rule checks are evaluated (until then they come first, with the usual share of restarts)."""
        threshold = self.search["plateau_improvement"]
        plateau = rounds_without_gain(ctx.history, threshold) >= 1 and ctx.round > 2
        checking = any(unexplored(ctx, a, self._done(ctx)) for a in anchors(ctx, self.search))
        return self.search["plateau_restart_fraction" if plateau and not checking else "restart_fraction"]

    def _local(
        self, ctx: AgentContext, rng: random.Random, seen, avoid: set, n: int, checks_only: bool = False
    ) -> list[Proposal]:
        """Neighbours of the parents: a quarter of the slots to shape leaders, then every one of the
        configs the convergence rule checks (the top configs since the last gain and the shape leaders it
        names), then half the slots to the best one, the rest round-robin over all; ``checks_only``: only
        the neighbours the rule checks.

        Each parent's moves are ordered by steering score x the diagnosis' confidence plus a random
        jitter, so a confident diagnosis steers and an unsure one leaves the order mostly random.
        """
        bottleneck = ctx.diagnosis.bottleneck if ctx.diagnosis else None
        confidence = ctx.diagnosis.confidence if ctx.diagnosis else 0.0
        steering = STEERING.get(bottleneck or "", {})
        hints = VARIANT_HINTS.get(bottleneck or "", ())
        where = _diagnosed_at(ctx)
        if where is not None and where.at_ceiling:
            steering, hints = {}, ()  # no fix for a shape already at its ceiling
        if bottleneck and where is not None:
            bottleneck = f"{bottleneck} at {where.label}"
        tried_modules = {h.get("module") for h in ctx.history}
        modules = list(ctx.search_spaces)
        parents = self._parents(ctx)
        checked = [] if ctx.mode == "reflect" else anchors(ctx, self.search)
        # A top-k config may also be the fastest at a shape the rule checks: its moves say so.
        leading = {a.get("n"): a["leads"] for a in checked if a.get("leads")}
        parents = [{**p, "leads": leading[p.get("n")]} if p.get("n") in leading else p for p in parents]
        parents += [a for a in checked if a.get("n") not in {p.get("n") for p in parents}]
        queues = []
        for rank, parent in enumerate(parents):
            scored = []
            for move in neighbours(parent["module"], parent["config"], ctx.search_spaces, modules):
                if seen(move["module"], move["config"]) or _uses_avoided(
                    move["module"], move["config"], avoid
                ):
                    continue
                score, why, effect = _score(move, steering, hints, tried_modules)
                scored.append((score * confidence + JITTER * rng.random(), move, why, effect))
            scored.sort(key=lambda s: -s[0])
            queues.append((rank, parent, scored))
        if not queues:
            return []
        # Half the slots to the best parent, then shape leaders and the other top-k parents by turns,
        # a leader first (after the top-k, they would get no turn in a round of 8).
        tops = [rank for rank, parent, _ in queues if not parent.get("leads")]
        leads = [rank for rank, parent, _ in queues if parent.get("leads")]
        turns = [rank for pair in itertools.zip_longest(leads, tops[1:]) for rank in pair if rank is not None]
        # A quarter of the slots to shape leaders (judged shapes first; the others rotate with the round),
        # then every move of the checked configs, then as above.
        checked_n = {a.get("n") for a in checked}
        first = [rank for rank, parent, scored in queues for _ in scored if parent.get("n") in checked_n]
        order = (
            first
            if checks_only
            else leads[: math.ceil(n / 4)] + first + [0] * math.ceil(n / 2) + (turns + [0]) * n
        )
        picks: list[Proposal] = []
        taken: set[str] = set()
        for rank in order:
            _, parent, scored = queues[rank]
            while scored and len(picks) < n:
                _, move, why, effect = scored.pop(0)
                key = point_key(move["module"], move["config"])
                if key not in taken:
                    taken.add(key)
                    picks.append(
                        _local_proposal(move, parent, rank, bottleneck or "no diagnosis", why, effect, ctx)
                    )
                    break
        return picks

    def _near_roofline(self, ctx: AgentContext) -> str:
        """Why to stop: every shape the roofline target judges (target.min_dims, as routing's target_met
        reads it; every shape without it) near its ceiling. The same-size copy is a measured bound of
        each size, so a kernel that close to it has nothing left for tuning, whatever the label."""
        min_dims = ctx.target.get("min_dims")
        rows = [ShapeRow.model_validate(r) for r in (ctx.best or {}).get("per_shape") or []]
        if not near_ceiling(rows, min_dims, self.search["near_roofline_pct"]):
            return ""
        row = lowest_judged(rows, min_dims)
        return (
            f"every judged shape ({judged_at(min_dims)}) at >= {judged_pct(row):.0f}% of {ceiling_name(row)} "
            f"(threshold {self.search['near_roofline_pct']}%): nothing left to gain from tuning"
        )

    def _revise(self, ctx: AgentContext) -> list[Proposal]:
        out = []
        seen = self._seen(ctx)
        for i, item in enumerate(ctx.revise):
            prop = Proposal.model_validate(item["proposal"])
            config, answers = dict(prop.config), []
            for objection in item["objections"]:
                if objection.startswith("resources:"):
                    smaller = _fit(prop.module, config, ctx, seen)
                    if smaller is None:
                        break
                    changed = ", ".join(f"{k} {config[k]}->{v}" for k, v in smaller.items() if config[k] != v)
                    answers.append(f"{changed}: now within the estimated limits")
                    config = smaller
                elif objection.startswith("rationale:"):
                    answers.append("rationale and expected effect stated")
                else:
                    break  # an objection this policy cannot answer: withdraw the proposal
            else:
                out.append(
                    Proposal(
                        module=prop.module,
                        config=config,
                        source=prop.source,
                        rationale=prop.rationale or f"revised {prop.config} after the critic's objections",
                        expected_effect=prop.expected_effect or "as the original proposal, within the limits",
                        answers=answers,
                        revises=i,
                    )
                )
        return out


# -- helpers -------------------------------------------------------------------------------------
def _avoided_values(history: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(module, key, value) that failed at least twice and never passed."""
    failed: dict[tuple[str, str, str], int] = defaultdict(int)
    passed: set[tuple[str, str, str]] = set()
    for h in history:
        if not h.get("module") or not h.get("config"):
            continue
        for key, value in h["config"].items():
            item = (h["module"], key, repr(value))
            if h.get("verdict") == "pass":
                passed.add(item)
            elif h.get("error_type") not in (None, "out_of_search_space"):
                failed[item] += 1
    return {item for item, count in failed.items() if count >= 2 and item not in passed}


def _memory_starts(ctx: AgentContext, seen, failed_before: set[str]) -> list[Proposal]:
    """The winning configs of kept similar cases (best first), when they fit the space and are new here.

    A case that brought its own source won with that source, not with its config: it is left to the
    roles that write code.
    """
    picks, taken = [], set()
    for case in ctx.retrieved_cases:
        if case.get("role", "start") != "start" or case.get("verdict") != "pass" or not case.get("kept"):
            continue
        if case.get("new_source") or case.get("in_space") is False:
            continue
        if float(case.get("score") or 0.0) < MEMORY_MIN_SCORE:
            continue
        module, config = case.get("module") or ctx.baseline_module, dict(case.get("config") or {})
        space = ctx.search_spaces.get(module)
        key = point_key(module, config)
        if space is None or config_problems(space, config) or seen(module, config):
            continue
        if key in taken or key in failed_before:
            continue
        taken.add(key)
        speed = f"{case['speedup']:.2f}x" if case.get("speedup") else "kept"
        timing = " (interpreter timing)" if case.get("interpreted") else ""
        picks.append(
            Proposal(
                module=module,
                config=config,
                rationale=(
                    f"from memory: case {case.get('id')} of task {case.get('task')} "
                    f"(similarity {float(case['score']):.2f}) won with this config, {speed}{timing}"
                ),
                expected_effect="reproduces a kept result of a similar past run on this task's code",
            )
        )
    return picks


def _failed_in_memory(ctx: AgentContext) -> set[str]:
    """Points whose similar case failed on the same module code (same file name and source text)."""
    failed = set()
    for case in ctx.retrieved_cases:
        if case.get("verdict") != "fail" or case.get("new_source"):
            continue
        if case.get("error_type") == "out_of_search_space":  # says nothing about the kernel
            continue
        module = case.get("module") or ctx.baseline_module
        source = ctx.module_sources.get(module)
        digest = case.get("source_digest")
        if source is None or (digest and digest != source_digest(source)):
            continue
        failed.add(point_key(module, dict(case.get("config") or {})))
    return failed


def _uses_avoided(module: str, config: dict[str, Any], avoid: set) -> bool:
    return any((module, k, repr(v)) in avoid for k, v in config.items())


def _score(move, steering, hints, tried_modules) -> tuple[float, str, str]:
    if move["key"] == "module":
        score, why = 0.0, f"the variant {move['new']} is another code structure"
        if move["new"] not in tried_modules:
            score += UNTRIED_VARIANT_BONUS
            why += " not tried yet"
        if any(word in move["new"].lower() for word in hints):
            score += HINTED_VARIANT_BONUS
            why += ", and its design targets this bottleneck"
        return score, why, "a different kernel structure for the same config"
    entry = steering.get((key_role(move["key"]), move["step"]))
    if entry:
        return entry
    return 0.0, "", "ranks a neighbour of a top config"


def _diagnosed_at(ctx: AgentContext) -> ShapeStanding | None:
    """The standing of the shape the diagnosis was read at (the snapshot's), when known."""
    snap = ctx.snapshot or {}
    standings = [ShapeStanding.model_validate(s) for s in ctx.standings]
    return standing_of(standings, snap.get("shape"), snap.get("dtype"))


def _shape_leaders(ctx: AgentContext) -> dict[str, dict[str, Any]]:
    """The fastest passing attempt at each shape and dtype, keyed by a label such as 'M=8192 N=32768
    bfloat16', most useful first: the shapes a roofline target is judged at, lowest roofline % first,
    then the others in an order that rotates with the round (attempts of modules outside the space
    cannot be mutated and are left out)."""
    mutable = [h for h in ctx.history if h.get("verdict") == "pass" and h.get("module") in ctx.search_spaces]
    typed = [Attempt.model_validate(h) for h in mutable]
    record = {id(a): h for a, h in zip(typed, mutable, strict=True)}  # the history entry each one reads
    best = {
        f"{shape_label(row.shape)} {dtype}": (id(a), row)
        for (_, dtype), (_, a, row) in fastest_at_each_shape(typed).items()
    }
    targeted = bool(ctx.target.get("roofline_pct"))
    min_dims = ctx.target.get("min_dims")
    judged = [label for label, (_, row) in best.items() if targeted and meets_min_dims(row.shape, min_dims)]
    judged.sort(key=lambda label: judged_pct(best[label][1]) or math.inf)
    others = [label for label in best if label not in judged]
    turn = ctx.round % len(others) if others else 0
    return {label: record[best[label][0]] for label in judged + others[turn:] + others[:turn]}


def _local_proposal(move, parent, rank, bottleneck, why, effect, ctx) -> Proposal:
    standing = f"the fastest at {parent['leads']}" if parent.get("leads") else f"top-{rank + 1}"
    head = f"one step from #{parent.get('n', 0)} ({parent['geomean_us']:.2f} us, {standing})"
    if move["key"] == "module":
        change = f"same config on {move['new']}"
    else:
        change = f"{move['key']} {move['old']}->{move['new']}"
    reason = f"{bottleneck}: {why}" if why else "local search around the top configs"
    return Proposal(
        module=move["module"],
        config=move["config"],
        rationale=f"{head}: {change}; {reason}",
        expected_effect=effect,
    )


def _random_proposal(module: str, config: dict[str, Any], ctx: AgentContext, kind: str) -> Proposal:
    return Proposal(
        module=module,
        config=config,
        rationale=f"{kind} (round {ctx.round}): {module} {config}",
        expected_effect="maps an unexplored region of the space; kept if it beats the best",
    )


def _fit(module: str, config: dict[str, Any], ctx: AgentContext, seen) -> dict[str, Any] | None:
    """The closest config in the space (smaller tiles first, then more warps) that passes the estimate."""
    space = ctx.search_spaces.get(module, {})
    frontier, visited = [dict(config)], {point_key(module, config)}
    for _ in range(12):
        nxt = []
        for cfg in frontier:
            for move in neighbours(module, cfg, {module: space}, [module]):
                role = key_role(move["key"])
                if not ((role == "tile" and move["step"] < 0) or (role == "warps" and move["step"] > 0)):
                    continue
                key = point_key(module, move["config"])
                if key in visited:
                    continue
                visited.add(key)
                if not seen(module, move["config"]) and not resource_problems(
                    module, move["config"], ctx.device_limits, ctx.history, ctx.module_sources.get(module)
                ):
                    return move["config"]
                nxt.append(move["config"])
        frontier = nxt
    return None
