"""Capture Inductor's Triton for imported tasks: the fixtures tools.inductor_import converts.

    python -m tools.inductor_capture TASK_DIR... --out tests/fixtures/inductor
        [--device cuda] [--shapes timed|all|own|cpu] [--gemm auto|default|triton-gemm|...] [--codegen-only]

Per task, per shape (default ``timed``: the shapes a GPU run times, so each runs exactly torch.compile's
kernels; ``all``: every shape the task lists; ``cpu``: the shapes a CPU run checks), on fresh inputs:
``torch._dynamo.reset()``, then ``run_and_get_code(torch.compile(task.reference, dynamic=False,
backend=recorder), *inputs)``. The recorder notes which task input each graph argument is, then hands
the graph to Inductor. Each kernel's launched config (block sizes, warps, stages) is read from its
autotuner after the call: on a GPU that is the config Inductor's autotuning picked.

Then once more with dynamic=True (sizes as symbols, no two sizes assumed equal) at the first of those
shapes with every size >= 2: Inductor's general kernels, recorded with the shape guards they hold under
(``produce_guards`` over the graph's inputs); tools.inductor_import runs them for any shape without
kernels of its own (the evaluator's shapes drawn near the workload, for one).

``--gemm auto`` (default): when the default compile calls a library kernel (cuBLAS for a matmul, flash
attention for a matmul-softmax-matmul Inductor recognized), the shape is captured again with
``max_autotune`` and Triton as the only GEMM backend (``"mode": "triton-gemm"``), and if a library
kernel remains, once more without Inductor's pattern rewrites (``"triton-gemm-unfused"``: the
attention stays two matmuls around a softmax).

``--codegen-only`` runs without a GPU: Inductor's Triton backend for the CPU device generates the same
kind of code (its heuristics see a CPU, not an H200), nothing is compiled or run, and each kernel's
config is the first of Inductor's candidates (``"autotuned": false``). Use it only for provisional
fixtures.

Writes OUT/<task name>.json.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tools.task import Task, load_task, torch_dtype

PLACEHOLDER = re.compile(r"^L\['inputs'\]\[(\d+)\]$")
TRITON_GEMM = {"max_autotune": True, "max_autotune_gemm_backends": "TRITON"}
MODES: dict[str, dict[str, Any]] = {  # tried in order by --gemm auto until no library kernel is left
    "default": {},
    "triton-gemm": TRITON_GEMM,
    "triton-gemm-unfused": {**TRITON_GEMM, "pattern_matcher": False},
}


def configure(codegen_only: bool) -> dict[str, Any]:
    """Inductor settings for a capture; patches the autotuner to record each kernel's launch."""
    import torch._inductor.config as inductor_config
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    inductor_config.force_disable_caches = True  # fresh code and a fresh autotune every time
    launches: dict[str, Any] = {}
    run = CachingAutotuner.run

    def recording_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if codegen_only:
            launches[self.fn.__name__] = {**_config(self.configs[0]), "autotuned": False}
            return None
        # counted before the run: the autotuner keeps only the winner, and newer Inductor drops its configs
        choices = len(getattr(self, "launchers", None) or getattr(self, "configs", None) or [])
        out = run(self, *args, **kwargs)
        launches[self.fn.__name__] = {**_config(self.launchers[0].config), "autotuned": choices > 1}
        return out

    CachingAutotuner.run = recording_run
    if codegen_only:
        import torch.utils._triton as torch_triton

        inductor_config.cpu_backend = "triton"
        inductor_config.compile_threads = 1
        torch_triton.triton_hash_with_backend = lambda: "0" * 64  # no driver to hash
        CachingAutotuner.precompile = lambda self, *a, **k: None  # no device to compile for
    return launches


def _config(config: Any) -> dict[str, Any]:
    return {"kwargs": dict(config.kwargs), "num_warps": config.num_warps, "num_stages": config.num_stages}


def recorder(graphs: list[dict[str, Any]]) -> Callable:
    """A torch.compile backend: records each graph's inputs (their sources, e.g. L['inputs'][0] or
    L['inputs'][0].size()[1]) and, after Inductor compiled it, the shape guards it holds under."""
    from torch._guards import detect_fake_mode
    from torch._inductor.compile_fx import compile_fx

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        sources = [n.meta["grapharg"].source for n in gm.graph.nodes if n.op == "placeholder"]
        compiled = compile_fx(gm, example_inputs)
        fake = detect_fake_mode(example_inputs)
        guards = fake.shape_env.produce_guards(example_inputs, sources) if fake and fake.shape_env else []
        graphs.append({"sources": [src.name for src in sources], "guards": list(guards)})
        return compiled

    return backend


def _compile(
    task: Task, inputs: tuple, launches: dict, mode: str, dynamic: bool
) -> tuple[list[str], list[dict]]:
    """Inductor's wrapper sources for the reference on these inputs, and what the recorder saw."""
    import torch._inductor.config as inductor_config
    import torch.fx.experimental._config as fx_config
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    launches.clear()
    graphs: list[dict[str, Any]] = []
    # general kernels: a symbol per size even where two sizes are equal, no 0/1 specialization (a
    # general kernel must serve a size of 1 too), float constants as constants
    with inductor_config.patch(MODES[mode]), \
            fx_config.patch(use_duck_shape=not dynamic, backed_size_oblivious=dynamic), \
            torch._dynamo.config.patch(specialize_float=True):  # fmt: skip
        compiled = torch.compile(task.reference, dynamic=dynamic, backend=recorder(graphs))
        _, sources = run_and_get_code(compiled, *[t.clone() for t in inputs])
    return sources, graphs


def capture_shape(
    task: Task, shape: dict, dtype: str, device: str, launches: dict, gemm: str, dynamic: bool = False
) -> dict:
    """One capture: static (dynamic=False, this shape only) or general (dynamic=True, valid wherever
    its guards and the wrapper's size asserts hold)."""
    inputs = task.make_inputs(dict(shape), torch_dtype(dtype), device, 0)
    for mode in MODES if gemm == "auto" else (gemm,):
        sources, graphs = _compile(task, inputs, launches, mode, dynamic)
        if not any(calls_library(s) for s in sources):
            break
    record = {
        "shape": shape,
        "dtype": dtype,
        "mode": mode,
        "inputs": [list(t.shape) for t in inputs],
        "strides": [list(t.stride()) for t in inputs],
        "input_dtypes": [str(t.dtype) for t in inputs],
        "wrappers": sources,
        "launches": {
            name: {k: v for k, v in found.items() if k != "autotuned"} for name, found in launches.items()
        },
        "autotuned": any(found["autotuned"] for found in launches.values()),
    }
    if len(graphs) != 1:
        return {**record, "error": f"{len(graphs)} graphs (a graph break inside the forward)"}
    if dynamic:
        return {**record, "arg_sources": graphs[0]["sources"], "guards": graphs[0]["guards"]}
    indices = [PLACEHOLDER.match(name) for name in graphs[0]["sources"]]
    if not all(indices):
        return {**record, "error": f"graph inputs {graphs[0]['sources']} are not all the reference's inputs"}
    return {**record, "arg_map": [int(found.group(1)) for found in indices]}


def calls_library(wrapper: str) -> bool:
    """Whether the wrapper's call(args) (or a graph partition it runs) runs a library kernel
    (extern_kernels.mm, an aten op), read from its code: every kernel's comment names the ops it came
    from ("Original ATen: [aten.gelu]"), and the module's own lines alias ``aten = torch.ops.aten``."""
    runs = [
        node for node in ast.walk(ast.parse(wrapper))
        if isinstance(node, ast.FunctionDef) and (node.name == "call" or node.name.startswith("partition_"))
    ]  # fmt: skip
    return any(
        _is_library(ast.unparse(node)) for run in runs for node in ast.walk(run) if isinstance(node, ast.Attribute)
    )


def _is_library(dotted: str) -> bool:
    """extern_kernels.*, aten.* and torch.ops.* but Inductor's own helpers (torch.ops.inductor.*). Every
    prefix of a chain is an attribute too (``torch.ops.inductor`` of ``torch.ops.inductor._alloc_from_pool``)."""
    if dotted.startswith(("extern_kernels.", "aten.")):
        return True
    return dotted.startswith("torch.ops.") and not f"{dotted}.".startswith("torch.ops.inductor.")


def capture_task(task: Task, args: argparse.Namespace, launches: dict) -> dict:
    shapes = {
        "timed": task.spec.shapes,
        "own": task.spec.shapes[:1],
        "cpu": task.cpu_shapes + [s for s in task.spec.check_shapes if s not in task.cpu_shapes],
    }.get(args.shapes) or _listed(task)
    captures = []
    for shape in shapes:
        for dtype in task.dtypes:
            try:
                captures.append(capture_shape(task, shape, dtype, args.device, launches, args.gemm))
            except Exception as exc:  # recorded, never hidden: a shape Inductor cannot compile is a finding
                captures.append({"shape": shape, "dtype": dtype, "error": _error(exc)})
            print(f"{task.name} {shape} {dtype}: {captures[-1].get('error', 'captured')}", flush=True)
            if args.device == "cuda":
                torch.cuda.empty_cache()
    general_shape = next((s for s in shapes if min(s.values()) >= 2), shapes[0])  # sizes 0/1 specialize
    try:
        general = capture_shape(
            task, general_shape, task.dtypes[0], args.device, launches, args.gemm, dynamic=True
        )
    except Exception as exc:
        general = {"shape": general_shape, "error": _error(exc)}
    print(f"{task.name} general kernels at {general_shape}: {general.get('error', 'captured')}", flush=True)
    return {
        "task": task.name,
        "captured": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu (code generation only)",
        "torch": torch.__version__,
        "triton": _triton_version(),
        "codegen_only": args.codegen_only,
        "captures": captures,
        "general": general,
    }


def _error(exc: BaseException) -> str:
    """The exception's type, first line and the frame that raised it (a capture error must be findable)."""
    import traceback

    first = (str(exc).strip().splitlines() or [""])[0]
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" (at {Path(frame.filename).name}:{frame.lineno} in {frame.name})" if frame else ""
    return f"{type(exc).__name__}: {first[:300]}{where}"


def _listed(task: Task) -> list[dict]:
    seen: dict[str, dict] = {}
    for shape in task.spec.shapes + task.spec.check_shapes + task.spec.cpu_shapes:
        seen.setdefault(json.dumps(shape, sort_keys=True), shape)
    return list(seen.values())


def _triton_version() -> str:
    import triton

    return triton.__version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tasks", nargs="+", help="task folders made by python -m tools.kernelbench")
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--shapes", default="timed", choices=["timed", "all", "own", "cpu"])
    parser.add_argument("--gemm", default="auto", choices=["auto", *MODES])
    parser.add_argument("--codegen-only", action="store_true", help="no GPU: generate code, run nothing")
    args = parser.parse_args(argv)
    if args.codegen_only:
        args.device = "cpu"
        args.gemm = "default"  # max-autotune benchmarks templates, which needs a device
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    launches = configure(args.codegen_only)
    for folder in args.tasks:
        task = load_task(folder)
        record = capture_task(task, args, launches)
        (out / f"{task.name}.json").write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
