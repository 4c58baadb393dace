"""Every config of a task's search space, evaluated once: the brute-force best a search is measured against.

    python bench/brute_force.py TASK_DIR --out OUT.json [--device cuda] [--chunk 24] [--retime 5]
                                [--cluster local:N]

Each module (baseline and variants) x each config of its space goes through the evaluator as the graph
would send it (static checks, the judge's checks, CUDA-graph timing). Results are written after every
chunk and a config already in OUT.json is not evaluated again, so a killed run resumes where it
stopped (each call fits a 10-minute command when --chunk and --max-configs keep it short). Held
candidates (a suspicious speedup over the baseline) keep their timings: the brute force is no search,
nothing is approved or rejected on them. With --retime K, the K fastest are re-timed back to back in
fresh workers once every config is done (``retimed``: free of run-to-run drift).

Replay the expert search against the result on any machine: ``python bench/replay_search.py OUT.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tools.candidate import Candidate  # noqa: E402
from tools.evaluate import EvalSettings, Evaluator  # noqa: E402
from tools.results import EvalResult  # noqa: E402
from tools.task import TaskError, load_task  # noqa: E402


def every_candidate(task) -> list[Candidate]:
    out = []
    for module in task.module_names:
        space = task.search_space(module)
        keys = list(space)
        for values in itertools.product(*(space[k] for k in keys)):
            config = dict(zip(keys, values, strict=True))
            out.append(
                Candidate(source=task.source(module), config=config, module=module, origin="brute_force")
            )
    return out


def measured(cand: Candidate, result: EvalResult) -> dict[str, Any]:
    """What a replay needs of one result: the verdict and the per-shape timings (held ones included)."""
    rows = [
        {
            k: getattr(r, k)
            for k in ("shape", "dtype", "median_us", "min_us", "gbps", "roofline_pct", "ceiling_pct")
        }
        for r in result.metrics.per_shape
    ]
    held = result.details.get("held") if result.error_type == "suspicious_speedup" else None
    return {
        "module": cand.module,
        "config": cand.config,
        "identity": cand.identity,
        "verdict": result.verdict,
        "error_type": result.error_type,
        "held": held,
        "message": result.message[:300],
        "geomean_us": result.metrics.geomean_us,
        "per_shape": rows,
        "resources": {k: v for k, v in result.resources.items() if k != "kernels"},
        "seconds": result.seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/brute_force.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("task", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument(
        "--chunk", type=int, default=24, help="candidates per evaluator call (written after each)"
    )
    parser.add_argument("--max-configs", type=int, default=0, help="stop after this many new ones (0: all)")
    parser.add_argument("--retime", type=int, default=0, help="re-time the K fastest back to back at the end")
    parser.add_argument("--cluster", default=None,
                        help="local:N (a judge on each of N GPUs) or tcp://HOST:PORT; the re-time stays on one")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        task = load_task(args.task)
    except TaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = json.loads(args.out.read_text()) if args.out.exists() else {}
    if report and report.get("task") != task.name:
        print(f"error: {args.out} holds task {report.get('task')!r}, not {task.name!r}", file=sys.stderr)
        return 2
    everything = every_candidate(task)
    done = {m["identity"] for m in report.get("measured", [])}
    todo = [c for c in everything if c.identity not in done]
    if args.max_configs:
        todo = todo[: args.max_configs]
    report = {"task": task.name, "device": args.device, "space_size": len(everything), "measured": [],
              "retimed": [], **report}  # fmt: skip
    settings = EvalSettings.for_task(task, hidden_seed=0, cluster=args.cluster)
    started = time.perf_counter()
    with Evaluator(task, args.device, settings) as evaluator:
        for i in range(0, len(todo), args.chunk):
            chunk = todo[i : i + args.chunk]
            for cand, result in zip(chunk, evaluator.evaluate_many(chunk), strict=True):
                report["measured"].append(measured(cand, result))
                report["device_name"] = result.device.name or report.get("device_name")
            args.out.write_text(json.dumps(report, indent=1))
            print(
                f"{len(report['measured'])}/{len(everything)} in {time.perf_counter() - started:.0f} s",
                flush=True,
            )
        if args.retime and len(report["measured"]) == len(everything) and args.device == "cuda":
            fastest = sorted(
                (m for m in report["measured"] if m["geomean_us"]), key=lambda m: m["geomean_us"]
            )
            picks = fastest[: args.retime]
            by_id = {c.identity: c for c in everything}
            again = evaluator.retime([by_id[m["identity"]] for m in picks])
            report["retimed"] = [measured(by_id[m["identity"]], r) for m, r in zip(picks, again, strict=True)]
            args.out.write_text(json.dumps(report, indent=1))
    best = min(
        (m for m in report["measured"] if m["geomean_us"]), key=lambda m: m["geomean_us"], default=None
    )
    if best:
        print(
            f"best of {len(report['measured'])}: {best['module']} {best['config']} {best['geomean_us']:.2f} us"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
