"""The built-in expert policy: search behaviour, steering, pruning, the critic's rulings, determinism."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from loop.roles import AgentContext, Diagnosis, Proposal
from loop.settings import default_settings
from nodes.agents import AgentSpecError, build_agents
from nodes.expert import ExpertCritic, ExpertDiagnoser, ExpertProposer
from nodes.expert.space import key_role
from tools.candidate import candidate_identity

SOURCES = {"baseline.py": "# baseline kernel\n", "split_kv.py": "# split kernel\n"}
SPACES = {
    "baseline.py": {"BLOCK_S": [16, 32, 64, 128], "num_warps": [2, 4, 8], "num_stages": [1, 2, 3]},
    "split_kv.py": {"SPLITS": [1, 2, 4, 8], "BLOCK_S": [16, 32, 64, 128], "num_warps": [2, 4, 8]},
}
LIMITS = default_settings()["device_limits"]


def search(**changes: Any) -> dict[str, Any]:
    return {**default_settings()["search"], **changes}


def attempt(
    n: int, module: str, config: dict, us: float | None, round_: int = 1, **extra: Any
) -> dict[str, Any]:
    return {
        "n": n, "round": round_, "module": module, "config": config, "origin": extra.pop("origin", "expert"),
        "identity": candidate_identity(SOURCES[module], config), "verdict": "pass" if us else "fail",
        "geomean_us": us, "error_type": extra.pop("error_type", None), **extra,
    }  # fmt: skip


BASE = attempt(
    0, "baseline.py", {"BLOCK_S": 64, "num_warps": 4, "num_stages": 2}, 100.0, 0, origin="baseline"
)


def ctx(history: list[dict], round_: int = 1, bottleneck: str | None = None, **extra: Any) -> AgentContext:
    fields = {
        "task_name": "t", "description": "d", "search_spaces": SPACES, "module_sources": SOURCES,
        "history": history, "evaluated": [h["identity"] for h in history], "round": round_, "n_candidates": 6,
        "seed": 7, "device_limits": LIMITS, "best": min((h for h in history if h["geomean_us"]),
                                                        key=lambda h: h["geomean_us"]),
        "diagnosis": Diagnosis(bottleneck=bottleneck, confidence=0.8) if bottleneck else None,
    }  # fmt: skip
    fields.update(extra)
    return AgentContext.model_validate(fields)


def inside(p: Proposal) -> bool:
    space = SPACES[p.module]
    return set(p.config) == set(space) and all(p.config[k] in space[k] for k in space)


# -- the proposer ------------------------------------------------------------------------------------
def test_exploration_draws_distinct_unevaluated_points_across_variants_with_reasons():
    props = ExpertProposer(search()).propose(ctx([BASE], round_=1)).proposals
    assert len(props) == 6 and all(inside(p) for p in props)
    keys = {(p.module, tuple(sorted(p.config.items()))) for p in props}
    assert len(keys) == 6 and ("baseline.py", tuple(sorted(BASE["config"].items()))) not in keys
    assert all(p.rationale and p.expected_effect for p in props)


def test_the_search_is_deterministic_under_the_seed():
    a = ExpertProposer(search()).propose(ctx([BASE])).proposals
    b = ExpertProposer(search()).propose(ctx([BASE])).proposals
    c = ExpertProposer(search()).propose(ctx([BASE], seed=8)).proposals
    assert [p.model_dump() for p in a] == [p.model_dump() for p in b]
    assert [p.config for p in a] != [p.config for p in c]


def test_low_parallelism_steers_to_more_smaller_programs_and_the_split_variant():
    props = (
        ExpertProposer(search(restart_fraction=0))
        .propose(ctx([BASE], round_=2, bottleneck="low_parallelism"))
        .proposals
    )
    moves = [p for p in props if "one step from #0" in p.rationale]
    assert moves, [p.rationale for p in props]
    first = moves[0]
    # The best-scored moves of the only parent: the split variant (named for it) or a smaller BLOCK_S.
    assert first.module == "split_kv.py" or first.config["BLOCK_S"] < 64
    assert any(p.module == "split_kv.py" for p in moves)
    assert any(p.module == "baseline.py" and p.config["BLOCK_S"] == 32 for p in moves)
    assert not any(p.module == "baseline.py" and p.config["BLOCK_S"] == 128 for p in moves[:3])
    assert "low_parallelism" in moves[1].rationale or "low_parallelism" in moves[0].rationale


def test_register_spills_steer_to_smaller_tiles_or_more_warps():
    props = (
        ExpertProposer(search(restart_fraction=0))
        .propose(ctx([BASE], round_=2, bottleneck="register_spills"))
        .proposals
    )
    head = [p for p in props if p.module == "baseline.py"][:3]
    for p in head:
        changed = {k for k in p.config if p.config[k] != BASE["config"][k]}
        (k,) = changed
        role, up = key_role(k), p.config[k] > BASE["config"][k]
        assert (role == "tile" and not up) or (role == "warps" and up) or (role == "stages" and not up)


def test_a_compute_bound_fp32_dot_steers_to_the_tensor_cores_first():
    space = {"DOT_TF32X3": [0, 1], "XBLOCK_SCALE": [1, 0.5, 2, 4], "WARPS_SCALE": [1, 0.5, 2, 4]}
    first = {"DOT_TF32X3": 0, "XBLOCK_SCALE": 1, "WARPS_SCALE": 1}
    base = {**BASE, "config": first, "identity": candidate_identity(SOURCES["baseline.py"], first)}
    context = ctx([base], round_=2, bottleneck="compute_bound", search_spaces={"baseline.py": space},
                  module_sources={"baseline.py": SOURCES["baseline.py"]})  # fmt: skip
    props = ExpertProposer(search(restart_fraction=0)).propose(context).proposals
    assert props[0].config == {**first, "DOT_TF32X3": 1}, [p.config for p in props]
    assert "tensor cores" in props[0].rationale


def test_pruned_and_failed_configs_are_never_mutated():
    slow = attempt(1, "baseline.py", {"BLOCK_S": 16, "num_warps": 2, "num_stages": 1}, 250.0)  # < 50% speed
    broken = attempt(2, "baseline.py", {"BLOCK_S": 128, "num_warps": 8, "num_stages": 3}, None,
                     error_type="compile_error")  # fmt: skip
    props = ExpertProposer(search(restart_fraction=0)).propose(ctx([BASE, slow, broken], round_=2)).proposals
    assert props and all("one step from #0" in p.rationale for p in props)


def test_every_shape_near_its_ceiling_stops_and_says_so():
    best = {
        **BASE,
        "per_shape": [{"shape": {"S": 1}, "roofline_pct": 93.0}, {"shape": {"S": 9}, "roofline_pct": 95.0}],
    }
    answer = ExpertProposer(search()).propose(ctx([best], round_=3, bottleneck="memory_bound"))
    assert answer.proposals == []
    assert answer.converged and "93% of the copy bandwidth" in answer.reason
    below = {**best, "per_shape": [{"shape": {"S": 1}, "roofline_pct": 60.0}]}
    assert ExpertProposer(search()).propose(ctx([below], round_=3, bottleneck="memory_bound")).proposals


def test_a_small_shape_at_its_own_ceiling_stops_the_search_whatever_its_label():
    """On the H200 the unseen scale_shift task sat at 99% of the copy bandwidth at its large shapes and
    0.4% at M=1, where a copy of the same bytes is no faster: every round profiled M=1, read
    low_parallelism, and the search went on filling SMs until the budget ran out."""
    rows = [{"shape": {"S": 1}, "roofline_pct": 0.4, "ceiling_pct": 97.0},
            {"shape": {"S": 9}, "roofline_pct": 98.8, "ceiling_pct": 99.0}]  # fmt: skip
    answer = ExpertProposer(search()).propose(ctx([{**BASE, "per_shape": rows}], 3, "low_parallelism"))
    assert answer.converged and answer.proposals == []
    assert "97% of the same-size ceiling" in answer.reason


def test_an_exhausted_space_returns_nothing_with_a_reason():
    small = {"baseline.py": {"BLOCK_S": [64], "num_warps": [4], "num_stages": [2]}}
    answer = ExpertProposer(search()).propose(ctx([BASE], search_spaces=small))
    assert answer.proposals == []
    assert answer.converged and "evaluated" in answer.reason


def test_values_that_keep_failing_are_avoided():
    fails = [
        attempt(i + 1, "baseline.py", {"BLOCK_S": 128, "num_warps": w, "num_stages": 1}, None, error_type="resource_limit")
        for i, w in enumerate((2, 4))
    ]  # fmt: skip
    props = ExpertProposer(search()).propose(ctx([BASE, *fails], round_=1)).proposals
    assert props and not any(p.module == "baseline.py" and p.config["BLOCK_S"] == 128 for p in props)


def test_the_search_finds_a_known_optimum_of_a_4d_space_within_its_budget():
    space = {"BLOCK": [16, 32, 64, 128, 256, 512, 1024], "num_warps": [1, 2, 4, 8, 16], "num_stages": [1, 2, 3, 4],
             "ROWS": [1, 2, 4, 8]}  # fmt: skip
    optimum = {"BLOCK": 256, "num_warps": 4, "num_stages": 3, "ROWS": 2}

    def cost(c: dict) -> float:
        return 10 * (1 + sum(math.log2(c[k] / optimum[k]) ** 2 for k in ("BLOCK", "num_warps", "ROWS"))
                     + (c["num_stages"] - optimum["num_stages"]) ** 2)  # fmt: skip

    source = "# k\n"
    start = {"BLOCK": 16, "num_warps": 1, "num_stages": 1, "ROWS": 8}
    history = [{"n": 0, "round": 0, "module": "k.py", "config": start, "origin": "baseline", "verdict": "pass",
                "identity": candidate_identity(source, start), "geomean_us": cost(start)}]  # fmt: skip
    proposer = ExpertProposer(search())
    total = math.prod(len(v) for v in space.values())
    for rnd in range(1, 9):
        c = AgentContext(task_name="t", description="d", search_spaces={"k.py": space}, module_sources={"k.py": source},
                         history=history, evaluated=[h["identity"] for h in history], round=rnd, n_candidates=8,
                         seed=1, device_limits=LIMITS)  # fmt: skip
        for p in proposer.propose(c).proposals:
            history.append({"n": len(history), "round": rnd, "module": p.module, "config": p.config, "origin": "expert",
                            "verdict": "pass", "identity": candidate_identity(source, p.config),
                            "geomean_us": cost(p.config)})  # fmt: skip
        if any(h["config"] == optimum for h in history):
            break
    assert any(h["config"] == optimum for h in history), min(history, key=lambda h: h["geomean_us"])
    assert len(history) - 1 <= 64 < total / 8


# -- revise mode ----------------------------------------------------------------------------------------
def test_revise_answers_a_resource_objection_with_a_smaller_tile():
    big = Proposal(module="split_kv.py", config={"SPLITS": 8, "BLOCK_S": 128, "num_warps": 2}, rationale="r")
    revise = [{"proposal": big.model_dump(), "objections": ["resources: too many registers"]}]
    limits = {
        **LIMITS,
        "max_registers_per_thread": 40,
    }  # 128 elements over 64 threads ~ 28 regs: fits only smaller
    (fixed,) = (
        ExpertProposer(search())
        .propose(ctx([BASE], mode="revise", revise=revise, device_limits=limits))
        .proposals
    )
    assert fixed.revises == 0 and len(fixed.answers) == 1
    assert fixed.config["BLOCK_S"] < 128 or fixed.config["num_warps"] > 2


def test_revise_withdraws_what_it_cannot_answer():
    p = Proposal(module="baseline.py", config=BASE["config"], rationale="r")
    revise = [{"proposal": p.model_dump(), "objections": ["style: rename the kernel"]}]
    assert ExpertProposer(search()).propose(ctx([BASE], mode="revise", revise=revise)).proposals == []


# -- the critic --------------------------------------------------------------------------------------
def rule(proposals: list[Proposal], history: list[dict] | None = None, **extra: Any):
    return ExpertCritic().critique(
        ctx(history or [BASE], constraints={"forbid": ["tl.atomic_add"]}, **extra), proposals
    )


def test_the_critic_rejects_configs_outside_the_space_naming_the_key():
    (c,) = rule(
        [
            Proposal(
                module="baseline.py", config={"BLOCK_S": 48, "num_warps": 4, "num_stages": 2}, rationale="r"
            )
        ]
    )
    assert c.verdict == "reject" and any("BLOCK_S=48" in o for o in c.objections)
    (c,) = rule([Proposal(module="baseline.py", config={"BLOCK_S": 64, "num_warps": 4, "num_stages": 2, "X": 1},
                          rationale="r")])  # fmt: skip
    assert c.verdict == "reject" and any("X is not a search-space key" in o for o in c.objections)
    (c,) = rule([Proposal(module="nope.py", config={}, rationale="r")])
    assert c.verdict == "reject" and "unknown module" in c.objections[0]


def test_the_critic_rejects_duplicates_of_anything_evaluated_or_in_the_batch():
    again = Proposal(module="baseline.py", config=BASE["config"], rationale="r")
    twin = {"BLOCK_S": 32, "num_warps": 4, "num_stages": 2}
    verdicts = rule([again, Proposal(module="baseline.py", config=twin, rationale="r"),
                     Proposal(module="baseline.py", config=twin, rationale="r")])  # fmt: skip
    assert [v.verdict for v in verdicts] == ["reject", "approve", "reject"]
    assert "#0" in verdicts[0].objections[0] and "proposal 2" in verdicts[2].objections[0]


def test_the_critic_rejects_forbidden_constructs_in_new_source():
    source = (
        "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(p):\n    tl.atomic_add(p, 1)\n\n"
        "def launch(x, **c):\n    k[(1,)](x)\n    return x\n"
    )
    (c,) = rule(
        [
            Proposal(
                module="baseline.py", config=BASE["config"] | {"BLOCK_S": 16}, source=source, rationale="r"
            )
        ]
    )
    assert c.verdict == "reject" and any(
        o.startswith("forbidden:") and "tl.atomic_add" in o for o in c.objections
    )


def test_the_critic_sends_back_resource_overruns_and_missing_rationales():
    limits = {**LIMITS, "max_threads_per_block": 128}
    (c,) = rule([Proposal(module="baseline.py", config={"BLOCK_S": 32, "num_warps": 8, "num_stages": 2},
                          rationale="r")], device_limits=limits)  # fmt: skip
    assert (
        c.verdict == "revise"
        and c.objections[0].startswith("resources:")
        and "256 threads" in c.objections[0]
    )
    (c,) = rule([Proposal(module="baseline.py", config={"BLOCK_S": 32, "num_warps": 4, "num_stages": 2},
                          rationale=" ")])  # fmt: skip
    assert c.verdict == "revise" and c.objections[0].startswith("rationale:")


def test_the_critic_learns_from_a_resource_limit_failure():
    hit = attempt(
        1, "split_kv.py", {"SPLITS": 4, "BLOCK_S": 64, "num_warps": 4}, None, error_type="resource_limit"
    )
    bigger = Proposal(
        module="split_kv.py", config={"SPLITS": 4, "BLOCK_S": 128, "num_warps": 2}, rationale="r"
    )
    smaller = Proposal(
        module="split_kv.py", config={"SPLITS": 4, "BLOCK_S": 32, "num_warps": 4}, rationale="r"
    )
    verdicts = rule([bigger, smaller], [BASE, hit])
    assert [v.verdict for v in verdicts] == ["revise", "approve"]
    assert "#1" in verdicts[0].objections[0]


# -- the diagnoser and the factory ---------------------------------------------------------------------
def test_the_diagnoser_caps_the_confidence_of_derived_snapshots_and_adds_history():
    snap = {
        "bottleneck": "low_parallelism",
        "confidence": 0.9,
        "evidence": ["8 programs on 132 SMs"],
        "source": "derived",
    }
    d = ExpertDiagnoser().diagnose(ctx([BASE], round_=2, snapshot=snap))
    assert d.bottleneck == "low_parallelism" and d.confidence <= 0.6
    assert d.evidence[0] == "8 programs on 132 SMs" and any("derived" in e for e in d.evidence)
    none = ExpertDiagnoser().diagnose(ctx([BASE]))
    assert none.confidence < 0.5 and "no profile snapshot" in none.evidence[0]


def test_the_diagnoser_reports_the_roofline_where_the_target_is_judged():
    rows = [{"shape": {"B": 1}, "roofline_pct": 30.0}, {"shape": {"B": 8}, "roofline_pct": 82.0},
            {"shape": {"B": 128}, "roofline_pct": 89.0}]  # fmt: skip
    best = {**BASE, "per_shape": rows}
    scoped = ExpertDiagnoser().diagnose(ctx([best], target={"roofline_pct": 85, "min_dims": {"B": 8}}))
    assert "82% of the copy bandwidth at the lowest judged shape (B >= 8)" in scoped.evidence
    every = ExpertDiagnoser().diagnose(ctx([best], target={"roofline_pct": 85, "min_dims": None}))
    assert "30% of the copy bandwidth at the lowest judged shape (all shapes)" in every.evidence
    speedup_only = ExpertDiagnoser().diagnose(ctx([best], target={"speedup": 2.0}))
    assert "30% of the copy bandwidth at its lowest shape" in speedup_only.evidence
    assert not any("judged" in e for e in speedup_only.evidence)


def test_build_agents_expert_by_default_and_a_clear_error_for_an_unavailable_spec():
    d, p, c = build_agents("expert", None, default_settings())
    assert isinstance(d, ExpertDiagnoser) and isinstance(p, ExpertProposer) and isinstance(c, ExpertCritic)
    try:
        import nodes.llm.factory  # noqa: F401
    except ModuleNotFoundError:
        with pytest.raises(AgentSpecError, match="openai:gpt-5"):
            build_agents("openai:gpt-5", None, default_settings())


def test_key_roles_follow_the_usual_triton_names():
    roles = {k: key_role(k) for k in ("BLOCK_N", "ROWS", "num_warps", "num_stages", "SPLITS", "EVEN_K")}
    assert roles == {"BLOCK_N": "tile", "ROWS": "tile", "num_warps": "warps", "num_stages": "stages",
                     "SPLITS": "split", "EVEN_K": "other"}  # fmt: skip


def test_exploration_covers_the_space_before_repeating():
    seen: set = set()
    history = [BASE]
    total = sum(math.prod(len(v) for v in s.values()) for s in SPACES.values())
    for rnd in itertools.count(1):
        props = ExpertProposer(search(explore_rounds=100)).propose(ctx(history, round_=rnd)).proposals
        if not props:
            break
        for p in props:
            k = (p.module, tuple(sorted(p.config.items())))
            assert k not in seen
            seen.add(k)
            history.append(attempt(len(history), p.module, p.config, 90.0, rnd))
    assert len(seen) == total - 1
