"""Optimize KernelBench-format problems and report KernelBench's metrics beside ours.

    python -m bench.kernelbench PROBLEMS... --out DIR [--device cuda] [--model SPEC] [--minutes 3]
        [--dtype float32|bfloat16] [--search-timeout S] [--set KEY=VALUE ...]

1. Imports the problems (files or folders) into DIR/tasks with tools.kernelbench; a file that is not a
   problem is reported and skipped.
2. Runs each task with ``python -m graph.run TASK --device ... --model SPEC --unattended`` as a
   subprocess with ``--unattended``, as bench.suite runs its searches (the unattended policy answers every
   pause, held candidates stay failures, the run is killed past --search-timeout); a run folder that already
   holds a report is reused, a killed one resumed.
3. Reads each run's report.json and writes DIR/report.json and DIR/report.md: correctness rate, fast_p
   at p = 1.0, 1.2, 1.5, 2.0 and geomean speedups against eager and against torch.compile (KernelBench's
   definitions, bench/kernelbench/metrics.py), and per problem the time, evaluations, minutes and held
   candidates.

The anchors are read from report.json's per_shape rows, ``"anchors": {"eager": us, "compile": us}``, the
reference timed by the evaluator in the same process as the candidates. A run without them counts as
untimed against that anchor (never as fast).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.kernelbench.metrics import ANCHORS, THRESHOLDS, ProblemResult, ShapeTime, own_speedup, summary

REPO = Path(__file__).resolve().parents[2]


def read_run(name: str, report: dict[str, Any] | None, own_shape: dict[str, int]) -> ProblemResult:
    """One run's report.json as a ProblemResult; no report or no passing candidate is incorrect."""
    if not report:
        return ProblemResult(name=name, correct=False)
    rows = [
        ShapeTime(shape=r["shape"], best_us=r.get("best_us"), anchors_us=r.get("anchors") or {})
        for r in report.get("per_shape", [])
    ]
    rows.sort(key=lambda r: r.shape != own_shape)  # the problem's own size first
    best = report.get("best") or {}
    correct = bool(best.get("geomean_us")) and bool(rows) and all(r.best_us for r in rows)
    return ProblemResult(name=name, correct=correct, shapes=rows)


def problem_row(
    result: ProblemResult, report: dict[str, Any] | None, own_shape: dict[str, int]
) -> dict[str, Any]:
    """What report.md shows per problem besides the speedups."""
    report = report or {}
    own = result.shapes[0] if result.shapes else None
    attempts = report.get("attempts", [])
    return {
        "name": result.name,
        "correct": result.correct,
        "status": report.get("status", "no report"),
        "own_shape": own_shape,
        "best_us": own.best_us if own else None,
        "anchors_us": own.anchors_us if own else {},
        "speedup": {a: own_speedup(result, a) for a in ANCHORS},
        "evaluations": report.get("candidates_evaluated"),
        "minutes": round(report["wall_s"] / 60, 2) if report.get("wall_s") is not None else None,
        "held": sum(1 for a in attempts if a.get("error_type") == "suspicious_speedup"),
    }


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def markdown(record: dict[str, Any]) -> str:
    s = record["summary"]
    lines = [
        "# KernelBench-format problems",
        "",
        f"- measured {record['date']} on {record['gpu']} (torch {record['torch']}, triton {record['triton']})",
        f"- command: `{record['command']}`",
        f"- problems: {s['problems']}, correct: {100 * s['correctness_rate']:.0f}%",
        "",
        "KernelBench's metrics at each problem's own size (fast_p: correct and faster than p x the anchor, "
        "over all problems; geomean over the correct ones), then our geomean over every timed shape.",
        "",
        "| anchor | "
        + " | ".join(f"fast_{p:g}" for p in THRESHOLDS)
        + " | geomean | geomean, all shapes | timed |",
        "|---|" + "---|" * (len(THRESHOLDS) + 3),
    ]
    for anchor, m in s["anchors"].items():
        cells = [f"{100 * m['fast_p'][f'{p:g}']:.0f}%" for p in THRESHOLDS]
        lines.append(
            f"| {anchor} | " + " | ".join(cells) + f" | {_times(m['geomean_speedup'])} | "
            f"{_times(m['geomean_speedup_all_shapes'])} | {m['timed']} |"
        )
    lines += [
        "",
        "| problem | correct | own size | ours us | eager us | compile us | vs eager | vs compile | "
        "evaluations | minutes | held |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in record["per_problem"]:
        shape = " ".join(f"{k}={v}" for k, v in (p["own_shape"] or {}).items())
        lines.append(
            f"| {p['name']} | {'yes' if p['correct'] else '**no** (' + p['status'] + ')'} | {shape} | "
            f"{_fmt(p['best_us'], '.1f')} | {_fmt(p['anchors_us'].get('eager'), '.1f')} | "
            f"{_fmt(p['anchors_us'].get('compile'), '.1f')} | {_fmt(p['speedup']['eager'], '.2f')} | "
            f"{_fmt(p['speedup']['compile'], '.2f')} | {p['evaluations'] if p['evaluations'] is not None else '-'} | "
            f"{_fmt(p['minutes'], '.1f')} | {p['held']} |"
        )
    if record.get("import_errors"):
        lines += ["", "## Not imported", ""] + [f"- {e}" for e in record["import_errors"]]
    return "\n".join(lines) + "\n"


def run_problem(name: str, task_dir: Path, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One ``--unattended`` graph.run (reused when its report exists, resumed when killed): the
    unattended policy answers every pause and held candidates stay failures. Its exit code and wall time."""
    run_dir = out / "runs" / name
    if (run_dir / "report.json").exists():
        return {"reused": True}
    cmd = [sys.executable, "-m", "graph.run", "--resume", str(run_dir), "--unattended"] if (
        run_dir / "checkpoints.sqlite").exists() else [
        sys.executable, "-m", "graph.run", str(task_dir), "--device", args.device, "--model", args.model,
        "--unattended", "--run-dir", str(run_dir), "--seed", str(args.seed),
        "--set", f"budget.minutes={args.minutes}", *(x for item in args.set for x in ("--set", item)),
    ]  # fmt: skip
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with (out / "runs" / f"{name}.log").open("w") as log:
        code = _graph_run(cmd, log, args.search_timeout)
    return {"exit_code": code, "wall_s": time.perf_counter() - started}


def _graph_run(cmd: list[str], log: Any, timeout: float) -> int | str:
    try:
        return subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        return "timeout"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.kernelbench", description=__doc__.split("\n\n")[0])
    p.add_argument("problems", nargs="+", help="problem files or folders of them")
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu", "auto"])
    p.add_argument("--model", default="expert", help="SPEC of the proposer (default: expert)")
    p.add_argument("--minutes", type=float, default=3.0, help="search budget per problem")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--search-timeout", type=float, default=None, help="seconds before a run is killed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a setting for each run")
    args = p.parse_args(argv)
    if args.search_timeout is None:
        args.search_timeout = 60 * args.minutes + 180  # the budget plus setup and the report
    return args


def run_all(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from tools.kernelbench import ProblemError, import_problem, problem_files

    files, errors = problem_files(args.problems)
    tasks = []
    for path in files:
        try:
            tasks.append(import_problem(path, out / "tasks", args.dtype))
        except ProblemError as exc:
            errors.append(str(exc))
    results, rows = [], []
    for task in tasks:
        started = time.perf_counter()
        searched = run_problem(task.name, task.folder, out, args)
        report_file = out / "runs" / task.name / "report.json"
        report = json.loads(report_file.read_text()) if report_file.exists() else None
        result = read_run(task.name, report, task.spec["shapes"][0])
        results.append(result)
        rows.append(
            {**problem_row(result, report, task.spec["shapes"][0]), "exit_code": searched.get("exit_code")}
        )
        print(
            f"{task.name}: {'correct' if result.correct else 'not correct'} in {time.perf_counter() - started:.0f} s",
            flush=True,
        )
    return {"results": results, "rows": rows, "errors": errors}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    done = run_all(args, out)
    import torch
    import triton

    reports = [out / "runs" / r["name"] / "report.json" for r in done["rows"]]
    gpus = {json.loads(p.read_text()).get("device", {}).get("name") for p in reports if p.exists()} - {None}
    record = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "gpu": ", ".join(sorted(gpus)) or args.device,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "command": " ".join(["python -m bench.kernelbench", *(argv if argv is not None else sys.argv[1:])]),
        "summary": summary(done["results"]),
        "per_problem": done["rows"],
        "import_errors": done["errors"],
    }
    (out / "report.json").write_text(json.dumps(record, indent=2) + "\n")
    (out / "report.md").write_text(markdown(record))
    print(markdown(record))
    return 2 if done["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
