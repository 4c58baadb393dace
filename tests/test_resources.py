"""The expert critic's resource estimate: tiles and loop counts read from the module's AST, the estimate
learnt from what the compiler reported for the module's candidates, and a rejection only once that
estimate is validated (else a warning the candidate is evaluated with)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loop.roles import AgentContext, Proposal
from loop.settings import default_settings
from nodes.expert import ExpertCritic
from nodes.expert.resources import LinearEstimate, resource_findings
from tools.candidate import candidate_identity
from tools.kernel_roles import launched_roles

REPO = Path(__file__).resolve().parents[1]
UNSEEN = REPO / "tests" / "fixtures" / "tasks"
LIMITS = default_settings()["device_limits"]
SCALE_SHIFT = (UNSEEN / "scale_shift_cpu_gen" / "baseline.py").read_text()
COLSUM = (UNSEEN / "colsum_cpu_gen" / "baseline.py").read_text()


def roles_of(source: str) -> dict[str, dict[str, str]]:
    """Each launched kernel's config keys that are not ``other``."""
    return {
        k: {p: r for p, r in roles.items() if r != "other"} for k, roles in launched_roles(source).items()
    }


# -- the AST: tile or loop count ---------------------------------------------------------------------
def test_a_constexpr_bounding_a_loop_is_a_loop_count_and_one_sizing_a_block_a_tile():
    assert roles_of(SCALE_SHIFT)["scale_shift_kernel"] == {"ROWS": "loop", "BLOCK_N": "tile"}
    colsum = roles_of(COLSUM)
    assert colsum["colsum_partial_kernel"] == {"BLOCK_M": "tile", "BLOCK_N": "tile", "CHUNKS": "loop"}
    assert colsum["colsum_combine_kernel"] == {"BLOCK_N": "tile"}
    stencil = roles_of((UNSEEN / "stencil_cpu_gen" / "baseline.py").read_text())
    assert stencil == {"stencil_kernel": {"ROWS": "loop", "BLOCK_W": "tile"}}
    # The same name is a tile where the rows are one 2-D block (add_rmsnorm's multirow variant).
    multirow = roles_of((REPO / "tasks" / "add_rmsnorm" / "multirow.py").read_text())
    assert multirow["add_rmsnorm_multirow_kernel"]["ROWS"] == "tile"


def test_roles_follow_local_names_helpers_and_launch_assignments():
    source = """
import triton
import triton.language as tl


@triton.jit
def _row_tile(ptr, WIDTH: tl.constexpr):
    return tl.load(ptr + tl.arange(0, WIDTH))


@triton.jit
def k(x_ptr, y_ptr, STEPS: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    TILE: tl.constexpr = ROWS * BLOCK
    acc = tl.zeros((TILE,), dtype=tl.float32)
    for i in tl.range(0, STEPS):
        for j in tl.static_range(UNROLL):
            acc += _row_tile(x_ptr, TILE)
    tl.store(y_ptr + tl.arange(0, TILE), acc)


def launch(x, *, GROUP, BLOCK_N, STEPS, UNROLL, num_warps):
    block = BLOCK_N
    y = x.new_empty(GROUP * BLOCK_N)
    k[(1,)](x, y, STEPS, ROWS=GROUP, BLOCK=block, UNROLL=UNROLL, num_warps=num_warps)
    return y
"""
    assert roles_of(source) == {"k": {"GROUP": "tile", "BLOCK_N": "tile", "STEPS": "loop", "UNROLL": "loop"}}
    assert (
        launched_roles("def launch(:\n") is None and launched_roles("def launch(x):\n    return x\n") is None
    )


# -- the critic ----------------------------------------------------------------------------------------
def context(source: str, space: dict[str, list], history: list[dict[str, Any]] = ()) -> AgentContext:
    base = {"n": 0, "round": 0, "module": "baseline.py", "config": {k: v[0] for k, v in space.items()},
            "origin": "baseline", "verdict": "pass", "geomean_us": 100.0, "identity": "b"}  # fmt: skip
    history = [base, *history]
    return AgentContext(task_name="t", description="d", search_spaces={"baseline.py": space},
                        module_sources={"baseline.py": source}, history=history, best=base,
                        evaluated=[h["identity"] for h in history], device_limits=LIMITS)  # fmt: skip


def rule(source: str, space: dict[str, list], config: dict[str, Any], history: list[dict] = ()):
    (verdict,) = ExpertCritic().critique(context(source, space, history), [Proposal(module="baseline.py",
                                         config=config, rationale="r")])  # fmt: skip
    return verdict


SCALE_SHIFT_SPACE = {"BLOCK_N": [256, 512, 1024, 2048], "ROWS": [1, 2, 4, 8], "num_warps": [2, 4, 8]}
COLSUM_SPACE = json.loads((UNSEEN / "colsum_cpu_gen" / "task.json").read_text())["search_space"]


def test_a_loop_count_is_never_multiplied_into_the_tile():
    """The H200 run: 11 valid scale_shift proposals sent back for "about 2072 registers/thread"; the
    widest config holds 2048 elements over 64 threads, one row at a time."""
    verdict = rule(SCALE_SHIFT, SCALE_SHIFT_SPACE, {"BLOCK_N": 2048, "ROWS": 8, "num_warps": 2})
    assert (verdict.verdict, verdict.objections) == ("approve", [])


def test_an_estimate_no_compiled_kernel_has_validated_is_a_warning():
    wide = {"BLOCK_M": 32, "BLOCK_N": 512, "CHUNKS": 2, "num_warps": 2}  # 16384 elements over 64 threads
    verdict = rule(COLSUM, COLSUM_SPACE, wide)
    assert verdict.verdict == "approve"
    (warning,) = verdict.objections
    assert warning.startswith("warning: resources: about 536 registers/thread")
    assert "no compiled candidate of this module yet to validate it" in warning


@functools.cache
def compiled(module: str, kernel: str, signature: str, configs: str) -> list[dict[str, Any]]:
    """Registers and spills ptxas gives these configs for sm_90 (tests/sm90_resources.py)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "sm90_resources.py"), module, kernel, signature,
                           configs], capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    if proc.returncode != 0:
        pytest.skip(f"cannot compile for sm_90 here: {proc.stderr[-300:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def colsum_history(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    signature = json.dumps({"x_ptr": "*bf16", "part_ptr": "*fp32", "M": "i32", "N": "i32"})
    path = str(UNSEEN / "colsum_cpu_gen" / "baseline.py")
    reports = compiled(path, "colsum_partial_kernel", signature, json.dumps(configs))
    return [{"n": i + 1, "round": 1, "module": "baseline.py", "config": r["config"], "origin": "expert",
             "verdict": "pass", "geomean_us": 90.0, "identity": candidate_identity(COLSUM, r["config"]),
             "resources": {k: r[k] for k in ("n_regs", "n_spills", "shared_bytes")}} for i, r in enumerate(reports)]  # fmt: skip


WIDE = {"BLOCK_M": 32, "BLOCK_N": 512, "CHUNKS": 2, "num_warps": 2}


def test_compiled_candidates_of_the_module_validate_the_estimate_before_it_rejects():
    narrow = [{"BLOCK_M": 8, "BLOCK_N": 128, "CHUNKS": 2, "num_warps": 4},  # 8 elements per thread
              {"BLOCK_M": 8, "BLOCK_N": 256, "CHUNKS": 8, "num_warps": 2}]  # 32  # fmt: skip
    near = [{"BLOCK_M": 32, "BLOCK_N": 512, "CHUNKS": 32, "num_warps": 8}]  # 64: ~210 registers, no spill
    few = colsum_history(narrow)
    assert all(h["resources"]["n_spills"] == 0 for h in few)
    verdict = rule(COLSUM, COLSUM_SPACE, WIDE, few)
    assert verdict.verdict == "approve" and "not yet validated" in verdict.objections[0]
    enough = colsum_history(narrow + near)
    assert enough[-1]["resources"]["n_regs"] >= 0.75 * LIMITS["max_registers_per_thread"]
    verdict = rule(COLSUM, COLSUM_SPACE, WIDE, enough)
    assert verdict.verdict == "revise", verdict.objections
    (objection,) = verdict.objections
    assert (
        objection.startswith("resources: about ")
        and "fitted to 3 compiled candidate(s) of baseline.py" in objection
    )
    assert "validated" in objection and "not yet" not in objection
    # What the estimate says for a config it is validated on, it says without an objection.
    assert rule(COLSUM, COLSUM_SPACE, {**WIDE, "num_warps": 8}, enough).verdict == "approve"


def test_a_config_no_lighter_than_one_that_spilled_is_sent_back_at_once():
    spilled = colsum_history([{"BLOCK_M": 32, "BLOCK_N": 256, "CHUNKS": 2, "num_warps": 2}])  # 128 per thread
    assert spilled[0]["resources"]["n_spills"] > 0
    verdict = rule(
        COLSUM, COLSUM_SPACE, {"BLOCK_M": 16, "BLOCK_N": 512, "CHUNKS": 32, "num_warps": 2}, spilled
    )
    assert (
        verdict.verdict == "revise" and "#1" in verdict.objections[0] and "spilled" in verdict.objections[0]
    )
    lighter = {"BLOCK_M": 16, "BLOCK_N": 256, "CHUNKS": 2, "num_warps": 2}  # 64 per thread
    assert rule(COLSUM, COLSUM_SPACE, lighter, spilled).verdict == "approve"


# -- the estimate itself --------------------------------------------------------------------------------
def test_validation_needs_three_compiled_kernels_one_near_the_limit_each_predicted_by_the_others():
    far = LinearEstimate(2.0, 24.0, [(4, 30), (8, 40), (16, 60), (32, 90)])
    assert far.slope == pytest.approx(2.13, abs=0.01) and not far.validated(255)  # all far below it
    near = LinearEstimate(2.0, 24.0, [(4, 30), (16, 60), (64, 200)])
    assert near.validated(255) and near.predict(256) > 255
    assert not LinearEstimate(2.0, 24.0, [(4, 30), (64, 200)]).validated(255)  # two are too few
    # A spill the fit does not put over the limit, or a point the others put over it: not validated.
    assert not LinearEstimate(2.0, 24.0, [(4, 30), (16, 60), (64, 200)], over=[40]).validated(255)
    assert LinearEstimate(2.0, 24.0, [(4, 30), (16, 60)], over=[128]).validated(255)
    assert not LinearEstimate(2.0, 24.0, [(4, 30), (8, 80), (64, 200)]).validated(255)  # 780 from the others


def test_the_threads_limit_is_a_hard_objection_whatever_was_compiled():
    found = resource_findings(
        "baseline.py", {"BLOCK_N": 256, "ROWS": 1, "num_warps": 64}, LIMITS, [], SCALE_SHIFT
    )
    assert found.objections == ["num_warps=64 means 2048 threads per program > 1024"]


def test_an_inductor_modules_scales_are_weighed_against_its_own_spilled_config():
    """A module converted from Inductor's output scales its kernels' own blocks and warps
    (XBLOCK_SCALE, WARPS_SCALE): after its first config spilled, more warps or smaller blocks are what
    may help, and only a config asking as much of each thread is sent back."""
    from tools.inductor_import import convert_file

    converted = convert_file(REPO / "tests" / "fixtures" / "inductor" / "17_ResidualAddRMSNorm.json")
    first = {k: 1 for k in converted.search_space}
    spilled = [{"n": 1, "round": 0, "module": "baseline.py", "config": first, "origin": "baseline",
                "verdict": "pass", "geomean_us": 100.0, "identity": "first",
                "resources": {"n_regs": 255, "n_spills": 58, "shared_bytes": 0}}]  # fmt: skip
    source, space = converted.source, converted.search_space
    for lighter in ({**first, "WARPS_SCALE": 4}, {**first, "XBLOCK_SCALE": 0.5}):
        assert rule(source, space, lighter, spilled).verdict == "approve", lighter
    for heavier in ({**first, "XBLOCK_SCALE": 2}, {**first, "WARPS_SCALE": 0.5}):
        verdict = rule(source, space, heavier, spilled)
        assert verdict.verdict == "revise" and "relative to its kernels' own" in verdict.objections[0], heavier
