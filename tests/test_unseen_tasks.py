"""The tasks written as a user would, of kinds the examples do not cover: they load without min_dims or
cpu_shapes, draw their inputs from a CPU generator, search a space with a loop-count constexpr, and
their baseline passes the evaluator on the CPU at its config and at both ends of every key."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from tools.evaluate import evaluate
from tools.kernel_roles import launched_roles
from tools.task import CPU_SHAPE_PRODUCT, load_task, shrunk

UNSEEN = Path(__file__).resolve().parent / "fixtures" / "tasks"
TASKS = ["scale_shift_cpu_gen", "colsum_cpu_gen", "stencil_cpu_gen"]


@pytest.mark.parametrize("name", TASKS)
def test_written_as_a_user_would_with_a_loop_count_in_the_space(name: str) -> None:
    task = load_task(UNSEEN / name)
    assert task.spec.target.roofline_pct and task.spec.target.min_dims is None
    assert task.spec.cpu_shapes == [] and "torch.Generator()" in (task.folder / "reference.py").read_text()
    roles = launched_roles(task.baseline_source)
    loops = {key for kernel in roles.values() for key, role in kernel.items() if role == "loop"}
    assert loops & set(task.spec.search_space), roles


@pytest.mark.slow
@pytest.mark.parametrize("name", ["colsum_cpu_gen", "stencil_cpu_gen"])
def test_the_baseline_passes_the_evaluator_at_its_config_and_both_ends_of_every_key(name: str) -> None:
    task = load_task(UNSEEN / name)
    space = task.spec.search_space
    for config in (
        task.default_config(),
        {k: v[0] for k, v in space.items()},
        {k: v[-1] for k, v in space.items()},
    ):
        result = evaluate(task.folder, task.baseline_source, config, device="cpu")
        assert result.verdict == "pass", (config, result.error_type, result.message)


def test_a_task_without_small_shapes_runs_on_the_cpu_at_shapes_shrunk_from_its_own() -> None:
    """No cpu_shapes and no check_shapes: a CPU run times each shape shrunk for the interpreter (once an
    IndexError while drawing the hidden shapes, before the baseline ran)."""
    task = load_task(UNSEEN / "gather_no_small_shapes")
    assert task.spec.cpu_shapes == task.spec.check_shapes == []
    small = task.cpu_shapes
    assert small and all(math.prod(s.values()) <= CPU_SHAPE_PRODUCT for s in small)
    result = evaluate(task.folder, task.baseline_source, task.default_config(), device="cpu")
    assert result.verdict == "pass", (result.error_type, result.message)
    assert [row.shape for row in result.metrics.per_shape] == small


def test_a_shape_is_shrunk_by_halving_its_largest_dim() -> None:
    small = shrunk({"V": 50000, "D": 1024, "B": 8192})
    assert math.prod(small.values()) <= CPU_SHAPE_PRODUCT
    assert small["D"] & (small["D"] - 1) == 0  # a power of two stays one
    assert small["V"] >= small["B"] >= small["D"]  # no dim overtakes another
    assert shrunk({"M": 4, "N": 300}) == {"M": 4, "N": 300}  # small enough already


def test_a_shrunk_shape_its_make_inputs_refuses_says_to_name_cpu_shapes(tmp_path) -> None:
    folder = tmp_path / "gather"
    shutil.copytree(UNSEEN / "gather_no_small_shapes", folder)
    reference = folder / "reference.py"
    guard = '    assert shape["D"] >= 256, "D must be at least 256"\n'
    reference.write_text(reference.read_text().replace("    g = torch.Generator()", guard + "    g = torch.Generator()"))
    result = evaluate(folder, load_task(folder).baseline_source, load_task(folder).default_config(), device="cpu")
    assert result.verdict == "fail" and "D must be at least 256" in result.message, result.message
    assert "name cpu_shapes in task.json" in result.message, result.message
