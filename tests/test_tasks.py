"""The example tasks: they load, their baseline configs lie inside their spaces, and every candidate
module (baseline and variants) matches the PyTorch reference on every CPU and check shape.

CPU runs use the Triton interpreter. The flag is read when a kernel is decorated, so it must be set
before any task module is imported; TRITON_INTERPRET=0 in the environment turns the interpreter off
for the compiled GPU checks (`-m gpu`), which then run the same modules on the real shapes.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import math  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from types import ModuleType  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from tools.task import Task, import_file, load_task  # noqa: E402

TASKS_DIR = Path(__file__).resolve().parents[1] / "tasks"
INTERPRETED = os.environ["TRITON_INTERPRET"] == "1"

# Configs run per module. Together they reach both ends of every constexpr key of the module's space
# (checked by test_tested_configs_cover_the_extremes); the slowest under the interpreter are marked slow.
CONFIGS: dict[str, dict[str, list[dict[str, Any]]]] = {
    "add_rmsnorm": {
        "baseline.py": [
            {"ROWS": 1, "num_warps": 8},
            {"ROWS": 8, "num_warps": 32},
            {"ROWS": 2, "num_warps": 4},
        ],
        "multirow.py": [
            {"ROWS": 1, "num_warps": 4},
            {"ROWS": 8, "num_warps": 32},
            {"ROWS": 4, "num_warps": 16},
        ],
        "persistent.py": [
            {"PROGRAMS": 132, "STAGES": 1, "num_warps": 4},
            {"PROGRAMS": 1056, "STAGES": 3, "num_warps": 16},
            {"PROGRAMS": 264, "STAGES": 2, "num_warps": 8},
        ],
    },
    "softmax": {
        "baseline.py": [{"num_warps": 16}, {"num_warps": 4}, {"num_warps": 32}],
        "online.py": [
            {"BLOCK_N": 512, "PROGRAMS": 132, "num_warps": 4},
            {"BLOCK_N": 16384, "PROGRAMS": 65536, "num_warps": 32},
            {"BLOCK_N": 1024, "PROGRAMS": 264, "num_warps": 8},
        ],
        "split_row.py": [
            {"SPLITS": 1, "BLOCK_N": 4096, "num_warps": 16},
            {"SPLITS": 8, "BLOCK_N": 512, "num_warps": 4},
            {"SPLITS": 128, "BLOCK_N": 512, "num_warps": 8},
        ],
        "multirow.py": [
            {"ROWS": 1, "num_warps": 2},
            {"ROWS": 8, "num_warps": 16},
            {"ROWS": 4, "num_warps": 4},
        ],
        "prefetch.py": [
            {"PROGRAMS": 132, "num_warps": 8},
            {"PROGRAMS": 528, "num_warps": 32},
            {"PROGRAMS": 264, "num_warps": 16},
        ],
    },
    "gqa_decode": {
        "baseline.py": [
            {"BLOCK_S": 64, "num_warps": 4},
            {"BLOCK_S": 128, "num_warps": 8},
            {"BLOCK_S": 16, "num_warps": 2},
        ],
        "grouped.py": [
            {"BLOCK_S": 16, "num_warps": 2, "num_stages": 1},
            {"BLOCK_S": 128, "num_warps": 8, "num_stages": 4},
            {"BLOCK_S": 32, "num_warps": 4, "num_stages": 2},
        ],
        "split_kv.py": [
            {"SPLITS": 4, "BLOCK_S": 16, "num_warps": 4, "num_stages": 2},
            {"SPLITS": 1, "BLOCK_S": 128, "num_warps": 8, "num_stages": 4},
            {"SPLITS": 256, "BLOCK_S": 16, "num_warps": 2, "num_stages": 1},
        ],
    },
}
# Interpreted cost grows with programs x loop iterations x reductions (each tl.sum/tl.max costs ~2 ms in
# the interpreter): 64-128 splits per row take ~20 s each.
SLOW_ON_CPU = {("softmax", "split_row.py", 2), ("gqa_decode", "split_kv.py", 2)}


def _task(name: str) -> Task:
    return load_task(TASKS_DIR / name)


def _module(task: Task, module: str) -> ModuleType:
    return import_file(task.path(module), f"_test_tasks_{task.name}_{module.removesuffix('.py')}")


def _cases(slow: set[tuple[str, str, int]]) -> Iterator[Any]:
    for task_name, modules in CONFIGS.items():
        for module, configs in modules.items():
            for i, config in enumerate(configs):
                marks = [pytest.mark.slow] if (task_name, module, i) in slow else []
                values = "-".join(f"{k}{v}" for k, v in config.items())
                label = f"{task_name}-{module.removesuffix('.py')}-{values}"
                yield pytest.param(task_name, module, config, marks=marks, id=label)


@pytest.fixture
def poisoned_allocations(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fresh float allocations come back NaN-filled, so an element a kernel never writes shows up."""

    def poison(allocate: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def allocate_nan(*args: Any, **kwargs: Any) -> torch.Tensor:
            tensor = allocate(*args, **kwargs)
            if tensor.is_floating_point():
                tensor.fill_(math.nan)
            return tensor

        return allocate_nan

    for name in ("empty", "empty_like", "empty_strided"):
        monkeypatch.setattr(torch, name, poison(getattr(torch, name)))


def _as_tuple(value: Any) -> tuple[torch.Tensor, ...]:
    return value if isinstance(value, tuple) else (value,)


def _mismatch(got: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> str | None:
    """None when got matches expected elementwise within atol + rtol * |expected|, else a report."""
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return f"got {got.dtype}{list(got.shape)}, expected {expected.dtype}{list(expected.shape)}"
    g, e = got.double(), expected.double()
    error = (g - e).abs()
    bad = ~(error <= atol + rtol * e.abs())  # NaN counts as bad
    if not bad.any():
        return None
    worst = torch.where(bad, torch.nan_to_num(error, nan=math.inf), 0.0).flatten().argmax().item()
    index = list(torch.unravel_index(torch.tensor(worst), got.shape))
    first = bad.flatten().nonzero()[0].item()
    return (
        f"{bad.sum().item()} of {got.numel()} elements off; worst error {error.flatten()[worst].item():.4g} "
        f"at {[int(i) for i in index]} (got {g.flatten()[worst].item():.6g}, expected "
        f"{e.flatten()[worst].item():.6g}); first bad at flat index {first}; allowed {atol} + {rtol} * |expected|"
    )


def _check_module(task: Task, module: str, config: dict[str, Any], shapes: list[dict], device: str) -> None:
    launch = _module(task, module).launch
    failures = []
    for shape in shapes:
        for dtype in task.dtypes:
            inputs = task.make_inputs(shape, dtype, device, 0)
            before = [t.clone() for t in inputs]
            outputs = _as_tuple(launch(*inputs, **config))
            expected = _as_tuple(task.reference(*inputs))
            rtol, atol = task.tolerance(dtype)
            if len(outputs) != len(expected):
                failures.append(f"{shape} {dtype}: {len(outputs)} outputs, expected {len(expected)}")
            for i, (got, exp) in enumerate(zip(outputs, expected, strict=False)):
                problem = _mismatch(got, exp, rtol, atol)
                if problem:
                    failures.append(f"{shape} {dtype} output {i}: {problem}")
            for i, (now, then) in enumerate(zip(inputs, before, strict=True)):
                if not torch.equal(now, then):
                    failures.append(f"{shape} {dtype}: input {i} was modified")
    assert not failures, f"{task.name}/{module} {config}:\n" + "\n".join(failures)


# -- loading -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CONFIGS))
def test_task_loads_from_folder_and_json(name: str) -> None:
    from_folder = load_task(TASKS_DIR / name)
    from_json = load_task(TASKS_DIR / name / "task.json")
    assert from_folder.name == from_json.name == name
    assert from_folder.module_names == from_json.module_names == list(CONFIGS[name])
    assert from_folder.spec.cpu_shapes and from_folder.spec.check_shapes


@pytest.mark.parametrize("name", list(CONFIGS))
def test_baseline_config_is_named_and_inside_the_space(name: str) -> None:
    task = _task(name)
    named = task.spec.settings["baseline_config"]
    assert task.default_config() == named
    assert task.config_problems(named) == []


@pytest.mark.parametrize("name", list(CONFIGS))
def test_tested_configs_cover_the_extremes(name: str) -> None:
    task = _task(name)
    for module, configs in CONFIGS[name].items():
        space = task.search_space(module)
        for config in configs:
            assert task.config_problems(config, module) == [], f"{module} {config}"
        for key, values in space.items():
            tried = {config[key] for config in configs}
            assert {min(values), max(values)} <= tried, (
                f"{module}: {key} needs {min(values)} and {max(values)}"
            )


@pytest.mark.parametrize("name", list(CONFIGS))
def test_make_inputs_is_seeded_contiguous_and_nonzero(name: str) -> None:
    task = _task(name)
    shape = task.spec.cpu_shapes[0]
    for dtype in task.dtypes:
        first = task.make_inputs(shape, dtype, "cpu", 0)
        again = task.make_inputs(shape, getattr(torch, dtype), "cpu", 0)
        other = task.make_inputs(shape, dtype, "cpu", 1)
        for a, b, c in zip(first, again, other, strict=True):
            assert a.dtype == getattr(torch, dtype) and a.is_contiguous()
            assert a.abs().amax() > 0, "inputs must not be all zeros"
            assert torch.equal(a, b), "the same seed must give the same inputs"
            assert not torch.equal(a, c), "another seed must give other inputs"
        assert max(a.abs().amax().item() for a in first) >= 100, "large magnitudes must be exercised"


def test_edge_rows_are_present() -> None:
    (x,) = _task("softmax").make_inputs({"M": 4, "N": 64}, "float32", "cpu", 0)
    assert (x[0] == 0).all() and x[1].min() > 900 and x[3].abs().max() > 100
    x, r, w = _task("add_rmsnorm").make_inputs({"M": 4, "N": 64}, "bfloat16", "cpu", 0)
    assert ((x[0].float() + r[0].float()) == 0).all() and x[0].abs().max() > 0
    y, h = _task("add_rmsnorm").reference(x, r, w)
    assert (h[0] == 0).all() and (y[0] == 0).all(), "a zero row normalizes to zeros, not NaN"


# -- correctness ---------------------------------------------------------------------------------------


@pytest.mark.skipif(not INTERPRETED, reason="TRITON_INTERPRET=0: the interpreted CPU checks are off")
@pytest.mark.parametrize(("task_name", "module", "config"), list(_cases(SLOW_ON_CPU)))
def test_module_matches_reference_on_cpu(
    task_name: str, module: str, config: dict[str, Any], poisoned_allocations: None
) -> None:
    task = _task(task_name)
    _check_module(task, module, config, task.spec.cpu_shapes + task.spec.check_shapes, "cpu")


@pytest.mark.skipif(not INTERPRETED, reason="TRITON_INTERPRET=0: the interpreted CPU checks are off")
def test_online_softmax_loops_over_rows_when_programs_are_fewer(poisoned_allocations: None) -> None:
    task = _task("softmax")
    (x,) = task.make_inputs({"M": 5, "N": 300}, "float32", "cpu", 0)
    # PROGRAMS=2 is below the space's values (sized for the GPU); it makes each program take 2-3 rows.
    y = _module(task, "online.py").launch(x, BLOCK_N=128, PROGRAMS=2, num_warps=4)
    problem = _mismatch(y, task.reference(x), *task.tolerance("float32"))
    assert problem is None, problem


@pytest.mark.skipif(not INTERPRETED, reason="TRITON_INTERPRET=0: the interpreted CPU checks are off")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("prefetch", [True, False])
def test_softmax_prefetch_loops_over_rows_with_and_without_the_prefetch(
    dtype: str, prefetch: bool, poisoned_allocations: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fewer programs than rows, so each program carries a prefetched row into its next iteration
    (the space's PROGRAMS are sized for the GPU: at the CPU shapes every program has one row). A zero
    byte limit sends the rows down the path long GPU rows take, a persistent loop without the prefetch."""
    task = _task("softmax")
    module = _module(task, "prefetch.py")
    if not prefetch:
        monkeypatch.setattr(module, "PREFETCH_MAX_ROW_BYTES", 0)
    (x,) = task.make_inputs({"M": 5, "N": 300}, dtype, "cpu", 0)
    y = module.launch(x, PROGRAMS=2, num_warps=4)  # 2 programs: each loops over 2-3 rows
    problem = _mismatch(y, task.reference(x), *task.tolerance(dtype))
    assert problem is None, problem


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.skipif(INTERPRETED, reason="run with TRITON_INTERPRET=0 to compile the kernels for the GPU")
@pytest.mark.parametrize(("task_name", "module", "config"), list(_cases(set())))
def test_module_matches_reference_on_gpu(
    task_name: str, module: str, config: dict[str, Any], poisoned_allocations: None
) -> None:
    task = _task(task_name)
    _check_module(task, module, config, task.spec.shapes + task.spec.check_shapes, "cuda")
