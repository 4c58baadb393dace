"""Host cost of an exported module on the GPU: its eager ``launch(*inputs)`` against the same Triton
kernels launched directly.

    python bench/export_overhead.py --kernels OUT/kernels --out OUT [--tasks add_rmsnorm,softmax,gqa_decode]
                                    [--calls 2000]

Per task and shape of its GPU workload, the host time of one call (``perf_counter`` around the call,
the GPU drained before it so that the host never waits on a full launch queue), median of ``--calls``,
the four below taking turns call by call:
- ``launch``: the exported module's ``launch(*inputs)``, as a user calls it, after three calls at the
  shape (from the third on, its launches are replayed without Triton's dispatch: tools/fast_launch.py);
- ``bound``: ``launcher_for(*inputs)(*inputs)``, the kernel's own launcher with its config bound in
  (what ``launch`` replays): launch - bound is the module's dispatch less what the replay saves;
- ``kernel[grid]``: the very launches one ``launch`` call made (recorded once), replayed as
  ``kernel[grid](*args, **kwargs)`` on the same arguments, Triton's launch path with nothing around it;
- ``alloc``: ``torch.empty_like`` of every tensor argument that is not an input (the outputs and
  scratch buffers the launcher allocates, which a direct caller allocates too).
launch - (kernel[grid] + alloc) is what the module costs over launching the kernels by hand; the goal
is at most 1 us. The user's clock (bench/clocks.py: an eager call on an idle GPU, L2 flushed, events
around it) of ``launch`` and of the replay with its allocations is beside it.

Writes OUT/export_overhead.json and OUT/export_overhead.md, with the date, GPU and versions.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TASKS = ("add_rmsnorm", "softmax", "gqa_decode")
GOAL_US = 1.0

Launch = tuple[Any, Any, tuple, dict]  # (JITFunction, grid, args, kwargs)


def record_launches(call: Callable[[], object]) -> list[Launch]:
    """Every ``kernel[grid](...)`` that ``call`` makes, with its arguments (Triton's JITFunction.run)."""
    from triton.runtime.jit import JITFunction

    recorded: list[Launch] = []
    original = JITFunction.run

    def recording(self, *args, grid, warmup, **kwargs):
        recorded.append((self, grid, args, kwargs))
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    JITFunction.run = recording
    try:
        call()
    finally:
        JITFunction.run = original
    return recorded


def direct_calls(launches: list[Launch], inputs: tuple) -> tuple[Callable[[], None], Callable[[], list]]:
    """(the recorded launches replayed as written, the allocation of their non-input tensors)."""
    import torch

    held = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor)}
    made: dict[int, Any] = {}  # storage -> a tensor on it: a buffer two kernels share is allocated once
    for _, _, args, _ in launches:
        for a in args:
            if isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() not in held:
                made.setdefault(a.untyped_storage().data_ptr(), a)

    def replay() -> None:
        for kernel, grid, args, kwargs in launches:
            kernel[grid](*args, **kwargs)

    return replay, lambda: [torch.empty_like(t) for t in made.values()]


def host_us(fns: dict[str, Callable[[], object]], calls: int) -> dict[str, float]:
    """Median host microseconds of one call of each of ``fns``, each started on a drained GPU; the
    functions take turns call by call, so a host that speeds up or slows down meanwhile shifts them all."""
    import torch

    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(calls):
        for name, fn in fns.items():
            torch.cuda.synchronize()
            started = time.perf_counter_ns()
            fn()
            samples[name].append((time.perf_counter_ns() - started) / 1e3)
    torch.cuda.synchronize()
    return {name: statistics.median(values) for name, values in samples.items()}


def measure_shape(module: Any, inputs: tuple, calls: int) -> dict[str, Any]:
    from bench.clocks import user_clock
    from tools.timing import TimingSettings

    bound = module.launcher_for(*inputs)
    for _ in range(3):  # compile the kernels; two recordings, then launch replays (tools/fast_launch.py)
        module.launch(*inputs)
    launches = record_launches(lambda: bound(*inputs))
    replay, alloc = direct_calls(launches, inputs)

    def by_hand() -> None:
        alloc()
        replay()

    times = host_us(
        {"launch_us": lambda: module.launch(*inputs), "bound_us": lambda: bound(*inputs), "kernel_grid_us": replay,
         "alloc_us": alloc},
        calls,
    )  # fmt: skip
    settings = TimingSettings()
    return {
        **times,
        "kernels": [kernel.fn.__name__ for kernel, _, _, _ in launches],
        "replayed": bool(getattr(getattr(module, "_HOT", None), "replaying", lambda: 0)()),
        "dispatch_us": times["launch_us"] - times["bound_us"],
        "over_direct_us": times["launch_us"] - times["kernel_grid_us"] - times["alloc_us"],
        "user_launch_us": user_clock(lambda: module.launch(*inputs), settings).median_us,
        "user_direct_us": user_clock(by_hand, settings).median_us,
    }


def measure_task(name: str, kernel: Path, calls: int) -> dict[str, Any]:
    import torch

    from tools.task import import_file, load_task, torch_dtype

    task = load_task(REPO / "tasks" / name)
    module = import_file(kernel, f"overhead_{name}")
    rows = []
    for shape, dtype in task.workload("cuda"):
        inputs = task.make_inputs(dict(shape), torch_dtype(dtype), "cuda", 0)
        rows.append({"shape": shape, "dtype": dtype, **measure_shape(module, inputs, calls)})
        del inputs
        torch.cuda.empty_cache()
    return {"kernel": str(kernel), "rows": rows}


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Host cost of the exported modules",
        "",
        f"Measured {report['date']} on {report['gpu']} (torch {report['torch']}, triton {report['triton']}), "
        f"{report['calls']} calls per median (bench/export_overhead.py). Host us: one call on a drained "
        "GPU, `perf_counter` around it, the four columns taking turns call by call. `over direct` = launch - (kernel[grid] + alloc): what the module "
        f"costs over launching the same kernels by hand (goal <= {GOAL_US:g} us). User's clock: events "
        "around an eager call on an idle GPU, L2 flushed (host work and kernels).",
    ]
    for name, t in report["tasks"].items():
        lines += [
            "",
            f"## {name}",
            "",
            f"`{t['kernel']}`",
            "",
            "| shape | dtype | kernels | replayed | launch us | bound us | kernel[grid] us | alloc us | dispatch us | "
            "over direct us | user's clock launch us | user's clock by hand us |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in t["rows"]:
            lines.append(
                f"| {' '.join(f'{k}={v}' for k, v in r['shape'].items())} | {r['dtype']} | "
                f"{', '.join(r['kernels'])} | {'yes' if r['replayed'] else 'no'} | {r['launch_us']:.2f} | {r['bound_us']:.2f} | "
                f"{r['kernel_grid_us']:.2f} | {r['alloc_us']:.2f} | {r['dispatch_us']:.2f} | "
                f"{r['over_direct_us']:.2f} | {r['user_launch_us']:.1f} | {r['user_direct_us']:.1f} |"
            )
        worst = max(r["over_direct_us"] for r in t["rows"])
        verdict = "met" if worst <= GOAL_US else "**missed**"
        lines += ["", f"Worst over direct: {worst:.2f} us (goal <= {GOAL_US:g} us: {verdict})."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", required=True, help="folder of exported modules, TASK.py each")
    parser.add_argument("--out", required=True)
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    names = [t for t in args.tasks.split(",") if t]
    kernels = {name: Path(args.kernels) / f"{name}.py" for name in names}
    missing = [str(p) for p in kernels.values() if not p.is_file()]
    if missing or args.calls < 1:
        print(f"error: {'no exported module ' + ', '.join(missing) if missing else '--calls must be >= 1'}",
              file=sys.stderr)  # fmt: skip
        sys.exit(2)
    import torch
    import triton

    report = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "calls": args.calls,
        "tasks": {name: measure_task(name, kernel, args.calls) for name, kernel in kernels.items()},
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "export_overhead.json").write_text(json.dumps(report, indent=2))
    (out / "export_overhead.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
