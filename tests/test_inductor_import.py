"""Inductor's output as a candidate: every committed capture converts, passes the static checks and
matches the task's reference under the Triton interpreter, at its captured shapes (torch.compile's own
configs and scaled ones) and, through the general kernels, at shapes nobody captured.

Captures live in tests/fixtures/inductor (H200) and tests/fixtures/inductor/provisional (made without a
GPU; see the README there). The tasks are the 20 problems imported afresh.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tools import kernelbench
from tools.compare import compare
from tools.inductor_import import (
    Capture,
    ConversionError,
    convert,
    convert_file,
    load_fixture,
    static_problems,
)
from tools.task import import_file, load_task

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "inductor"
FILES = sorted(FIXTURES.glob("*.json")) + sorted((FIXTURES / "provisional").glob("*.json"))
LIBRARY_ONLY = {
    "15_LinearGELU",
    "16_ScaledDotProductAttention",
}  # a library kernel without --gemm triton-gemm
CONVERTIBLE = [f for f in FILES if not (f.parent.name == "provisional" and f.stem in LIBRARY_ONLY)]
INTERPRETER_ELEMENTS = 20_000  # shapes run under the interpreter: the small ones of a capture


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("kb_tasks")
    assert kernelbench.main([str(ROOT / "bench" / "kernelbench" / "problems"), "--out", str(out)]) == 0
    return out


def _module(source: str, tmp_path: Path, name: str):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return import_file(path, f"_inductor_candidate_{name}_{abs(hash(source))}")


def _matches(task, module, shape: dict, config: dict) -> str | None:
    """None when launch(*inputs, **config) matches the reference at shape, else why not."""
    inputs = task.make_inputs(shape, torch.float32, "cpu", 0)
    expected = task.reference(*[t.clone() for t in inputs])
    got = module.launch(*inputs, **config)
    expected, got = (x if isinstance(x, tuple) else (x,) for x in (expected, got))
    rtol, atol = task.tolerance("float32")
    for g, e in zip(got, expected, strict=True):
        found = compare(g, e, rtol, atol, task.row_scaled)
        if found is not None:
            return f"{shape} {config}: {found[0]} at {found[1]['index']}"
    return None


def _configs(space: dict) -> list[dict]:
    """torch.compile's own config, then every key at x2, then every key at x0.5."""
    return [{}, {k: 2 for k in space}, {k: 0.5 for k in space}]


def test_there_are_captures_to_convert():
    assert len(CONVERTIBLE) >= 7


@pytest.mark.parametrize("path", CONVERTIBLE, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_capture_converts_to_a_candidate_that_passes_the_static_checks(path):
    for portable in (False, True):
        converted = convert_file(path, portable_math=portable)
        assert static_problems(converted.source) is None
        assert converted.search_space["WARPS_SCALE"] == [1, 0.5, 2, 4]


@pytest.mark.parametrize("path", CONVERTIBLE, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_candidate_matches_the_reference_at_captured_shapes_and_elsewhere(path, tasks, tmp_path):
    fixture = load_fixture(path)
    task = load_task(tasks / fixture.task)
    converted = convert_file(path, portable_math=True)  # the interpreter has no libdevice
    module = _module(converted.source, tmp_path, fixture.task)
    small = [c.shape for c in fixture.captures if sum(map(_numel, c.inputs)) <= INTERPRETER_ELEMENTS]
    assert small, "no captured shape is small enough for the interpreter"
    problems = [
        p
        for shape in small
        for config in _configs(converted.search_space)
        if (p := _matches(task, module, shape, config))
    ]
    assert problems == []
    if fixture.general is None:
        return
    uncaptured = [{d: v + 2 for d, v in small[0].items()}, {d: max(2, v - 1) for d, v in small[0].items()}]
    for shape in uncaptured:
        inputs = task.make_inputs(shape, torch.float32, "cpu", 0)
        if any(_signature(inputs) == _signature_of(c) for c in fixture.captures):
            continue
        try:
            assert _matches(task, module, shape, {}) is None
        except ValueError as exc:  # a size Inductor kept fixed in its general kernels (LayerNorm's width)
            assert "general kernels need" in str(exc) and fixture.task == "07_LayerNormAffine"


def _numel(shape: list[int]) -> int:
    n = 1
    for size in shape:
        n *= size
    return n


def _signature(inputs: tuple) -> list:
    return [list(t.shape) for t in inputs]


def _signature_of(capture: Capture) -> list:
    return capture.inputs


def test_general_kernels_refuse_a_size_inductor_kept_fixed(tasks, tmp_path):
    path = FIXTURES / "provisional" / "07_LayerNormAffine.json"
    module = _module(convert_file(path, portable_math=True).source, tmp_path, "ln")
    task = load_task(tasks / "07_LayerNormAffine")
    wider = task.make_inputs({"batch_size": 5, "features": 33}, torch.float32, "cpu", 0)
    with pytest.raises(ValueError, match=r"Inductor's general kernels need \(s\d+, 32\)"):
        module.launch(*wider)
    taller = task.make_inputs(
        {"batch_size": 5, "features": 32}, torch.float32, "cpu", 0
    )  # only the rows differ
    assert torch.allclose(module.launch(*taller), task.reference(*taller), atol=1e-4, rtol=1e-4)


def test_without_general_kernels_an_uncaptured_shape_is_refused_by_name(tasks, tmp_path):
    fixture = load_fixture(FIXTURES / "provisional" / "17_ResidualAddRMSNorm.json")
    converted = convert(fixture.captures, fixture.task, None, portable_math=True)
    module = _module(converted.source, tmp_path, "rms_static")
    inputs = load_task(tasks / fixture.task).make_inputs({"tokens": 6, "hidden": 10}, torch.float32, "cpu", 0)
    with pytest.raises(ValueError, match="captured at .*'tokens': 16, 'hidden': 32.* only, not for inputs"):
        module.launch(*inputs)


def test_the_default_config_is_inductors_and_scaled_blocks_stay_legal(tmp_path):
    path = FIXTURES / "provisional" / "13_SmoothL1Beta.json"
    fixture = load_fixture(path)
    converted = convert_file(path, portable_math=True)
    for capture in fixture.captures:
        for name, config in capture.launches.items():
            for block, value in config.kwargs.items():
                assert f"_block({value}, {block}_SCALE" in converted.source, (name, block)
            assert f"num_warps=_warps({config.num_warps}, WARPS_SCALE)" in converted.source
    module = _module(converted.source, tmp_path, "blocks")
    assert module._block(1024, 1, 16, 72, True) == 1024  # scale 1 is Inductor's value, whatever the caps
    assert module._block(1024, 2, 4096, 3072, True) == 1024  # 2048 does not divide an unmasked 3072
    assert module._block(256, 2, 4096, 3072, True) == 512
    assert module._block(256, 4, 4096, 300, False) == 512  # masked: capped at next_power_of_2(300)
    assert module._block(256, 4, 64, 1 << 20, False) == 64  # the axis cap
    assert module._block(2, 0.5, 64, 100, False) == 1
    assert module._warps(4, 4) == 16 and module._warps(2, 0.5) == 1 and module._warps(16, 4) == 32


def test_a_library_kernel_is_a_conversion_error_naming_it():
    with pytest.raises(ConversionError, match=r"extern_kernels\.addmm.*library kernel"):
        convert_file(FIXTURES / "provisional" / "15_LinearGELU.json")


def test_a_triton_helper_without_a_stand_in_is_named():
    fixture = load_fixture(FIXTURES / "provisional" / "06_ArgmaxRows.json")
    capture = fixture.captures[0]
    broken = capture.model_copy(
        update={
            "wrappers": [
                capture.wrappers[0].replace("triton_helpers.max_with_index", "triton_helpers.frobnicate")
            ]
        }
    )
    with pytest.raises(ConversionError, match="triton_helpers.frobnicate has no stand-in"):
        convert([broken], fixture.task)


def test_libdevice_is_kept_for_the_gpu_and_replaced_for_the_interpreter():
    path = FIXTURES / "provisional" / "01_GELUTanh.json"
    gpu, cpu = convert_file(path).source, convert_file(path, portable_math=True).source
    assert "from triton.language.extra import libdevice" in gpu and "libdevice.tanh(" in gpu
    assert "libdevice." not in cpu and "import libdevice" not in cpu and "portable_tanh(" in cpu


# A wrapper in the format Inductor writes for a CUDA device (device guard, streams, empty_strided_cuda),
# with a matmul template launched on a fixed grid and a pointwise epilogue writing its buffer in place,
# returned as a transposed view. Written for this test; the kernels are small and exact in fp32.
CUDA_WRAPPER = '''
import torch
from torch._inductor.async_compile import AsyncCompile
async_compile = AsyncCompile()
empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda
reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor

triton_tem_fused_mm_0 = async_compile.triton('triton_tem_fused_mm_0', """
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers, triton_heuristics
triton_helpers.set_driver_to_gpu()

@triton_heuristics.template(
    num_stages=2,
    num_warps=4,
    triton_meta={'signature': {'arg_A': '*fp32', 'arg_B': '*fp32', 'out_ptr0': '*fp32'}, 'constants': {}},
    inductor_meta={'grid_type': 'FixedGrid', 'fixed_grid': ['_grid_0', '_grid_1', '_grid_2'], 'kernel_name': 'triton_tem_fused_mm_0'},
)
@triton.jit
def triton_tem_fused_mm_0(arg_A, arg_B, out_ptr0):
    BLOCK_M : tl.constexpr = 16
    BLOCK_N : tl.constexpr = 16
    BLOCK_K : tl.constexpr = 16
    N = 48
    K = 16
    pid = tl.program_id(0)
    pid_m = pid // (N // BLOCK_N)
    pid_n = pid % (N // BLOCK_N)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a = tl.load(arg_A + rm[:, None] * K + rk[None, :])
    b = tl.load(arg_B + rk[:, None] * N + rn[None, :])
    tl.store(out_ptr0 + rm[:, None] * N + rn[None, :], tl.dot(a, b, allow_tf32=False))
""", device_str='cuda')

triton_poi_fused_relu_1 = async_compile.triton('triton_poi_fused_relu_1', """
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers, triton_heuristics

@triton_heuristics.pointwise(
    size_hints={'x': 2048},
    filename=__file__,
    triton_meta={'signature': {'in_out_ptr0': '*fp32', 'xnumel': 'i32', 'XBLOCK': 'constexpr'}},
    inductor_meta={'grid_type': 'Grid1D', 'kernel_name': 'triton_poi_fused_relu_1'},
    min_elem_per_thread=0
)
@triton.jit
def triton_poi_fused_relu_1(in_out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xnumel = 1536
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    tmp0 = tl.load(in_out_ptr0 + (xindex), xmask)
    tmp1 = tl.full([1], 0, tl.int32)
    tmp2 = triton_helpers.maximum(tmp1, tmp0)
    tl.store(in_out_ptr0 + (xindex), tmp2, xmask)
""", device_str='cuda')

async_compile.wait(globals())
del async_compile

def call(args):
    arg0_1, arg1_1 = args
    args.clear()
    assert_size_stride(arg0_1, (32, 16), (16, 1))
    assert_size_stride(arg1_1, (16, 48), (48, 1))
    with torch.cuda._DeviceGuard(0):
        torch.cuda.set_device(0)
        buf0 = empty_strided_cuda((32, 48), (48, 1), torch.float32)
        stream0 = get_raw_stream(0)
        triton_tem_fused_mm_0.run(arg0_1, arg1_1, buf0, 6, 1, 1, stream=stream0)
        buf1 = buf0; del buf0  # reuse
        triton_poi_fused_relu_1.run(buf1, 1536, stream=stream0)
        del arg0_1
        del arg1_1
    return (reinterpret_tensor(buf1, (48, 32), (1, 48), 0), )
'''


def test_a_cuda_wrapper_with_a_template_on_a_fixed_grid_converts_and_runs(tmp_path):
    capture = Capture(
        shape={"M": 32}, dtype="float32", inputs=[[32, 16], [16, 48]], strides=[[16, 1], [48, 1]],
        input_dtypes=["torch.float32", "torch.float32"], arg_map=[0, 1], wrappers=[textwrap.dedent(CUDA_WRAPPER)],
        launches={"triton_tem_fused_mm_0": {"num_warps": 4, "num_stages": 2},
                  "triton_poi_fused_relu_1": {"kwargs": {"XBLOCK": 256}, "num_warps": 4}},
    )  # fmt: skip
    converted = convert([capture], "mm_relu")
    assert static_problems(converted.source) is None
    assert set(converted.search_space) == {"XBLOCK_SCALE", "WARPS_SCALE"}  # the template's tiles stay
    assert "triton_tem_fused_mm_0_s0[(6, 1, 1)]" in converted.source
    module = _module(converted.source, tmp_path, "mm_relu")
    a, b = torch.randn(32, 16), torch.randn(16, 48)
    for config in _configs(converted.search_space):
        out = module.launch(a, b, **config)
        assert out.shape == (48, 32) and out.stride() == (1, 48)
        assert torch.allclose(out, torch.relu(a @ b).t(), atol=1e-4)


def test_the_evaluator_accepts_a_converted_candidate_for_a_task_without_a_baseline(tasks):
    from tools.evaluate import evaluate

    source = convert_file(FIXTURES / "provisional" / "17_ResidualAddRMSNorm.json", portable_math=True).source
    result = evaluate(tasks / "17_ResidualAddRMSNorm", source, {}, module="inductor.py", device="cpu")
    assert result.verdict == "pass", result.message  # its checks include a shape drawn near the workload


def test_a_hidden_shape_keeps_the_width_inductor_fixed_so_its_layernorm_passes(tasks):
    from tools.evaluate import EvalSettings, evaluate

    source = convert_file(FIXTURES / "provisional" / "07_LayerNormAffine.json", portable_math=True).source
    task = load_task(tasks / "07_LayerNormAffine")
    assert task.spec.settings["evaluator"]["hidden_fixed_dims"] == ["features"]
    settings = EvalSettings.for_task(task, hidden_seed=0)  # drawn near the 33-wide shape: kept 32 wide
    result = evaluate(task, source, {}, module="inductor.py", device="cpu", settings=settings)
    assert result.verdict == "pass", result.message
    (hidden,) = result.details["hidden_shapes"]
    assert hidden["features"] == 32 and hidden not in task.spec.cpu_shapes


def test_a_guard_may_clamp_a_size_but_call_nothing_else():
    from tools.inductor_import import _guard

    text = "(L['inputs'][0].size()[1]*max(1, L['inputs'][1].size()[0] // 8)) == (L['inputs'][0].size()[1]*(L['inputs'][1].size()[0] // 8))"
    check = eval(compile("lambda inputs: " + _guard(text), "guard", "eval"))  # noqa: S307 - our own output
    assert check([torch.empty(2, 3), torch.empty(16)]) and not check([torch.empty(2, 3), torch.empty(4)])
    with pytest.raises(ConversionError, match="not a condition on the inputs' sizes"):
        _guard("open(L['inputs'][0].size()[0]) == 1")


@pytest.fixture(scope="module")
def captured_rmsnorm(tasks: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """17_ResidualAddRMSNorm captured here (codegen only) by the capture script, in its own process: it
    patches Inductor's autotuner and settings for the capture."""
    out = tmp_path_factory.mktemp("captures")
    done = subprocess.run(
        [sys.executable, "-m", "tools.inductor_capture", str(tasks / "17_ResidualAddRMSNorm"), "--out", str(out),
         "--shapes", "cpu", "--codegen-only"], capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return out / "17_ResidualAddRMSNorm.json"


def test_the_capture_script_records_kernels_configs_arguments_and_guards(captured_rmsnorm):
    record = json.loads(captured_rmsnorm.read_text())
    first = record["captures"][0]
    assert first["arg_map"] == [0, 2, 1]  # call(args) takes x, weight, residual
    assert "async_compile.triton(" in first["wrappers"][0] and first["launches"]
    general = record["general"]
    assert any("L['inputs'][0].size()[0]" in g for g in general["guards"])
    assert "L['inputs'][0].size()[0]" in general["arg_sources"]


def test_general_kernels_serve_a_size_of_one(captured_rmsnorm, tasks, tmp_path):
    """A hidden shape may draw a size of 1 (a batch of 4, moved by up to 3). Inductor's default 0/1
    specialization would guard every general size >= 2 and so refuse it."""
    module = _module(convert_file(captured_rmsnorm, portable_math=True).source, tmp_path, "rms_general")
    task = load_task(tasks / "17_ResidualAddRMSNorm")
    captured = [c.shape for c in load_fixture(captured_rmsnorm).captures]
    shape = {"tokens": 1, "hidden": max(c["hidden"] for c in captured)}
    assert shape not in captured
    assert _matches(task, module, shape, {}) is None


def test_the_command_line_writes_the_candidate_or_exits_2(tmp_path, capsys):
    from tools.inductor_import import main

    out = tmp_path / "inductor.py"
    assert main([str(FIXTURES / "provisional" / "09_GroupNormImages.json"), "--out", str(out)]) == 0
    assert '"WARPS_SCALE"' in capsys.readouterr().out and "def launch(" in out.read_text()
    assert main([str(FIXTURES / "provisional" / "15_LinearGELU.json"), "--out", str(tmp_path / "x.py")]) == 2
    assert "library kernel" in capsys.readouterr().err and not (tmp_path / "x.py").exists()


def test_a_capture_records_the_launch_config_after_inductor_drops_its_configs(monkeypatch):
    """On a GPU, Inductor's autotuner may free ``configs`` once it has its launchers (torch 2.11): the
    capture reads the winner from the launcher and counts the choices before the run."""
    from types import SimpleNamespace

    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    from tools import inductor_capture

    def autotune(self, *args, **kwargs):  # what the real run leaves: the winner, its configs dropped
        self.launchers, self.configs = self.launchers[:1], None

    monkeypatch.setattr(CachingAutotuner, "run", autotune)
    launches = inductor_capture.configure(codegen_only=False)
    config = SimpleNamespace(kwargs={"XBLOCK": 1024}, num_warps=4, num_stages=1)
    other = SimpleNamespace(kwargs={"XBLOCK": 512}, num_warps=8, num_stages=1)
    kernel = SimpleNamespace(fn=SimpleNamespace(__name__="triton_poi_gelu"), configs=None,
                             launchers=[SimpleNamespace(config=config), SimpleNamespace(config=other)])  # fmt: skip
    CachingAutotuner.run(kernel)
    assert launches["triton_poi_gelu"] == {"kwargs": {"XBLOCK": 1024}, "num_warps": 4, "num_stages": 1,
                                           "autotuned": True}  # fmt: skip


def test_a_capture_tells_a_library_call_from_the_comment_naming_a_kernels_aten_ops():
    """--gemm auto moves to max-autotune only when torch.compile's code calls a library kernel: a comment
    "Original ATen: [aten.gelu]" above a Triton kernel is not one (else every problem's first kernel
    would be a max-autotune, pattern-matcher-off compile instead of torch.compile's)."""
    from tools.inductor_capture import calls_library

    def wrappers(name: str) -> list[list[str]]:
        record = json.loads((FIXTURES / "provisional" / f"{name}.json").read_text())
        return [c["wrappers"] for c in record["captures"]]

    for name in ("01_GELUTanh", "07_LayerNormAffine", "19_VarMeanRows"):
        assert not any(calls_library(w) for sources in wrappers(name) for w in sources), name
    by_shape = [any(calls_library(w) for w in sources) for sources in wrappers("15_LinearGELU")]
    assert by_shape == [True, True, False, True, True]  # at 1x1x1 Inductor fused the matmul into one kernel
    pooled = "def call(args):\n    buf1 = torch.ops.inductor._alloc_from_pool(buf0, 0, torch.float32, (4,), (1,))\n"
    assert not calls_library(pooled + "    triton_poi_0.run(buf1, 4, stream=s)\n")  # Inductor's own allocator
    assert calls_library(pooled + "    torch.ops.aten.mm.out(buf1, buf1, out=buf2)\n")


def test_a_full_precision_fp32_dot_may_run_as_three_tf32_products(tasks, tmp_path):
    """Inductor keeps an fp32 template's dot in full precision (FMA loops, half of cuBLAS's SGEMM on an
    H200); DOT_TF32X3 1 runs it on the tensor cores at fp32-level accuracy, 0 (the first value, the
    baseline) is Inductor's own. Plain TF32 is never offered, and a bf16 dot gets no such key."""
    path = FIXTURES / "16_ScaledDotProductAttention.json"
    converted = convert_file(path, portable_math=True)
    assert converted.search_space["DOT_TF32X3"] == [0, 1]
    assert "allow_tf32" not in converted.source and '"tf32"' not in converted.source
    assert "input_precision=DOT_PRECISION" in converted.source
    module = _module(converted.source, tmp_path, "sdpa_dot")
    task = load_task(tasks / "16_ScaledDotProductAttention")
    shape = {"batch_size": 4, "heads": 4, "seq_len": 8, "head_dim": 8}
    assert _matches(task, module, shape, {"DOT_TF32X3": 1}) is None
    bf16 = load_fixture(path)
    for capture in [*bf16.captures, bf16.general]:
        capture.input_dtypes = ["torch.bfloat16"] * len(capture.inputs)
    assert "DOT_TF32X3" not in convert(bf16.captures, bf16.task, bf16.general).search_space
