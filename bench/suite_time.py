"""The benchmark suite's time stage: at every shape of a task, our exported kernel and the baseline
beside every anchor, each output checked against the reference first, on two clocks.

Anchors: torch eager; torch.compile compiled afresh for each shape and dtype (``dynamic=False``,
Dynamo's caches emptied first; modes default and max-autotune); torch.compile dynamic, one compile object
called over the shapes in order afterwards, as a model would call it; and the task's library anchors
(bench/anchors.py, named in task.json ``settings.anchors``). Clocks: the device's (CUDA-graph replay
after a clean L2 flush, tools.timing.time_fn) and the user's (one eager call on an idle GPU,
bench/clocks.py).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.suite_report import CLOCK_KEYS, strongest_anchor
from tools.task import Task

# torch.compile modes timed per shape and dtype: label -> mode. max-autotune is timed as Inductor's
# autotuned kernels in the suite's own CUDA graph ("max-autotune-no-cudagraphs": the mode's own graphs
# would replay the same kernels and cannot nest inside ours).
STATIC_COMPILES = {
    "default": ("compile", None),
    "max-autotune": ("max_autotune", "max-autotune-no-cudagraphs"),
}
DYNAMIC = "dynamic"  # one torch.compile over every shape, as a model would call it: dynamic after shape 2
COMPILERS = (*STATIC_COMPILES, DYNAMIC)


@dataclass(frozen=True)
class Method:
    """One thing the time stage runs at each shape: ``make()`` gives the callable (a fresh compile for
    a static torch.compile). An anchor that raises while made or first called refused that shape."""

    label: str
    anchor: bool
    make: Callable[[], Callable[..., Any]]


@dataclass(frozen=True)
class Clocks:
    """How the time stage measures. ``time(fn)`` returns the timing fields of a method's record: on the
    GPU both clocks (``gpu_clocks``); a CPU run of the stage passes its own."""

    device: str
    copy_gbps: float
    time: Callable[[Callable[[], object]], dict[str, Any]]
    same_size_us: Callable[[int], float | None]


def gpu_clocks() -> Clocks:
    """The device clock (CUDA-graph replay after a clean L2 flush, tools.timing.time_fn) and the user's
    clock (an eager call on an idle GPU, host work included, bench.clocks.user_clock)."""
    from bench.clocks import user_clock
    from tools.timing import TimingSettings, copy_bandwidth_gbps, copy_time_us, time_fn

    settings = TimingSettings()

    def both(fn: Callable[[], object]) -> dict[str, Any]:
        device, user = time_fn(fn, settings), user_clock(fn, settings)
        return {"median_us": device.median_us, "min_us": device.min_us, "spread": device.spread,
                "method": device.method, "user_us": user.median_us, "user_min_us": user.min_us,
                "user_spread": user.spread}  # fmt: skip

    return Clocks("cuda", copy_bandwidth_gbps(settings), both, lambda moved: copy_time_us(moved, settings))


def static_compile(
    fn: Callable[..., Any], mode: str | None, compile_fn: Callable[..., Any]
) -> Callable[..., Any]:
    """A compile of ``fn`` for one shape and dtype: Dynamo's caches emptied first, so it is a fresh,
    static graph, never a recompile of another shape's (after 8 shapes Dynamo would stop compiling)."""
    import torch

    torch._dynamo.reset()
    return compile_fn(fn, dynamic=False, mode=mode)


def shape_methods(
    task: Task, compilers: list[str], exported: Path | None, compile_fn: Callable[..., Any]
) -> list[Method]:
    """What runs at every shape: ours (the exported module, the baseline with its config), then torch
    eager, the static compiles and the task's library anchors."""
    from bench.anchors import task_anchors
    from tools.task import import_file

    baseline = import_file(task.path(task.baseline_name), f"suite_baseline_{task.name}")
    config = task.default_config()
    methods = []
    if exported is not None:
        best = import_file(exported, f"suite_best_{task.name}")
        methods.append(Method("best", False, lambda: best.launch))
    methods.append(Method("baseline", False, lambda: lambda *i: baseline.launch(*i, **config)))
    methods.append(Method("eager", True, lambda: task.reference))
    for name in compilers:
        if name in STATIC_COMPILES:
            label, mode = STATIC_COMPILES[name]
            methods.append(
                Method(label, True, lambda mode=mode: static_compile(task.reference, mode, compile_fn))
            )
    methods += [Method(a.name, True, a.build) for a in task_anchors(task.spec.settings)]
    return methods


def measure(method: Method, case: tuple, task: Task, dtype: str, clocks: Clocks) -> dict[str, Any]:
    """One method at one shape: made, called, checked against the reference, then timed. Nothing is
    dropped: a refusal or a wrong output is recorded with its message."""
    from tools.task import bytes_moved

    inputs, expected = case
    try:
        fn = method.make()
        for _ in range(3):  # compile, autotune, warm caches
            got = _tuple(fn(*inputs))
    except Exception as exc:
        return {("refused" if method.anchor else "error"): _first_line(exc)}
    try:
        check_outputs(got, expected, task, dtype)
        timed = clocks.time(lambda: fn(*inputs))
    except Exception as exc:  # a wrong output, or a method that cannot be timed: a finding either way
        return {"error": _first_line(exc)}
    moved = bytes_moved(task, inputs, got)
    gbps = moved / (timed["median_us"] * 1e-6) / 1e9
    return {**timed, "bytes": moved, "gbps": gbps, "roofline_pct": 100 * gbps / clocks.copy_gbps}


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"


def _case(task: Task, shape: dict[str, int], dtype: str, device: str) -> tuple[tuple, tuple]:
    from tools.task import torch_dtype

    inputs = task.make_inputs(dict(shape), torch_dtype(dtype), device, 0)
    return inputs, _tuple(task.reference(*[t.clone() for t in inputs]))


def time_task(
    task: Task,
    compilers: list[str],
    exported: Path | None,
    clocks: Clocks | None = None,
    workload: list[tuple[dict[str, int], str]] | None = None,
    compile_fn: Callable[..., Any] | None = None,
    on_row: Callable[[list[dict[str, Any]]], None] | None = None,
    done: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Every method at every shape of the workload (the task's GPU workload by default), on both clocks.

    Static compiles are made afresh per shape; the dynamic compile is one compile object taken through
    all the shapes in order afterwards. ``on_row`` sees the rows after each shape (partial results);
    rows in ``done`` (a killed run's) are kept, not timed again, except by the dynamic pass."""
    import torch
    import triton

    from bench.anchors import library_versions

    clocks = clocks or gpu_clocks()
    compile_fn = compile_fn or torch.compile
    methods = shape_methods(task, compilers, exported, compile_fn)
    kept = {_row_key(r["shape"], r["dtype"]): r for r in done or []}
    rows = []
    for shape, dtype in workload or task.workload(clocks.device):
        rows.append(kept.get(_row_key(shape, dtype)) or _static_row(task, shape, dtype, methods, clocks))
        if on_row:
            on_row(rows)
    if DYNAMIC in compilers:
        _dynamic_pass(task, rows, compile_fn, clocks)
    for row in rows:
        row["strongest"] = {clock: strongest_anchor(row, key) for clock, key in CLOCK_KEYS.items()}
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name() if clocks.device == "cuda" else clocks.device,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "libraries": library_versions(),
        "copy_gbps": clocks.copy_gbps,
        "baseline_config": task.default_config(),
        "compilers": compilers,
        "rows": rows,
    }


def _row_key(shape: dict[str, int], dtype: str) -> str:
    return json.dumps([shape, dtype], sort_keys=True)


def _static_row(task: Task, shape: dict[str, int], dtype: str, methods: list[Method], clocks: Clocks) -> dict:
    from tools.task import bytes_moved

    case = _case(task, shape, dtype, clocks.device)
    row: dict[str, Any] = {"shape": shape, "dtype": dtype, "methods": {}}
    row["copy_same_size_us"] = clocks.same_size_us(bytes_moved(task, case[0], case[1]))
    for method in methods:
        row["methods"][method.label] = measure(method, case, task, dtype, clocks)
    row["bytes"] = next((m["bytes"] for m in row["methods"].values() if "bytes" in m), None)
    del case
    _release(clocks.device)
    return row


def _dynamic_pass(task: Task, rows: list[dict], compile_fn: Callable[..., Any], clocks: Clocks) -> None:
    """One compile object through every row's shape in order, as a model calls it ("compile_dynamic")."""
    import torch

    torch._dynamo.reset()  # the static compiles' graphs are not reused
    compiled = compile_fn(task.reference)
    dynamic = Method("compile_dynamic", True, lambda: compiled)
    for row in rows:
        case = _case(task, row["shape"], row["dtype"], clocks.device)
        row["methods"]["compile_dynamic"] = measure(dynamic, case, task, row["dtype"], clocks)
        del case
        _release(clocks.device)


def _release(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def check_outputs(got: tuple, expected: tuple, task: Task, dtype: str) -> None:
    """The evaluator's own comparison rule, for every timed method; AssertionError names the first miss."""
    from tools.compare import compare

    rtol, atol = task.tolerance(dtype)
    for g, e in zip(got, expected, strict=True):
        found = compare(g, e, rtol, atol, task.row_scaled)
        if found is not None:
            kind, where = found
            raise AssertionError(
                f"{kind} at {where['index']}: got {where['got']}, expected {where['expected']}"
            )


def _tuple(value: Any) -> tuple:
    return value if isinstance(value, tuple) else (value,)
