"""Record ncu fixtures on a GPU: the test kernels of known bottleneck and each task's baseline.

    python bench/ncu_fixtures.py --out OUT/ncu [--only cases|tasks] [--tasks add_rmsnorm,...]

For each item: one ncu run into a .ncu-rep, exported as the raw and the details CSV; the snapshot
label of each CSV goes to ``OUT/labels.json`` (the format of tests/fixtures/ncu/expected_labels.json,
plus the numbers to review the label against: duration, bytes moved, GB/s, % of a device copy
measured in the same run) with the exact commands. Exit 1 when a test kernel is not given its
expected label, 2 when ncu cannot run here.

Review the task-baseline labels against their timing (a kernel at 3% of the copy bandwidth is not
memory_bound) before copying CSVs and entries into tests/fixtures/ncu/.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from the repo root
    sys.path.insert(0, str(REPO))

from profiles.snapshot import snapshots_from_csv  # noqa: E402
from tools.ncu import (  # noqa: E402
    NcuError,
    export_csv,
    kernel_names,
    ncu_available,
    profile_target_command,
    record_ncu,
)

GPU_KERNELS = REPO / "tests" / "gpu_kernels.py"


def _gpu_kernels():
    from tools.task import import_file

    return import_file(GPU_KERNELS, "_ka_gpu_kernels")


def device_prefix() -> str:
    import torch

    name = torch.cuda.get_device_name()
    match = re.search(r"\b([A-Z]\d{2,4}[A-Za-z]*)\b", name)
    return (match.group(1) if match else re.sub(r"\W+", "_", name)).lower()


def copy_gbps(gib: float = 1.0) -> float:
    """Device-to-device copy bandwidth (read + write), median of 5, to score kernels in the same run."""
    import torch

    src = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    times = []
    for _ in range(6):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    ms = sorted(times[1:])[2]
    del src, dst
    torch.cuda.empty_cache()
    return 2 * gib * 2**30 / (ms * 1e-3) / 1e9


def task_bytes(task, shape: dict, dtype: str, config: dict) -> int:
    """Bytes a perfect kernel moves: the task's override, else inputs read + outputs written once."""
    import torch

    from tools.task import import_file, torch_dtype

    if task.spec.bytes_moved:
        return int(task.spec.bytes_moved)
    inputs = task.make_inputs(shape, torch_dtype(dtype), "cuda", seed=0)
    module = import_file(task.path(task.spec.baseline), f"_ka_bench_{task.name}")
    outputs = module.launch(*inputs, **config)
    outputs = outputs if isinstance(outputs, tuple | list) else (outputs,)
    total = sum(t.numel() * t.element_size() for t in (*inputs, *outputs) if isinstance(t, torch.Tensor))
    del inputs, outputs
    torch.cuda.empty_cache()
    return total


def shape_slug(shape: dict) -> str:
    return "_".join(f"{k}{v}" for k, v in shape.items())


def _record(name: str, target: list[str], names: list[str], out: Path, timeout_s: float) -> dict[str, dict]:
    """Profile once, export both pages, snapshot each: {csv name: entry}."""
    report, cmd = record_ncu(target, names, out / f"{name}.ncu-rep", timeout_s=timeout_s, cwd=REPO)
    entries = {}
    for page in ("raw", "details"):
        csv_path, export = export_csv(report, page, out / f"{name}_{page}.csv")
        snaps = snapshots_from_csv(csv_path)
        main = max(snaps, key=lambda s: s["duration_us"] or 0)  # several kernels: the longest one
        entries[csv_path.name] = {
            "label": main["bottleneck"],
            "confidence": main["confidence"],
            "evidence": main["evidence"],
            "kernel": main["kernel"],
            "grid": main["grid"],
            "duration_us": main["duration_us"],
            "launches": len(snaps),
            "metrics": {k: main["metrics"].get(k) for k in ("dram_pct", "sm_pct", "l1_pct", "l2_pct")},
            "command": f"{shlex.join(cmd)} && {shlex.join(export)} > {csv_path.name}",
        }
    return entries


def record_cases(out: Path, prefix: str, cases: list[str], timeout_s: float) -> tuple[dict, list[str]]:
    gpu_kernels = _gpu_kernels()
    labels, wrong = {}, []
    for case in cases:
        spec = gpu_kernels.CASES[case]
        target = [sys.executable, str(GPU_KERNELS.relative_to(REPO)), "run", case]
        _, meta = gpu_kernels.build_case(case, "cuda")  # bytes moved at the GPU size
        entries = _record(f"{prefix}_test_{case}", target, [spec["kernel"]], out, timeout_s)
        for csv_name, entry in entries.items():
            entry["expected"] = spec["label"]
            entry["bytes_moved"] = meta["bytes"]
            labels[csv_name] = entry
            if entry["label"] != spec["label"]:
                wrong.append(f"{csv_name}: {entry['label']} (expected {spec['label']})")
        _print(entries)
    return labels, wrong


def record_tasks(out: Path, prefix: str, tasks: list[str] | None, timeout_s: float, copy: float) -> dict:
    from tools.task import load_task

    labels = {}
    for task_json in sorted((REPO / "tasks").glob("*/task.json")):
        if tasks and task_json.parent.name not in tasks:
            continue
        task = load_task(task_json.parent)
        shapes = [task.spec.shapes[0], task.spec.shapes[-1]]
        shapes = [s for i, s in enumerate(shapes) if s not in shapes[:i]]
        dtype, config = task.dtypes[0], task.default_config()
        baseline = task.path(task.spec.baseline)
        for shape in shapes:
            moved = task_bytes(task, shape, dtype, config)
            target = profile_target_command(task.folder, baseline, config, shape, dtype)
            name = f"{prefix}_{task.name}_baseline_{shape_slug(shape)}"
            entries = _record(name, target, kernel_names(baseline.read_text()), out, timeout_s)
            for entry in entries.values():
                gbps = moved / (entry["duration_us"] * 1e3) if entry["duration_us"] else None
                entry |= {"task": task.name, "shape": shape, "dtype": dtype, "config": config}
                entry |= {"bytes_moved": moved, "gbps": gbps and round(gbps, 1)}
                entry["pct_of_copy_bandwidth"] = gbps and round(100 * gbps / copy, 1)
            labels |= entries
            _print(entries)
    return labels


def _print(entries: dict) -> None:
    for name, e in entries.items():
        extra = (
            f"  {e['pct_of_copy_bandwidth']}% of copy" if e.get("pct_of_copy_bandwidth") is not None else ""
        )
        expect = f"  (expected {e['expected']})" if e.get("expected") else ""
        print(f"{name}: {e['label']} {e['confidence']:.2f}  {e['duration_us']} us{extra}{expect}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder (CSVs, .ncu-rep, labels.json)")
    parser.add_argument("--only", choices=["cases", "tasks"], help="only the test kernels, or only the tasks")
    parser.add_argument(
        "--cases", default="spills,small_grid,strided,atomics", help="test kernels to profile"
    )
    parser.add_argument("--tasks", help="comma-separated task names (default: every tasks/*/task.json)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per ncu run")
    args = parser.parse_args(argv)
    reason = ncu_available()
    if reason:
        print(f"error: {reason}", file=sys.stderr)
        return 2
    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    prefix = device_prefix()
    copy = copy_gbps()
    started = time.time()
    labels: dict = {}
    wrong: list[str] = []
    try:
        if args.only != "tasks":
            found, wrong = record_cases(args.out, prefix, args.cases.split(","), args.timeout)
            labels |= found
        if args.only != "cases":
            labels |= record_tasks(args.out, prefix, args.tasks and args.tasks.split(","), args.timeout, copy)
    except NcuError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        labels_path = args.out / "labels.json"
        previous = json.loads(labels_path.read_text()) if labels_path.exists() else {}
        labels_path.write_text(json.dumps(previous | labels, indent=1) + "\n")
        run = {
            "device": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "copy_gbps": round(copy, 1),
            "seconds": round(time.time() - started, 1),
            "command": shlex.join([sys.executable, *sys.argv]),
        }
        (args.out / "run.json").write_text(json.dumps(run, indent=1) + "\n")
    for line in wrong:
        print(f"MISLABELLED {line}", file=sys.stderr)
    print(f"{len(labels)} CSVs, labels in {args.out / 'labels.json'}; device copy {copy:,.0f} GB/s")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
