"""Which shapes the diagnosis looks at, how it tells launch-bound sizes from bandwidth-bound ones, and
that no fix is proposed for a shape already at its ceiling (loop/headroom.py, nodes/diagnose.py, the
expert policy)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from graph_support import Run, ScriptedEvaluator, ScriptedProposer, passed, prop

from loop.headroom import profile_choice, shape_standings
from loop.records import ShapeRow
from loop.roles import AgentContext, Diagnosis
from loop.scoring import near_ceiling
from loop.settings import default_settings
from nodes.diagnose import largest_workload, profiled_shapes
from nodes.expert import ExpertDiagnoser, ExpertProposer
from tools.task import load_task

REPO = Path(__file__).resolve().parents[1]
SETTINGS = default_settings()
NEAR = SETTINGS["search"]["near_roofline_pct"]
LAUNCH_BOUND_BELOW = SETTINGS["profiler"]["launch_bound_below_pct"]


def rows(
    figures: dict[int, tuple[float, float | None]], dim: str = "M", other: dict | None = None
) -> list[ShapeRow]:
    """{size: (% of the copy bandwidth, % of the same-size ceiling)} as the judge reports them."""
    return [
        ShapeRow(shape={dim: size, **(other or {})}, dtype="bfloat16", median_us=100.0, roofline_pct=copy,
                 ceiling_pct=ceiling)
        for size, (copy, ceiling) in figures.items()
    ]  # fmt: skip


# The unseen scale_shift task on the H200: M=1 moves 86 kB, at 0.4% of the copy bandwidth as is a copy
# of its bytes; the large shapes stream. Here M=2048 lags its ceiling.
SCALE_SHIFT = rows({1: (0.4, 97.0), 2048: (78.0, 81.0), 16384: (98.8, 99.3)}, other={"N": 21504})


def test_the_shape_furthest_from_its_ceiling_and_the_largest_judged_shape_are_profiled():
    standings = shape_standings(SCALE_SHIFT, NEAR, LAUNCH_BOUND_BELOW)
    choice = profile_choice(standings)
    # Not M=1, the lowest % of the copy bandwidth: it is at its own ceiling.
    assert [s.shape["M"] for s in choice] == [2048, 16384]
    assert [s.size_class for s in standings] == ["launch_bound", "bandwidth_bound", "bandwidth_bound"]
    assert [s.at_ceiling for s in standings] == [True, False, True]
    # Reaching its ceiling, M=2048 would cut the geomean of 3 shapes by 1 - 0.81^(1/3).
    assert choice[0].gain_pct == pytest.approx(100 * (1 - 0.81 ** (1 / 3)))


def test_a_starved_large_shape_is_found_and_min_dims_names_the_largest_judged_shape():
    """Naive gqa_decode on the H200: B=1 reads 2.7% of the copy bandwidth with 32 programs over 134 MB,
    which a copy streams: it is furthest from its ceiling, not launch-bound."""
    gqa = rows({1: (2.7, 2.8), 8: (21.2, 22.0), 32: (38.4, 39.0), 128: (39.2, 39.5)}, "B", {"S": 1024})
    standings = shape_standings(gqa, NEAR, LAUNCH_BOUND_BELOW, {"B": 8})
    assert [s.shape["B"] for s in profile_choice(standings)] == [1, 128]
    assert standings[0].size_class == "bandwidth_bound" and not standings[0].judged
    # When the furthest is also the largest judged shape, it is profiled once.
    one = shape_standings(rows({1: (90.0, 99.0), 8: (60.0, 61.0)}, "B"), NEAR, LAUNCH_BOUND_BELOW)
    assert [s.shape["B"] for s in profile_choice(one)] == [8]


def test_every_row_weighs_one_factor_of_the_geomean_whatever_its_dtype():
    two_dtypes = SCALE_SHIFT + [
        r.model_copy(update={"dtype": "float32", "ceiling_pct": 60.0}) for r in SCALE_SHIFT[:1]
    ]
    standings = shape_standings(two_dtypes, NEAR, LAUNCH_BOUND_BELOW)
    first = profile_choice(standings)[0]
    assert (first.shape["M"], first.dtype) == (1, "float32")
    assert first.gain_pct == pytest.approx(100 * (1 - 0.6 ** (1 / 4)))


def test_without_a_measured_figure_the_largest_shape_is_profiled():
    task = load_task(REPO / "tests" / "fixtures" / "tasks" / "scale_shift_cpu_gen")
    interpreted = [ShapeRow(shape=s, dtype=d, median_us=5.0) for s, d in task.workload("cpu")]
    standings = shape_standings(interpreted, NEAR, LAUNCH_BOUND_BELOW)
    assert profile_choice(standings) == []
    assert profiled_shapes(task, "cpu", standings) == [largest_workload(task, "cpu")]
    gpu = shape_standings(SCALE_SHIFT, NEAR, LAUNCH_BOUND_BELOW)
    assert profiled_shapes(task, "cuda", gpu) == [({"M": 2048, "N": 21504}, "bfloat16"),
                                                 ({"M": 16384, "N": 21504}, "bfloat16")]  # fmt: skip


def context(
    snapshot: dict, bottleneck: str | None = None, per_shape: list[ShapeRow] = SCALE_SHIFT
) -> AgentContext:
    source = "# baseline\n"
    base = {"n": 0, "round": 0, "module": "baseline.py", "config": {"BLOCK_N": 1024, "ROWS": 2, "num_warps": 4},
            "origin": "baseline", "verdict": "pass", "identity": "b", "geomean_us": 100.0,
            "per_shape": [r.model_dump() for r in per_shape]}  # fmt: skip
    standings = shape_standings(per_shape, NEAR, LAUNCH_BOUND_BELOW)
    return AgentContext(
        task_name="t", description="d", module_sources={"baseline.py": source}, history=[base], best=base,
        search_spaces={"baseline.py": {"BLOCK_N": [256, 512, 1024, 2048], "ROWS": [1, 2, 4, 8], "num_warps": [2, 4, 8]}},
        evaluated=["b"], round=2, n_candidates=8, seed=3, snapshot=snapshot,
        standings=[s.model_dump() for s in standings],
        diagnosis=Diagnosis(bottleneck=bottleneck, confidence=0.9) if bottleneck else None,
    )  # fmt: skip


def snap_at(m: int, bottleneck: str, evidence: str, **extra) -> dict:
    return {"source": "ncu", "bottleneck": bottleneck, "confidence": 0.9, "evidence": [evidence],
            "shape": {"M": m, "N": 21504}, "dtype": "bfloat16", **extra}  # fmt: skip


def test_the_diagnosis_names_its_shape_and_tells_launch_bound_sizes_from_bandwidth_bound_ones():
    largest = snap_at(16384, "memory_bound", "DRAM throughput 84% of peak")
    snap = snap_at(2048, "latency_bound", "nothing saturated", others=[largest])
    d = ExpertDiagnoser().diagnose(context(snap))
    assert d.summary.startswith("latency_bound at M=2048 N=21504 (confidence")
    text = "\n".join(d.evidence)
    assert "profiled at M=2048 N=21504 bfloat16: 81% of its same-size ceiling, the furthest from it" in text
    assert "launch-bound shapes (a copy of their bytes is itself dominated by launch and ramp-up): " \
           "M=1 N=21504 bfloat16 97% of their same-size ceiling; all at their ceiling" in text  # fmt: skip
    assert "bandwidth-bound shapes (their bytes dominate): M=2048 N=21504 bfloat16 81%, " \
           "M=16384 N=21504 bfloat16 99% of their same-size ceiling; room left" in text  # fmt: skip
    assert "at M=16384 N=21504 bfloat16 (the largest judged shape, 99% of its ceiling): memory_bound" in text


def test_no_fix_is_proposed_for_a_shape_already_at_its_ceiling():
    """The H200 run: every rationale spoke of filling SMs, diagnosed at M=1, which was at its ceiling."""
    starved = snap_at(1, "low_parallelism", "grid of 1 blocks for 132 SMs")
    proposals = ExpertProposer(SETTINGS["search"]).propose(context(starved, "low_parallelism")).proposals
    assert proposals
    assert not any("SM" in p.rationale or "low_parallelism" in p.rationale for p in proposals), [
        p.rationale for p in proposals
    ]
    # The same diagnosis at a shape with room left steers, and says where it was read.
    lagging = [r.model_copy(update={"ceiling_pct": 40.0}) if r.shape["M"] == 1 else r for r in SCALE_SHIFT]
    steered = (
        ExpertProposer(SETTINGS["search"]).propose(context(starved, "low_parallelism", lagging)).proposals
    )
    assert any("low_parallelism at M=1 N=21504 bfloat16: smaller tiles" in p.rationale for p in steered)


def test_the_diagnose_node_profiles_two_shapes_and_the_snapshot_says_which(tmp_path):
    """A GPU-timed best without ncu: derived snapshots at the shape furthest from its ceiling (the first)
    and at the largest shape (under ``others``), each naming its shape and standing."""
    shapes = [{"M": 1, "N": 300}, {"M": 4, "N": 300}, {"M": 64, "N": 300}]
    spec = {"shapes": shapes}
    from test_graph import axpy_with

    task = axpy_with(tmp_path, **spec)
    result = passed(50.0, interpreted=False, roofline_pct=80.0)
    template = result.metrics.per_shape[0]
    figures = {1: (3.0, 95.0), 4: (40.0, 70.0), 64: (80.0, 85.0)}
    result.metrics.per_shape = [
        template.model_copy(update={"shape": s, "roofline_pct": figures[s["M"]][0], "ceiling_pct": figures[s["M"]][1]})
        for s in shapes
    ]  # fmt: skip
    result.resources["kernels"] = [{"name": "axpy", "grid": [math.ceil(s["M"] * 300 / 128)], "num_warps": 4,
                                    "shape": s} for s in shapes]  # fmt: skip
    evaluator = ScriptedEvaluator({}, default=result)
    evaluator.table.clear()  # the baseline too
    run = Run(tmp_path, ScriptedProposer([[prop(256, 4)]]), evaluator=evaluator, budget={"rounds": 1})
    run.inputs["task"] = str(task)
    run.start()
    snap = run.state["snapshot"]
    assert (snap["shape"], snap["dtype"]) == ({"M": 4, "N": 300}, "float32")
    assert snap["standing"]["ceiling_pct"] == 70.0 and snap["standing"]["size_class"] == "bandwidth_bound"
    assert snap["metrics"]["programs"] == 10  # the grid at M=4, not another shape's
    (largest,) = snap["others"]
    assert largest["shape"] == {"M": 64, "N": 300} and largest["metrics"]["programs"] == 150


def test_no_profile_is_worth_taking_when_every_judged_shape_is_at_its_ceiling():
    assert near_ceiling(rows({1: (0.4, 97.0), 4096: (98.0, 99.0)}), None, NEAR)
    assert not near_ceiling(rows({1: (0.4, 97.0), 4096: (70.0, 71.0)}), None, NEAR)
    # a shape the target does not judge (min_dims) may lag: the judged ones decide
    assert near_ceiling(rows({1: (0.4, 40.0), 4096: (98.0, 99.0)}), {"M": 1024}, NEAR)
    # interpreter times carry no ceiling: nothing is known to be at it
    assert not near_ceiling([ShapeRow(shape={"M": 8}, dtype="float32", median_us=5.0)], None, NEAR)


def _gpu_run(tmp_path, ceilings: dict[int, float]) -> list[dict]:
    """A one-round graph run on a GPU-timed task (scripted results, no GPU needed): the audit trail."""
    from test_graph import axpy_with

    shapes = [{"M": m, "N": 300} for m in ceilings]
    tmp_path.mkdir()
    task = axpy_with(tmp_path, shapes=shapes)
    result = passed(50.0, interpreted=False, roofline_pct=80.0)
    template = result.metrics.per_shape[0]
    result.metrics.per_shape = [template.model_copy(update={"shape": s, "ceiling_pct": ceilings[s["M"]]})
                                for s in shapes]  # fmt: skip
    evaluator = ScriptedEvaluator({}, default=result)
    evaluator.table.clear()
    run = Run(tmp_path, ScriptedProposer([[prop(256, 4)]]), evaluator=evaluator, budget={"rounds": 1})
    run.inputs |= {"task": str(task), "device": "cuda"}
    run.start()
    log = Path(run.state["run_dir"]) / "log.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_a_gpu_run_at_its_ceiling_everywhere_takes_no_ncu_profile(tmp_path, monkeypatch):
    import nodes.diagnose

    asked = []
    monkeypatch.setattr(nodes.diagnose, "ncu_available", lambda: asked.append(1) or "ncu is not installed")
    trail = _gpu_run(tmp_path / "a", {1: 97.0, 64: 99.0})
    assert not asked and any(e["message"].startswith("ncu skipped: every judged shape") for e in trail)
    _gpu_run(tmp_path / "b", {1: 97.0, 64: 70.0})  # one shape with room left: ncu is asked for
    assert asked
