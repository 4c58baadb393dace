"""What the exported module's docstring promises on a GPU: from the third call at a signature its
launches are replayed without Triton's dispatch and give the launcher's own outputs, a CUDA graph
captured around ``launch`` replays the chosen kernels on refilled inputs, and ``launch`` runs inside
torch.compile both traced (fullgraph) and behind torch.compiler.disable. Needs a CUDA GPU (skipped
without one)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tools.compare import compare, same_bits
from tools.export import export_run
from tools.task import import_file, load_task

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parent.parent
RUNS = REPO / "bench" / "results" / "suite_h200" / "runs"


def exported(name: str, tmp_path: Path):
    """The committed run's winner exported now (softmax's is a per-shape table), imported."""
    task = load_task(REPO / "tasks" / name)
    text, _, _ = export_run(task, RUNS / name)
    (tmp_path / f"{name}_kernel.py").write_text(text)
    return task, import_file(tmp_path / f"{name}_kernel.py", f"exported_gpu_{name}")


def close(task, got, inputs, dtype: str) -> None:
    """The outputs against the reference's, by the judge's own comparison (row-scaled where the task is)."""
    expected = task.reference(*inputs)
    rtol, atol = task.tolerance(dtype)
    for g, e in zip(
        got if isinstance(got, tuple) else (got,),
        expected if isinstance(expected, tuple) else (expected,),
        strict=True,
    ):
        assert compare(g, e, rtol, atol, task.row_scaled) is None


@pytest.mark.parametrize(
    "name, shape_index, calls_before",
    [("add_rmsnorm", 2, 1), ("softmax", 2, 1), ("softmax", 0, 3)],
    ids=["add_rmsnorm", "softmax", "softmax-replayed"],  # the last: two kernels, already replayed
)
def test_a_cuda_graph_captured_around_launch_replays_on_refilled_inputs(name, shape_index, calls_before, tmp_path):
    task, module = exported(name, tmp_path)
    shape, dtype = task.workload("cuda")[shape_index]
    inputs = task.make_inputs(dict(shape), getattr(torch, dtype), "cuda", 0)
    for _ in range(calls_before):  # outside the capture: Triton compiles, the launcher is bound
        module.launch(*inputs)
    assert module._HOT.replaying() == (calls_before > 2)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = module.launch(*inputs)
    fresh = task.make_inputs(dict(shape), getattr(torch, dtype), "cuda", 1)
    for held, new in zip(inputs, fresh, strict=True):
        held.copy_(new)
    graph.replay()
    torch.cuda.synchronize()
    close(task, outputs, fresh, dtype)


@pytest.mark.parametrize("traced", [True, False], ids=["fullgraph", "disabled"])
def test_launch_runs_inside_torch_compile(traced, tmp_path):
    task, module = exported("softmax", tmp_path)
    shape, dtype = task.workload("cuda")[2]
    (x,) = task.make_inputs(dict(shape), getattr(torch, dtype), "cuda", 0)
    call = module.launch if traced else torch.compiler.disable(module.launch)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: call(x) * 2.0, fullgraph=traced)
    got = compiled(x)
    torch.testing.assert_close(got.float(), 2.0 * task.reference(x).float(), rtol=2e-2, atol=2e-2)


def same_outputs(got, want) -> None:
    """The same layout and the same bits (the judge's own bit comparison)."""
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.stride() == w.stride() and g.dtype == w.dtype
    assert same_bits(got, want), "replay differs from the launcher"


@pytest.mark.parametrize("name", ["add_rmsnorm", "softmax", "gqa_decode"])
def test_replayed_launches_give_the_launchers_own_outputs_on_fresh_inputs(name, tmp_path):
    task, module = exported(name, tmp_path)
    workload = task.workload("cuda")
    for shape, dtype in workload:
        held = task.make_inputs(dict(shape), getattr(torch, dtype), "cuda", 0)
        for _ in range(2):  # two recordings at this signature
            module.launch(*held)
        for seed in (1, 2):
            fresh = task.make_inputs(dict(shape), getattr(torch, dtype), "cuda", seed)
            got = module.launch(*fresh)
            torch.cuda.synchronize()
            close(task, got, fresh, dtype)
            same_outputs(got, module.launcher_for(*fresh)(*fresh))
        del held, fresh, got
        torch.cuda.empty_cache()
    assert module._HOT.replaying() == len(workload)


def test_a_replay_reads_an_input_view_at_its_own_offset(tmp_path):
    task, module = exported("add_rmsnorm", tmp_path)
    shape, dtype = task.workload("cuda")[2]
    rows = dict(shape)["M"]
    for seed in range(4):  # x and r are rows 1..M of taller buffers: their data starts one row in
        x, r, w = task.make_inputs({**shape, "M": rows + 1}, getattr(torch, dtype), "cuda", seed)
        x, r = x[1:], r[1:]
        got = module.launch(x, r, w)
        close(task, got, (x, r, w), dtype)
    assert module._HOT.replaying() == 1
