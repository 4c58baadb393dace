"""What checking every timed replay costs: the checked bench with torch's log steps and with the Triton log
(tools/replay_log.py), one kernel, one process, interleaved.

    python3 bench/timing_log_cost.py [TASK_DIR]        (default tasks/add_rmsnorm; on the GPU box)

The task's baseline at its default config, captured in a CUDA graph per workload shape, timed by
``checked_bench_ms`` three times (as a candidate is) with each log, twice in turn; the second round is
printed per shape: wall seconds, the three medians, timed runs, the poison counts seen and whether every
logged sample equals the output. Last line: the wall seconds of all shapes per log.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from bench.timing_duty import graph_of, load_baseline  # noqa: E402
from tools import replay_log  # noqa: E402
from tools.task import load_task, torch_dtype  # noqa: E402
from tools.timing import TimingSettings, checked_bench_ms  # noqa: E402

LOGS = ("torch", "triton")


def three_benches(graph, outputs: tuple, samples: list, settings: TimingSettings) -> dict:
    torch.cuda.synchronize()
    started = time.perf_counter()
    medians, logs = [], []
    for _ in range(3):
        median, _, log = checked_bench_ms(graph.replay, lambda: outputs, samples, settings.warmup_ms, settings.rep_ms)
        medians.append(round(median * 1000, 2))
        logs.append(log)
    torch.cuda.synchronize()
    wall = time.perf_counter() - started
    exact = all(
        torch.equal(log[:, j, 1 : 1 + s.numel()], outputs[j].reshape(-1)[s].double().expand(log.shape[0], -1))
        for log in logs
        for j, s in enumerate(samples)
    )
    counts = sorted({float(v) for log in logs for v in log[:, :, 0].flatten().tolist()})
    return {"wall_s": round(wall, 4), "medians_us": medians, "runs": [log.shape[0] for log in logs],
            "poison_counts": counts, "sample_ok": exact}  # fmt: skip


def main() -> None:
    task = load_task(sys.argv[1] if len(sys.argv) > 1 else REPO / "tasks/add_rmsnorm")
    launch, config = load_baseline(task)
    settings = TimingSettings()
    covered = replay_log.covered
    totals = dict.fromkeys(LOGS, 0.0)
    for shape, dtype in task.workload("cuda"):
        inputs = task.make_inputs(dict(shape), torch_dtype(dtype), "cuda", 0)
        graph, outputs = graph_of(launch, config, tuple(inputs) if isinstance(inputs, tuple | list) else (inputs,))
        samples = [torch.randint(o.numel(), (256,), device="cuda").unique() for o in outputs]
        row: dict = {"shape": shape}
        for round_ in range(2):
            for log in LOGS:
                replay_log.covered = covered if log == "triton" else (lambda *_: False)
                measured = three_benches(graph, outputs, samples, settings)
                if round_ == 1:
                    totals[log] += measured["wall_s"]
                    row[log] = measured
        replay_log.covered = covered
        print(json.dumps(row), flush=True)
    print("totals", {k: round(v, 3) for k, v in totals.items()})


if __name__ == "__main__":
    main()
