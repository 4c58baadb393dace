"""The search behind the propose role, driven round by round through ExpertProposer.propose with a
synthetic cost model (no kernels): what tests/test_graph_expert.py does not cover yet.

- a whole multi-round run is deterministic under its seed, failures included;
- the pruning bound sits at 50% of the baseline's speed, and the setting moves it;
- a round without improvement doubles the share of random restarts;
- compile failures are never proposed again nor mutated;
- variants are one more dimension: an optimum that lives in a variant is found within the budget;
- the first round spreads its points over the space (no two one step apart) and tries every variant,
  however small its space beside the others, and values to avoid (failed twice, never passed) do not
  cost a variant its draw while one of its configs is allowed;
- memory_bound at the roofline stops the search, judged at the shapes the target judges (min_dims);
- a config that is slow in geomean but the fastest at one shape is searched around too, the shapes the
  roofline target is judged at first, lowest roofline first.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from typing import Any

from loop.roles import AgentContext, Diagnosis, Proposed
from loop.settings import default_settings
from nodes.expert import ExpertProposer
from tools.candidate import candidate_identity

LIMITS = default_settings()["device_limits"]
SPACE = {"BLOCK": [16, 32, 64, 128, 256, 512, 1024], "num_warps": [1, 2, 4, 8, 16], "ROWS": [1, 2, 4, 8]}
SPACES = {"baseline.py": SPACE, "split.py": SPACE}  # a variant with the same keys: 2 x 7 x 5 x 4 points
SOURCES = {"baseline.py": "# row kernel\n", "split.py": "# split kernel\n"}
OPTIMUM = ("split.py", {"BLOCK": 256, "num_warps": 4, "ROWS": 2})
START = ("baseline.py", {"BLOCK": 16, "num_warps": 1, "ROWS": 8})

Cost = Callable[[str, dict[str, Any]], float | None]


def bowl(module: str, config: dict[str, Any]) -> float | None:
    """A smooth bowl around OPTIMUM in log2 space; the variant is 30% faster everywhere. Tiles of
    BLOCK x ROWS >= 4096 elements fail to compile (None)."""
    if config["BLOCK"] * config["ROWS"] >= 4096:
        return None
    target = OPTIMUM[1]
    dist = sum(math.log2(config[k] / target[k]) ** 2 for k in target)
    return (10 + 5 * dist) * (0.7 if module == "split.py" else 1.0)


def settings(**changes: Any) -> dict[str, Any]:
    return {**default_settings()["search"], **changes}


def record(
    n: int, rnd: int, module: str, config: dict, us: float | None, origin: str = "expert", sources=SOURCES
) -> dict:
    return {
        "n": n, "round": rnd, "module": module, "config": config, "origin": origin,
        "identity": candidate_identity(sources[module], config), "verdict": "pass" if us else "fail",
        "geomean_us": us, "error_type": None if us else "compile_error",
    }  # fmt: skip


def context(history: list[dict], rnd: int, seed: int, n: int = 8, spaces=SPACES) -> AgentContext:
    return AgentContext(
        task_name="synthetic", description="d", search_spaces=spaces, module_sources=SOURCES,
        history=history, evaluated=[h["identity"] for h in history], round=rnd, n_candidates=n,
        seed=seed, device_limits=LIMITS,
    )  # fmt: skip


def run(seed: int, rounds: int = 8, n: int = 8, cost: Cost = bowl, search: dict | None = None):
    """(history, proposals per round) of a whole run: propose, 'evaluate' with the cost model, repeat."""
    history = [record(0, 0, *START, cost(*START), origin="baseline")]
    proposer = ExpertProposer(search or settings())
    rounds_out = []
    for rnd in range(1, rounds + 1):
        props = proposer.propose(context(history, rnd, seed, n)).proposals
        rounds_out.append([p.model_dump() for p in props])
        for p in props:
            history.append(record(len(history), rnd, p.module, p.config, cost(p.module, p.config)))
        if any((h["module"], h["config"]) == OPTIMUM for h in history):
            break
    return history, rounds_out


def parent_of(rationale: str) -> int | None:
    found = re.match(r"one step from #(\d+)", rationale)
    return int(found.group(1)) if found else None


def test_a_whole_run_is_deterministic_under_its_seed():
    first, second, other = run(seed=3), run(seed=3), run(seed=4)
    assert first[1] == second[1]  # every proposal of every round, rationale included
    assert [h["config"] for h in first[0]] != [h["config"] for h in other[0]]


def test_an_optimum_in_a_variant_is_found_within_the_budget():
    total = sum(math.prod(len(v) for v in s.values()) for s in SPACES.values())
    for seed in (0, 1, 2):
        history, rounds = run(seed=seed)
        found = [h for h in history if (h["module"], h["config"]) == OPTIMUM]
        assert found, (seed, min((h for h in history if h["geomean_us"]), key=lambda h: h["geomean_us"]))
        assert len(rounds) <= 8 and len(history) - 1 <= 64 < total / 4


def test_compile_failures_are_never_proposed_again_nor_mutated():
    history, rounds = run(seed=5, rounds=6)
    failed = {h["n"] for h in history if h["verdict"] == "fail"}
    assert failed, "the cost model's failing region was never sampled: the test proves nothing"
    points = [(h["module"], tuple(sorted(h["config"].items()))) for h in history]
    assert len(points) == len(set(points))  # nothing evaluated twice
    parents = [parent_of(p["rationale"]) for batch in rounds for p in batch]
    assert not failed & {p for p in parents if p is not None}


def test_the_pruning_bound_sits_at_half_the_baseline_speed():
    base = record(0, 0, "baseline.py", {"BLOCK": 64, "num_warps": 4, "ROWS": 2}, 100.0, origin="baseline")
    kept = record(1, 1, "baseline.py", {"BLOCK": 512, "num_warps": 16, "ROWS": 1}, 195.0)  # 51% speed
    pruned = record(2, 1, "split.py", {"BLOCK": 16, "num_warps": 1, "ROWS": 8}, 205.0)  # 49% speed
    better = record(3, 1, "baseline.py", {"BLOCK": 128, "num_warps": 4, "ROWS": 2}, 90.0)
    history = [base, kept, pruned, better]

    def parents(**search: Any) -> set[int | None]:
        props = (
            ExpertProposer(settings(restart_fraction=0, **search))
            .propose(context(history, 2, seed=0, n=20))  # past the 14 neighbours of the top two (#3, #0)
            .proposals
        )
        return {parent_of(p.rationale) for p in props} - {None}  # None: a restart once the moves ran out

    assert parents() == {0, 1, 3}
    assert parents(prune_below_baseline=0.4) == {0, 1, 2, 3}  # a looser bound lets it be mutated


def test_a_round_without_improvement_doubles_the_restarts_once_the_top_configs_are_checked():
    best = ("baseline.py", {"BLOCK": 64, "num_warps": 4, "ROWS": 2})

    def kinds(round_two_us: float, checked: bool = False) -> tuple[int, int]:
        history = [record(0, 0, *START, 100.0, origin="baseline"), record(1, 1, *best, 80.0),
                   record(2, 2, "baseline.py", {"BLOCK": 128, "num_warps": 4, "ROWS": 2}, round_two_us)]  # fmt: skip
        if checked:  # every one-step neighbour of the top configs since the gain (#1, #0) evaluated too
            ctx = context(history, 3, seed=0)
            for module, config in [*_neighbours(ctx, *best), *_neighbours(ctx, *START)]:
                if not any((h["module"], h["config"]) == (module, config) for h in history):
                    history.append(record(len(history), 2, module, config, 90.0))
        props = ExpertProposer(settings()).propose(context(history, 3, seed=0, n=8)).proposals
        assert len(props) == 8
        restarts = sum(p.rationale.startswith("random restart") for p in props)
        return restarts, sum(
            p.rationale.startswith(("one step from #1 ", "one step from #0 ")) for p in props
        )

    search = settings()
    usual, plateau = (
        math.floor(8 * search["restart_fraction"]),
        math.floor(8 * search["plateau_restart_fraction"]),
    )
    assert kinds(80.0) == (usual, 8 - usual) == (2, 6)  # the neighbourhoods the rule checks come first
    assert kinds(80.0, checked=True) == (plateau, 0) == (4, 0)  # checked, not converged: more restarts
    assert kinds(60.0)[0] == usual  # still improving


def _neighbours(ctx: AgentContext, module: str, config: dict) -> list[tuple[str, dict]]:
    from nodes.expert.space import neighbours

    return [
        (m["module"], m["config"])
        for m in neighbours(module, config, ctx.search_spaces, list(ctx.search_spaces))
    ]


def test_the_first_round_tries_every_variant_however_small_its_space():
    """A 4-config variant beside two of 140 would be drawn once in 70 if points were drawn uniformly."""
    small = {"num_warps": [8, 16], "PROGRAMS": [132, 264]}
    spaces = {**SPACES, "prefetch.py": small}
    sources = {**SOURCES, "prefetch.py": "# prefetch kernel\n"}
    history = [record(0, 0, *START, bowl(*START), origin="baseline")]
    for seed in range(5):
        ctx = context(history, 1, seed, n=4, spaces=spaces).model_copy(update={"module_sources": sources})
        props = ExpertProposer(settings()).propose(ctx).proposals
        assert len(props) == 4
        assert {p.module for p in props} == set(spaces), seed
    # With fewer candidates than variants, each candidate is a different variant.
    for seed in range(5):
        ctx = context(history, 1, seed, n=2, spaces=spaces).model_copy(update={"module_sources": sources})
        assert len({p.module for p in ExpertProposer(settings()).propose(ctx).proposals}) == 2, seed


def test_exploration_spreads_its_points_over_the_space():
    """Eight points of a 3^4 space beside the baseline: drawn uniformly, two of them land one step apart in
    almost every draw (about 3.6 such pairs on average), and the region between them stays unseen. Each point
    is drawn among the farthest from the ones before it, so no two are neighbours."""
    grid = {"BLOCK_M": [8, 16, 32], "BLOCK_N": [128, 256, 512], "CHUNKS": [2, 8, 32], "num_warps": [2, 4, 8]}
    start = {"BLOCK_M": 8, "BLOCK_N": 128, "CHUNKS": 2, "num_warps": 4}
    history = [record(0, 0, "baseline.py", start, 50.0, origin="baseline")]
    for seed in range(10):
        props = ExpertProposer(settings()).propose(context(history, 1, seed, spaces={"baseline.py": grid})).proposals
        points = [start] + [p.config for p in props]
        steps = [sum(a[k] != b[k] for k in grid) for a, b in itertools.combinations(points, 2)]
        assert len(points) == 9 and min(steps) >= 2, seed


def test_values_to_avoid_do_not_cost_a_variant_its_draw():
    """prefetch.py failed twice with num_warps 8 and 16 and with PROGRAMS 66 and 132 (none of them ever
    passed): of its 5 configs not yet tried, only (4, 264) uses no value to avoid. The draw that gives
    each variant its point must pick that one, not a config the filter then throws away."""
    small = {"num_warps": [4, 8, 16], "PROGRAMS": [66, 132, 264]}
    spaces = {**SPACES, "prefetch.py": small}
    sources = {**SOURCES, "prefetch.py": "# prefetch kernel\n"}
    history = [record(0, 0, *START, bowl(*START), origin="baseline")]
    for warps in (8, 16):
        for programs in (66, 132):
            config = {"num_warps": warps, "PROGRAMS": programs}
            history.append(record(len(history), 1, "prefetch.py", config, None, sources=sources))
    allowed = {"num_warps": 4, "PROGRAMS": 264}
    for seed in range(5):
        ctx = context(history, 1, seed, n=3, spaces=spaces).model_copy(update={"module_sources": sources})
        props = ExpertProposer(settings()).propose(ctx).proposals
        assert len(props) == 3
        assert {p.module for p in props} == set(spaces), (seed, [(p.module, p.config) for p in props])
        assert [p.config for p in props if p.module == "prefetch.py"] == [allowed], seed
        again = ExpertProposer(settings()).propose(ctx).proposals
        assert [p.model_dump() for p in again] == [p.model_dump() for p in props]  # deterministic


def test_memory_bound_at_the_roofline_stops_where_the_target_is_judged():
    """The M=1 shape sits at 5% of the roofline (a latency floor); the target judges M >= 4096 only, and
    there the best is at 95%: nothing left to gain from tuning. Without min_dims the M=1 shape counts."""
    per_shape = [
        {"shape": {"M": 1}, "dtype": "bfloat16", "median_us": 3.0, "roofline_pct": 5.0},
        {"shape": {"M": 4096}, "dtype": "bfloat16", "median_us": 90.0, "roofline_pct": 95.0},
        {"shape": {"M": 8192}, "dtype": "bfloat16", "median_us": 180.0, "roofline_pct": 96.0},
    ]
    best = record(1, 1, "baseline.py", {"BLOCK": 64, "num_warps": 4, "ROWS": 2}, 30.0) | {
        "per_shape": per_shape
    }
    history = [record(0, 0, *START, 60.0, origin="baseline"), best]
    diagnosis = Diagnosis(bottleneck="memory_bound", confidence=0.9)

    def propose(target: dict) -> tuple[Proposed, list]:
        ctx = context(history, 2, seed=0).model_copy(
            update={"best": best, "diagnosis": diagnosis, "target": target}
        )
        answer = ExpertProposer(settings()).propose(ctx)
        return answer, answer.proposals

    proposer, props = propose({"roofline_pct": 90, "min_dims": {"M": 4096}})
    assert props == [] and proposer.converged, proposer.reason
    assert "95%" in proposer.reason and "M >= 4096" in proposer.reason
    for target in ({"roofline_pct": 90}, {}):  # every shape judged: M=1 at 5% leaves work
        proposer, props = propose(target)
        assert props and not proposer.converged, target
    # Judged shapes below the threshold keep the search going.
    proposer, props = propose({"roofline_pct": 90, "min_dims": {"M": 1}})
    assert props and not proposer.converged


def test_a_config_fastest_at_one_shape_is_searched_around_even_when_slow_overall():
    """Per-bucket tables pick each shape's fastest config: its neighbours are worth trying even when
    its geomean keeps it out of the top-k (here: below the pruning bound too)."""

    def rows(small: float, large: float) -> list[dict]:
        return [
            {"shape": {"M": 4}, "dtype": "bfloat16", "median_us": small},
            {"shape": {"M": 8192}, "dtype": "bfloat16", "median_us": large},
        ]

    history = [record(0, 0, *START, 100.0, origin="baseline") | {"per_shape": rows(10.0, 1000.0)}]
    fast = [("baseline.py", {"BLOCK": b, "num_warps": 4, "ROWS": 1}) for b in (32, 64, 128, 256, 512, 1024)]
    for i, (module, config) in enumerate(fast, start=1):
        history.append(record(i, 1, module, config, 50.0 + i) | {"per_shape": rows(2.0 + i, 1250.0)})
    specialist = ("split.py", {"BLOCK": 64, "num_warps": 2, "ROWS": 4})  # 300 us geomean: pruned
    history.append(record(7, 1, *specialist, 300.0) | {"per_shape": rows(90.0, 900.0)})
    props = ExpertProposer(settings()).propose(context(history, 2, seed=0, n=8)).proposals  # a default round
    around = [p for p in props if parent_of(p.rationale) == 7]
    assert around, [p.rationale for p in props]
    assert all("the fastest at M=8192 bfloat16" in p.rationale for p in around)
    assert all(p.module == "split.py" or p.config == specialist[1] for p in around)


def test_shape_leaders_of_judged_shapes_come_first_lowest_roofline_first():
    """Three specialists each lead one shape. The target judges M >= 4096: the M=4096 leader (50% of
    the roofline) is searched around before the M=8192 one (80%), and the M=1 leader (latency floor,
    not judged) gets no turn in a default round."""
    shapes = [{"M": 1}, {"M": 4096}, {"M": 8192}]

    def rows(*times_pcts: tuple[float, float]) -> list[dict]:
        return [
            {"shape": shape, "dtype": "bfloat16", "median_us": us, "roofline_pct": pct}
            for shape, (us, pct) in zip(shapes, times_pcts, strict=True)
        ]

    history = [
        record(0, 0, *START, 100.0, origin="baseline") | {"per_shape": rows((10, 1), (100, 40), (100, 70))}
    ]
    fast = [("baseline.py", {"BLOCK": b, "num_warps": 4, "ROWS": 1}) for b in (32, 64, 128, 256, 512, 1024)]
    for i, (module, config) in enumerate(fast, start=1):
        history.append(
            record(i, 1, module, config, 50.0 + i) | {"per_shape": rows((9, 1), (99, 40), (99, 70))}
        )
    leaders = {  # attempt n -> (module, config, per-shape rows): each the fastest at one shape only
        7: ("split.py", {"BLOCK": 64, "num_warps": 2, "ROWS": 4}, rows((2, 5), (300, 13), (300, 23))),
        8: ("split.py", {"BLOCK": 32, "num_warps": 8, "ROWS": 2}, rows((20, 1), (80, 50), (300, 23))),
        9: ("split.py", {"BLOCK": 128, "num_warps": 1, "ROWS": 1}, rows((20, 1), (300, 13), (90, 80))),
    }
    for n, (module, config, per_shape) in leaders.items():
        history.append(record(n, 1, module, config, 300.0) | {"per_shape": per_shape})
    target = {"roofline_pct": 90, "min_dims": {"M": 4096}}
    ctx = context(history, 2, seed=0, n=8).model_copy(update={"target": target})
    props = ExpertProposer(settings()).propose(ctx).proposals
    around = [parent_of(p.rationale) for p in props if "the fastest at" in p.rationale]
    assert around[:2] == [8, 9], [p.rationale for p in props]
    assert 7 not in around
