"""Does the way a bench is driven change what it measures? One kernel, one process, three drivers.

    python3 bench/timing_duty.py --out OUT [--task tasks/add_rmsnorm] [--rounds 3]

The task's baseline at its default config, one ``launch()`` captured in a CUDA graph, timed per workload
shape by:
- ``bench_ms``: flush, events, replay; what the judge times anchors and ceilings with (the GPU runs its
  flushes back to back);
- ``checked``: ``checked_bench_ms`` as candidates are timed: each run's outputs poisoned before it and
  logged after it, those steps each captured once as a CUDA graph (the GPU runs back to back);
- ``checked_eager``: the same steps launched one by one, as candidates were timed until 2026-12-01
  (Python between launches leaves the GPU gaps).
The three are interleaved ``--rounds`` times, so drift hits each alike. Writes OUT/timing_duty.json and
OUT/timing_duty.md (median of the rounds' medians per shape and driver, and each against ``bench_ms``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import triton  # noqa: E402

from tools.task import load_task, torch_dtype  # noqa: E402
from tools.timing import (  # noqa: E402
    TimingSettings,
    _schedule,
    bench_ms,
    checked_bench_ms,
    flush_l2,
    poison_value,
)

DRIVERS = ("bench_ms", "checked", "checked_eager")


def checked_eager_ms(fn: Callable[[], None], outputs: tuple, samples: list, settings: TimingSettings) -> float:
    """``checked_bench_ms``'s runs with its steps launched one by one, as candidates were timed before the
    steps were captured as graphs: Python between the launches leaves the GPU gaps."""
    row = torch.zeros((len(outputs), 1 + max(s.numel() for s in samples)), dtype=torch.float64, device="cuda")
    n_warmup, n_repeat = _schedule(fn, settings.warmup_ms, settings.rep_ms, max_reps=1000)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    for _ in range(n_warmup):
        fn()
    for i in range(n_repeat):
        for out in outputs:
            value = poison_value(out.dtype)
            if value is not None:
                out.fill_(value)
        flush_l2()
        starts[i].record()
        fn()
        ends[i].record()
        for j, out in enumerate(outputs):
            row[j, 0] = torch.isnan(out).sum()
            row[j, 1 : 1 + samples[j].numel()] = out.reshape(-1)[samples[j]].to(torch.float64)
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))


def load_baseline(task) -> tuple[Callable[..., object], dict]:
    spec = importlib.util.spec_from_file_location("timing_duty_baseline", task.path(task.spec.baseline))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.launch, task.default_config()


def graph_of(launch: Callable[..., object], config: dict, inputs: tuple) -> tuple[torch.cuda.CUDAGraph, tuple]:
    """One warm call, then one ``launch()`` captured: (the graph, the outputs its replays write)."""
    outs: list[tuple] = []

    def call() -> None:
        out = launch(*inputs, **config)
        outs.append(tuple(out) if isinstance(out, tuple | list) else (out,))

    call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return graph, outs[-1]


def one_shape(launch: Callable[..., object], config: dict, inputs: tuple, settings: TimingSettings) -> dict:
    graph, outputs = graph_of(launch, config, inputs)
    samples = [torch.randint(o.numel(), (256,), device="cuda") for o in outputs]
    timed: dict[str, list[float]] = {name: [] for name in DRIVERS}
    for _ in range(settings.repeats):
        timed["bench_ms"].append(1000 * bench_ms(graph.replay, settings.warmup_ms, settings.rep_ms))
        median, _, _ = checked_bench_ms(graph.replay, lambda: outputs, samples, settings.warmup_ms, settings.rep_ms)
        timed["checked"].append(1000 * median)
        timed["checked_eager"].append(1000 * checked_eager_ms(graph.replay, outputs, samples, settings))
    return {name: statistics.median(values) for name, values in timed.items()} | {"rounds": timed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--task", default="tasks/add_rmsnorm")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    task = load_task(REPO / args.task)
    launch, config = load_baseline(task)
    settings = TimingSettings(repeats=args.rounds)
    rows = []
    for shape, dtype in task.workload("cuda"):
        inputs = task.make_inputs(dict(shape), torch_dtype(dtype), "cuda", 0)
        inputs = tuple(inputs) if isinstance(inputs, tuple | list) else (inputs,)
        row = {"shape": shape, "dtype": dtype, **one_shape(launch, config, inputs, settings)}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "rounds"}), flush=True)
    report = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": triton.__version__, "task": task.name, "config": config,
              "rows": rows}  # fmt: skip
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "timing_duty.json").write_text(json.dumps(report, indent=2))
    lines = [f"# Bench drivers on one kernel: {task.name} {config}", "",
             f"{report['date']}, {report['gpu']}, torch {report['torch']}, Triton {report['triton']}; "
             f"median of {args.rounds} interleaved rounds, us", "",
             "| shape | dtype | bench_ms | checked | checked_eager | checked / bench_ms | eager / bench_ms |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {json.dumps(r['shape'])} | {r['dtype']} | {r['bench_ms']:.2f} | {r['checked']:.2f} | "
                     f"{r['checked_eager']:.2f} | {r['checked'] / r['bench_ms']:.3f} | "
                     f"{r['checked_eager'] / r['bench_ms']:.3f} |")  # fmt: skip
    (out / "timing_duty.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
