"""KernelBench-format problems imported as tasks: sizes, weights as inputs, constants, outputs, bad files.

The 20 problems under bench/kernelbench/problems are imported once per session into a temporary
folder; the synthetic problems below cover what they do not (no sizes, broken files).
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import pytest
import torch

from tools import kernelbench
from tools import kernelbench_reference as runtime
from tools.task import import_file, load_task

PROBLEMS = Path(__file__).resolve().parents[1] / "bench" / "kernelbench" / "problems"


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("kb")
    assert kernelbench.main([str(PROBLEMS), "--out", str(out)]) == 0
    return out


def _model_output(task_dir: Path, shape: dict[str, int], seed: int):
    """The problem's Model run directly (weights under the task's fixed seed) on get_inputs() under ``seed``."""
    problem = runtime.load_problem(task_dir / "problem.py", f"_direct_{task_dir.name}")
    spec = json.loads((task_dir / "task.json").read_text())
    runtime.set_sizes(problem, shape)
    model = runtime.build_model(problem, kernelbench.MODEL_SEED)
    items = runtime.forward_items(problem, "cpu", seed)
    assert spec["settings"]["kernelbench"]["own_shape"]  # the importer records the problem's own size
    with torch.no_grad():
        return model(*items)


def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


def test_every_problem_imports_as_a_task_without_a_baseline(imported):
    folders = sorted(p for p in imported.iterdir() if p.is_dir())
    assert len(folders) == 20
    for folder in folders:
        task = load_task(folder)
        assert task.baseline_name is None and task.module_names == []
        assert {"task.json", "reference.py", "problem.py"} <= {p.name for p in folder.iterdir()}
        assert task.spec.cpu_shapes and task.spec.check_shapes


@pytest.mark.parametrize("name", sorted(p.stem for p in PROBLEMS.glob("*.py")))
def test_the_reference_is_the_models_own_forward_on_the_task_inputs(imported, name):
    task = load_task(imported / name)
    for shape in task.spec.cpu_shapes:
        got = _tuple(task.reference(*task.make_inputs(shape, torch.float32, "cpu", 3)))
        want = _tuple(_model_output(imported / name, shape, 3))
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype
            assert torch.equal(g, w) or torch.allclose(g, w, equal_nan=True)


def test_size_constants_become_dims_with_the_own_size_first_then_the_batch_scaled(imported):
    spec = load_task(imported / "01_GELUTanh").spec
    assert [s["batch_size"] for s in spec.shapes] == [8192, 4096, 16384]
    assert all(s["dim"] == 8192 for s in spec.shapes)
    assert spec.settings["kernelbench"]["own_shape"] == {"batch_size": 8192, "dim": 8192}


@pytest.mark.parametrize(
    ("name", "dims", "fixed"),
    [
        ("04_SumOverMiddleDim", ["batch_size", "rows", "cols"], "reduce_dim = 1"),  # an axis, not a size
        ("09_GroupNormImages", ["batch_size", "channels", "height", "width"], "groups = 8"),
        ("15_LinearGELU", ["tokens", "in_features", "out_features"], None),
    ],
)
def test_only_integers_that_change_a_shape_are_dims(imported, name, dims, fixed):
    task = load_task(imported / name)
    assert task.spec.settings["kernelbench"]["dims"] == dims
    assert list(task.spec.shapes[0]) == dims
    if fixed:
        assert fixed in task.spec.description


def test_weights_are_inputs_and_the_reference_uses_the_ones_it_is_given(imported):
    task = load_task(imported / "07_LayerNormAffine")
    shape = task.spec.cpu_shapes[0]
    x, weight, bias = task.make_inputs(shape, torch.float32, "cpu", 0)
    assert weight.shape == bias.shape == (shape["features"],)
    assert not weight.requires_grad
    shifted = task.reference(x, weight, bias + 1.0)
    assert torch.allclose(shifted, task.reference(x, weight, bias) + 1.0, atol=1e-6)
    again = task.make_inputs(shape, torch.float32, "cpu", 1)
    assert not torch.equal(again[0], x)  # the forward's inputs follow the seed
    assert torch.equal(again[1], weight) and torch.equal(again[2], bias)  # the weights do not
    assert "norm.weight [4096], norm.bias [4096]" in task.spec.description  # at the own size


def test_a_buffer_is_an_input_like_a_parameter(imported):
    task = load_task(imported / "02_SiLUScaleShift")
    x, scale, shift = task.make_inputs(task.spec.cpu_shapes[0], torch.float32, "cpu", 0)
    assert torch.allclose(shift, torch.linspace(-1.0, 1.0, x.shape[1]))


def test_several_inputs_and_outputs(imported):
    task = load_task(imported / "17_ResidualAddRMSNorm")
    x, residual, weight = task.make_inputs(task.spec.cpu_shapes[0], torch.float32, "cpu", 0)
    y, h = task.reference(x, residual, weight)
    assert torch.equal(h, x + residual) and y.shape == x.shape


@pytest.mark.parametrize(
    ("name", "constant"), [("03_HardSwishClamp", "limit = 2.5"), ("13_SmoothL1Beta", "beta = 0.5")]
)
def test_non_tensor_forward_arguments_are_task_constants(imported, name, constant):
    task = load_task(imported / name)
    inputs = task.make_inputs(task.spec.cpu_shapes[0], torch.float32, "cpu", 0)
    assert all(isinstance(t, torch.Tensor) for t in inputs)
    assert f"constants of the task: {constant}" in task.spec.description


def test_integer_inputs_keep_their_dtype_and_floating_ones_take_the_tasks(imported):
    task = load_task(imported / "12_CrossEntropyMean")
    logits, targets = task.make_inputs(task.spec.cpu_shapes[0], torch.bfloat16, "cpu", 0)
    assert logits.dtype == torch.bfloat16 and targets.dtype == torch.int64
    assert task.reference(logits, targets).dtype == torch.bfloat16


def test_flops_are_counted_for_matmuls_and_attention_only(imported):
    linear = load_task(imported / "15_LinearGELU").spec.settings["kernelbench"]["flops"]
    assert linear == [2 * t * 4096 * 4096 for t in (8192, 4096, 16384)]
    attention = load_task(imported / "16_ScaledDotProductAttention").spec.settings["kernelbench"]["flops"]
    assert attention[0] == 2 * (2 * 8 * 16 * 1024 * 1024 * 64)
    assert load_task(imported / "10_SoftmaxRows").spec.settings["kernelbench"]["flops"] == [None] * 3


def test_tolerance_is_per_dtype_and_looser_for_matmuls(imported, tmp_path):
    assert load_task(imported / "10_SoftmaxRows").tolerance("float32") == (1e-4, 1e-4)
    assert load_task(imported / "15_LinearGELU").tolerance("float32") == (1e-2, 1e-2)
    assert kernelbench.main([str(PROBLEMS / "10_SoftmaxRows.py"), str(PROBLEMS / "15_LinearGELU.py"),
                             "--out", str(tmp_path), "--dtype", "bfloat16"]) == 0  # fmt: skip
    assert load_task(tmp_path / "10_SoftmaxRows").tolerance("bfloat16") == (2e-2, 2e-2)
    assert load_task(tmp_path / "15_LinearGELU").tolerance("bfloat16") == (3e-2, 3e-2)


def test_cpu_shapes_are_small_and_check_shapes_are_odd_or_one(imported):
    for folder in sorted(p for p in imported.iterdir() if p.is_dir()):
        task = load_task(folder)
        for shape in task.spec.cpu_shapes + task.spec.check_shapes:
            inputs = task.make_inputs(shape, torch.float32, "cpu", 0)
            outputs = _tuple(task.reference(*inputs))
            assert sum(t.numel() for t in (*inputs, *outputs)) <= kernelbench.CHECK_ELEMENTS + 4096
        odd = [s for s in task.spec.cpu_shapes + task.spec.check_shapes if any(v % 2 for v in s.values())]
        assert odd, f"{folder.name}: no shape with an odd size"


def test_a_shape_the_problem_rejects_is_moved_to_the_nearest_it_accepts(imported):
    task = load_task(imported / "09_GroupNormImages")  # channels must be a multiple of 8 groups
    x, weight, bias = task.make_inputs(
        {"batch_size": 2, "channels": 11, "height": 4, "width": 5}, torch.float32, "cpu", 0
    )
    assert x.shape == (2, 8, 4, 5) and weight.shape == (8,)
    assert task.reference(x, weight, bias).shape == x.shape


def test_the_reference_recognizes_inputs_made_in_another_process(imported):
    task = load_task(imported / "07_LayerNormAffine")
    shape = task.spec.check_shapes[-1]
    inputs = task.make_inputs(shape, torch.float32, "cpu", 0)
    fresh = import_file(imported / "07_LayerNormAffine" / "reference.py", "_fresh_reference_07")
    assert torch.equal(fresh.reference(*inputs), task.reference(*inputs))
    # a shape the task does not list (the judge's hidden shapes), made elsewhere: its sizes say which
    unlisted = {**shape, **{d: v + 3 for d, v in shape.items()}}
    made = task.make_inputs(unlisted, torch.float32, "cpu", 1)
    again = import_file(imported / "07_LayerNormAffine" / "reference.py", "_fresh_reference_07b")
    assert torch.equal(again.reference(*made), task.reference(*made))
    with pytest.raises(ValueError, match="match none of the task's shapes"):  # sizes no shape makes
        fresh.reference(torch.zeros(3, 5), torch.zeros(6), torch.zeros(5))


def test_inputs_made_elsewhere_are_recognized_when_a_dim_moves_only_in_multiples(imported):
    task = load_task(imported / "09_GroupNormImages")  # channels: a multiple of the 8 groups
    base = task.spec.cpu_shapes[0]
    unlisted = {**base, "batch_size": base["batch_size"] + 2, "width": base["width"] - 1}
    made = task.make_inputs(unlisted, torch.float32, "cpu", 1)
    elsewhere = import_file(imported / "09_GroupNormImages" / "reference.py", "_fresh_reference_09")
    assert torch.equal(elsewhere.reference(*made), task.reference(*made))


def test_an_edited_problem_file_is_refused(imported, tmp_path):
    folder = tmp_path / "task"
    folder.mkdir()
    for name in ("task.json", "reference.py", "problem.py"):
        (folder / name).write_text((imported / "01_GELUTanh" / name).read_text())
    (folder / "problem.py").write_text((folder / "problem.py").read_text().replace("tanh", "none"))
    task = load_task(folder)
    with pytest.raises(
        RuntimeError, match="changed since the task was imported"
    ):  # its own copy of ProblemChanged
        task.make_inputs(task.spec.cpu_shapes[0], torch.float32, "cpu", 0)


def test_the_reference_compiles_under_torch_compile(imported):
    task = load_task(imported / "17_ResidualAddRMSNorm")
    inputs = task.make_inputs(task.spec.cpu_shapes[1], torch.float32, "cpu", 0)
    torch._dynamo.reset()
    compiled = torch.compile(task.reference, backend="aot_eager", dynamic=False)(*inputs)
    for got, want in zip(compiled, task.reference(*inputs), strict=True):
        assert torch.allclose(got, want)


# -- problems the 20 do not cover ---------------------------------------------------------------------------
FIXED_SIZE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """Doubles its input."""

    def forward(self, x):
        return 2 * x


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return []
'''


def _problem(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_problem_without_size_constants_is_imported_at_its_own_size_and_says_so(tmp_path, capsys):
    path = _problem(tmp_path, "fixed", FIXED_SIZE)
    assert kernelbench.main([str(path), "--out", str(tmp_path / "out")]) == 0
    assert "imported at its own size only" in capsys.readouterr().err
    task = load_task(tmp_path / "out" / "fixed")
    assert task.spec.shapes == [{"dim0": 16, "dim1": 32}] and task.spec.cpu_shapes == task.spec.shapes
    assert "imported at its own size only" in task.spec.description
    (x,) = task.make_inputs({"dim0": 17, "dim1": 32}, torch.float32, "cpu", 0)  # any shape: its own size
    assert x.shape == (16, 32) and torch.equal(task.reference(x), 2 * x)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("def broken(:\n    pass\n", "syntax error at line 1"),
        (FIXED_SIZE.replace("class Model", "class Net"), "no class Model(nn.Module)"),
        (FIXED_SIZE.replace("def get_inputs", "def inputs"), "no def get_inputs()"),
        (FIXED_SIZE.replace("def get_init_inputs", "def init_inputs"), "no def get_init_inputs()"),
        (FIXED_SIZE.replace("return [torch.randn(16, 32)]", "raise RuntimeError('no data')"),
         "get_inputs() raised RuntimeError: no data"),
        (FIXED_SIZE.replace("class Model(nn.Module)", "class Model"), "Model is not a torch.nn.Module subclass"),
        (FIXED_SIZE.replace("return [torch.randn(16, 32)]", "return [torch.randn(16, 32), {'a': 1}]"),
         "forward argument #1 is a dict"),
        (FIXED_SIZE.replace("import torch\n", "import torch\nimport not_a_module\n"), "importing it raised ModuleNotFoundError"),
    ],
)  # fmt: skip
def test_a_file_that_is_not_a_problem_is_named_with_what_it_lacks_and_the_rest_still_import(
    tmp_path, capsys, text, message
):
    bad = _problem(tmp_path, "bad", text)
    good = _problem(tmp_path, "good", FIXED_SIZE)
    code = kernelbench.main([str(bad), str(good), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and str(bad) in lines[0] and message in lines[0]
    assert (tmp_path / "out" / "good" / "task.json").is_file()
    assert not (tmp_path / "out" / "bad").exists()


def test_a_missing_path_is_an_error_and_exit_2(tmp_path, capsys):
    assert kernelbench.main([str(tmp_path / "nope.py"), "--out", str(tmp_path)]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_cpu_shapes_stay_within_the_interpreters_budget(imported):
    spec = load_task(imported / "16_ScaledDotProductAttention").spec
    small = spec.cpu_shapes[0]
    assert 3 * math.prod(small.values()) + math.prod(small.values()) <= kernelbench.CPU_ELEMENTS
