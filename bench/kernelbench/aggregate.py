"""One KernelBench report over problems whose runs were made in several sessions or device calls.

    python -m bench.kernelbench.aggregate PROBLEMS... --runs DIR [--runs DIR ...] [--rows REPORT.json ...]
        --out DIR --measured TEXT --command TEXT --torch VERSION --triton VERSION

Each problem (files or folders, as for ``python -m bench.kernelbench``) is read from the last ``--runs``
folder holding ``NAME/report.json`` (a run folder of ``python -m bench.kernelbench``: its ``runs/``);
a problem without one is taken from the last ``--rows`` report (an earlier ``report.json`` of this
benchmark) that lists it, at its own size only; otherwise it counts as not correct, "no report" when a
run folder exists and "not run" when none does, or what ``--status NAME=TEXT`` says (a run whose
folder was not kept). Writes DIR/report.json and DIR/report.md in the format
``python -m bench.kernelbench`` writes (the same metrics, bench/kernelbench/metrics.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.kernelbench.__main__ import markdown, problem_row, read_run
from bench.kernelbench.metrics import ProblemResult, ShapeTime, summary


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.kernelbench.aggregate", description=__doc__.split("\n\n")[0])
    p.add_argument("problems", nargs="+", help="problem files or folders")
    p.add_argument("--runs", action="append", default=[], type=Path, help="a folder of NAME/report.json")
    p.add_argument("--rows", action="append", default=[], type=Path, help="an earlier report.json")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--measured", required=True, help="when and where, e.g. '2026-12-03 on NVIDIA H200'")
    p.add_argument("--command", required=True, help="the command each run was made with")
    p.add_argument("--status", action="append", default=[], metavar="NAME=TEXT",
                   help="why a problem has no report (its run folder was not kept)")
    p.add_argument("--torch", required=True, help="torch's version where the runs were made")
    p.add_argument("--triton", required=True, help="triton's version where the runs were made")
    return p.parse_args(argv)


def own_shapes(problems: list[str]) -> tuple[dict[str, dict[str, int]], list[str]]:
    """Each problem's own size (the first shape of its imported task), and the files that are not problems."""
    from tools.kernelbench import ProblemError, import_problem, problem_files

    files, errors = problem_files(problems)
    shapes = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            try:
                task = import_problem(path, Path(tmp), "float32")
            except ProblemError as exc:
                errors.append(str(exc))
                continue
            shapes[task.name] = task.spec["shapes"][0]
    return shapes, errors


def from_runs(name: str, runs: list[Path]) -> tuple[dict[str, Any] | None, bool]:
    """(report.json of the last folder holding one, whether any folder holds a run of ``name``)."""
    report, seen = None, False
    for folder in runs:
        seen = seen or (folder / name).is_dir()
        if (folder / name / "report.json").exists():
            report = json.loads((folder / name / "report.json").read_text())
    return report, seen


def earlier_rows(reports: list[Path]) -> dict[str, dict[str, Any]]:
    """Each problem's row in the last of these reports that lists it."""
    rows = {}
    for path in reports:
        rows.update({r["name"]: r for r in json.loads(path.read_text())["per_problem"]})
    return rows


def row_result(row: dict[str, Any]) -> ProblemResult:
    """An earlier report's row: the problem at its own size only."""
    shape = ShapeTime(shape=row["own_shape"], best_us=row["best_us"], anchors_us=row["anchors_us"])
    return ProblemResult(name=row["name"], correct=row["correct"], shapes=[shape] if row["correct"] else [])


def collect(shapes: dict[str, dict[str, int]], args: argparse.Namespace) -> tuple[list, list, set[str]]:
    """Each problem's result and report row, and the GPUs its run reports name."""
    told = dict(item.split("=", 1) for item in args.status)
    before = earlier_rows(args.rows)
    results, rows, gpus = [], [], set()
    for name, own in shapes.items():
        report, seen = from_runs(name, args.runs)
        earlier = None if report else before.get(name)
        if report and report.get("device", {}).get("name"):
            gpus.add(report["device"]["name"])
        if earlier is not None:
            results.append(row_result(earlier))
            rows.append({**earlier, "source": "earlier report (own size only)"})
            continue
        result = read_run(name, report, own)
        row = problem_row(result, report, own)
        if report is None:
            row["status"] = told.get(name) or ("no report" if seen else "not run")
        results.append(result)
        rows.append(row)
    return results, rows, gpus


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    shapes, errors = own_shapes(args.problems)
    results, rows, gpus = collect(shapes, args)
    record = {
        "date": args.measured,
        "gpu": ", ".join(sorted(gpus)) or "-",
        "torch": args.torch,
        "triton": args.triton,
        "command": args.command,
        "summary": summary(results),
        "per_problem": rows,
        "import_errors": errors,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(record, indent=2) + "\n")
    (args.out / "report.md").write_text(markdown(record))
    print(markdown(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
