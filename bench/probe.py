"""Time a grid of a task's kernel configs at chosen shapes, beside a copy of the same size (GPU only).

A quick look at where a kernel family stands before a search spends minutes on it:

    python bench/probe.py --task add_rmsnorm --shapes M=4096,N=4096 M=16384,N=4096 --dtypes bfloat16 \\
        --grid 'persistent.py:PROGRAMS=264,528;STAGES=1,3;num_warps=4,8' --out probe.json

Every config's output is checked against the task's reference (the evaluator's comparison rule) before
it is timed. Each shape also times `dst.copy_(src)` moving the same bytes as the op (read + write), so
`% same-size copy` separates what the kernel leaves on the table from what the size itself costs
(ramp-up and tail of a short kernel); `% copy` is against the 1 GiB copy the suite and evaluator use.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def parse_shape(text: str) -> dict[str, int]:
    """``M=4096,N=8192`` -> {"M": 4096, "N": 8192}."""
    try:
        return {k.strip(): int(v) for k, v in (part.split("=") for part in text.split(","))}
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"a shape is DIM=INT[,DIM=INT...], got {text!r}") from exc


def parse_grid(text: str) -> tuple[str, list[dict[str, int]]]:
    """``module.py:KEY=1,2;num_warps=4,8`` -> (module, every combination as a config)."""
    module, _, body = text.partition(":")
    keys, values = [], []
    try:
        for item in filter(None, body.split(";")):
            key, _, listed = item.partition("=")
            keys.append(key.strip())
            values.append([int(v) for v in listed.split(",")])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"a grid is MODULE:KEY=V,V;KEY=V, got {text!r}") from exc
    if not module.endswith(".py") or not keys:
        raise argparse.ArgumentTypeError(f"a grid is MODULE.py:KEY=V,V;KEY=V, got {text!r}")
    return module, [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*values)]


def probe(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import triton

    from bench.suite_time import _tuple, check_outputs
    from tools.task import bytes_moved, import_file, load_task, torch_dtype
    from tools.timing import TimingSettings, copy_bandwidth_gbps, copy_time_us, time_fn

    task = load_task(REPO / "tasks" / args.task)
    settings = TimingSettings()
    copy_gbps = copy_bandwidth_gbps(settings)
    grids = args.grids
    modules = {m: import_file(task.path(m), f"probe_{Path(m).stem}") for m, _ in grids}
    rows: list[dict[str, Any]] = []
    for shape, dtype in itertools.product(args.shapes, args.dtypes or task.dtypes):
        inputs = task.make_inputs(dict(shape), torch_dtype(dtype), "cuda", 0)
        expected = _tuple(task.reference(*[t.clone() for t in inputs]))
        moved = bytes_moved(task, inputs, expected)
        copy_us = copy_time_us(moved, settings)
        print(f"\n{shape} {dtype}: {moved / 1e6:.1f} MB, same-size copy {copy_us:.1f} us", flush=True)
        for module, configs in grids:
            for config in configs:
                row: dict[str, Any] = {"shape": shape, "dtype": dtype, "module": module, "config": config}
                try:
                    fn = modules[module].launch
                    check_outputs(_tuple(fn(*inputs, **config)), expected, task, dtype)
                    timed = time_fn(lambda fn=fn, c=config, i=inputs: fn(*i, **c), settings)
                    gbps = moved / (timed.median_us * 1e-6) / 1e9
                    row.update(
                        median_us=timed.median_us,
                        spread=timed.spread,
                        pct_copy=100 * gbps / copy_gbps,
                        pct_same_size_copy=100 * copy_us / timed.median_us,
                    )
                except Exception as exc:  # a failing config is a finding, not the end of the probe
                    row["error"] = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"
                rows.append(row | {"bytes": moved, "same_size_copy_us": copy_us})
        for row in sorted(
            (r for r in rows if r["shape"] == shape and r["dtype"] == dtype and "median_us" in r),
            key=lambda r: r["median_us"],
        )[: args.top]:
            print(
                f"  {row['median_us']:8.1f} us  {row['pct_copy']:5.1f}% copy  "
                f"{row['pct_same_size_copy']:5.1f}% same-size  {row['module']} {row['config']}",
                flush=True,
            )
        del inputs, expected
        torch.cuda.empty_cache()
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "task": args.task,
        "copy_gbps": copy_gbps,
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", required=True)
    parser.add_argument("--shapes", nargs="+", type=parse_shape, required=True)
    parser.add_argument("--dtypes", nargs="*", default=None, help="default: the task's dtypes")
    parser.add_argument("--grid", action="append", required=True, help="MODULE.py:KEY=V,V;KEY=V (repeatable)")
    parser.add_argument("--top", type=int, default=8, help="configs printed per shape")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    try:
        args.grids = [parse_grid(grid) for grid in args.grid]  # parsed once, errors before any GPU work
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    result = probe(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(out.read_text()) if out.exists() else []
    out.write_text(json.dumps([*previous, result], indent=1))


if __name__ == "__main__":
    main()
