"""The benchmark suite: every example task end to end on the GPU, then our best beside the baseline
and the anchors a skeptic would pick instead, all timed in one process on two clocks.

    python bench/suite.py --out OUT [--tasks add_rmsnorm,softmax,gqa_decode] [--stages search,export,time]
                          [--rounds N] [--minutes M] [--search-timeout S]
                          [--compile default,max-autotune,dynamic]

Stages, per task:
- search: ``python -m graph.run tasks/T --device cuda --unattended --run-dir OUT/runs/T`` (the
  unattended policy answers every pause; candidates held for review stay failures); a run folder
  that already holds a report is reused, a killed one is resumed.
- export: the run's winner as a standalone module, OUT/kernels/T.py (dispatch table when it wins).
- time (bench/suite_time.py): in this process, per shape: that module's ``launch(*inputs)``, the
  baseline with its config, torch eager, torch.compile compiled afresh and static for that shape
  (default, max-autotune), the task's library anchors (task.json ``settings.anchors``: Liger-Kernel,
  torch SDPA), then torch.compile dynamic (one compile over all shapes); each output checked against
  the reference first. Two clocks: the device's (CUDA-graph replay, L2 flushed, median of 3 medians,
  as the evaluator times) and the user's (one eager call, host work included).

Writes OUT/suite.json (merged with an existing one, so tasks can be run in separate sessions), then
OUT/suite.md (bench/suite_report.py) and OUT/roofline.png from it. Partial results are written after
every shape. An unknown task, compiler or anchor exits 2 before any stage runs.
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.suite_report import markdown, write_outputs  # noqa: E402
from bench.suite_time import COMPILERS, time_task  # noqa: E402
from bench.task_folders import task_folder as find_task  # noqa: E402

TASKS = ("add_rmsnorm", "softmax", "gqa_decode")


def task_folder(name: str) -> Path:
    """The task by name (bench.task_folders); tasks/NAME when none holds it, which load_task refuses."""
    return find_task(name) or REPO / "tasks" / name

# -- search and export ------------------------------------------------------------------------------------
def search(name: str, out: Path, args: argparse.Namespace, task_dir: Path | None = None) -> dict[str, Any]:
    """One graph run (or reuse/resume of one already in OUT/runs/NAME). Nobody watches a suite run, so it
    runs --unattended: the policy answers every pause (continue, or stop once converged) and candidates
    held for review stay failures; the summary counts the pauses."""
    run_dir = out / "runs" / name
    report_file = run_dir / "report.json"
    if report_file.exists():
        report = json.loads(report_file.read_text())
        return {**_search_summary(report, run_dir), "reused": True}
    if (run_dir / "checkpoints.sqlite").exists():
        cmd = [sys.executable, "-m", "graph.run", "--resume", str(run_dir), "--unattended"]
    else:
        cmd = [sys.executable, "-m", "graph.run", str(task_dir or task_folder(name)), "--device", args.device,
               "--unattended", "--run-dir", str(run_dir), "--seed", str(args.seed)]  # fmt: skip
        if args.rounds:
            cmd += ["--rounds", str(args.rounds)]
        if args.minutes:
            cmd += ["--set", f"budget.minutes={args.minutes}"]
        for item in getattr(args, "set", None) or []:
            cmd += ["--set", item]
    started = time.perf_counter()
    log = out / "runs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as sink:
        code = _graph_run(cmd, sink, args.search_timeout)
    wall = time.perf_counter() - started
    report = json.loads(report_file.read_text()) if report_file.exists() else {}
    return {**_search_summary(report, run_dir), "exit_code": code, "wall_s": wall, "log": str(log)}


def _graph_run(cmd: list[str], sink: Any, timeout: float) -> int | str:
    """Exit code of one graph.run process, or "timeout"."""
    try:
        return subprocess.run(
            cmd, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, timeout=timeout
        ).returncode
    except subprocess.TimeoutExpired:
        return "timeout"


def _search_summary(report: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    best = report.get("best") or {}
    return {
        "run_dir": str(run_dir),
        "status": report.get("status", "no report"),
        "reason": report.get("reason", ""),
        "rounds": report.get("rounds"),
        "candidates_evaluated": report.get("candidates_evaluated"),
        "speedup": report.get("speedup"),
        "wall_s": report.get("wall_s"),
        "best": {k: best.get(k) for k in ("module", "config", "geomean_us")},
        "pauses": report.get("pauses", []),  # each with the unattended policy's answer
    }


def export(name: str, out: Path) -> dict[str, Any]:
    from tools.export import export_run
    from tools.task import load_task

    task = load_task(task_folder(name))
    text, summary, report = export_run(task, out / "runs" / name)
    path = out / "kernels" / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return {
        **summary.model_dump(),
        "path": str(path.relative_to(out)),
        "dispatch_report": report.model_dump(),
    }


def _argument_problem(names: list[str], compilers: list[str]) -> str | None:
    """Why the command line cannot run (an unknown task, compiler or anchor), before any GPU work."""
    from bench.anchors import AnchorError, task_anchors
    from tools.task import TaskError, load_task

    unknown = [c for c in compilers if c not in COMPILERS]
    if unknown:
        return f"--compile: unknown {unknown[0]!r} (known: {', '.join(COMPILERS)})"
    for name in names:
        try:
            task_anchors(load_task(task_folder(name)).spec.settings)
        except (TaskError, AnchorError) as exc:
            return f"task {name}: {exc}"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--stages", default="search,export,time")
    parser.add_argument("--rounds", type=int, default=None, help="round budget of each search")
    parser.add_argument("--minutes", type=float, default=None, help="minutes budget of each search")
    parser.add_argument(
        "--search-timeout", type=float, default=660.0, help="seconds before a search is killed"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for each search (repeatable)",
    )
    parser.add_argument(
        "--device", default="cuda", help="of the search; cpu only as a dry run of search+export"
    )
    parser.add_argument(
        "--compile",
        default=",".join(COMPILERS),
        help=f"torch.compile anchors to time ({', '.join(COMPILERS)})",
    )
    args = parser.parse_args()
    names = [t for t in args.tasks.split(",") if t]
    compilers = [c for c in args.compile.split(",") if c]
    problem = _argument_problem(names, compilers)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    stages = set(args.stages.split(","))
    existing = out / "suite.json"
    report = json.loads(existing.read_text()) if existing.exists() else {"tasks": {}}
    for name in names:
        started = time.perf_counter()
        entry = report["tasks"].setdefault(name, {})
        if "search" in stages:
            entry["search"] = search(name, out, args)
            print(
                f"{name}: search {entry['search']['status']} in {entry['search'].get('wall_s') or 0:.0f} s",
                flush=True,
            )
        if "export" in stages:
            try:
                entry["export"] = export(name, out)
            except Exception as exc:
                entry["export"] = {"error": f"{type(exc).__name__}: {exc}"}
            print(
                f"{name}: export {entry['export'].get('dispatch', entry['export'].get('error'))}", flush=True
            )
        if "time" in stages:
            from tools.task import load_task

            kernel = out / (entry.get("export") or {}).get("path", "missing")

            def partial(rows: list[dict[str, Any]], entry: dict[str, Any] = entry) -> None:
                entry.update(rows=rows, partial=True, compilers=compilers)  # what a killed run keeps
                write_outputs(report, out)

            done = entry.get("rows") if entry.get("partial") else None  # a killed time stage resumes
            timed = time_task(load_task(task_folder(name)), compilers, kernel if kernel.is_file() else None,
                              on_row=partial, done=done)  # fmt: skip
            entry.pop("partial", None)
            entry.update(timed)
            print(f"{name}: timed {len(timed['rows'])} shapes", flush=True)
        entry["seconds"] = time.perf_counter() - started
        report["updated"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        write_outputs(report, out)
    print(markdown(report))


if __name__ == "__main__":
    main()
