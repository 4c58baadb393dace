"""Run-folder index: every candidate of a run, findable by identity, re-evaluable with one command.

A run folder (tools/run_folder.py) holds ``candidates/<identity>.py``, ``results/<identity>.json``
(the EvalResult, log included) and ``report.json``. A candidate's config is read from, in order:
``candidates/<identity>.json`` (the candidate record without its source), a ``config`` key in its
result, the matching entry of ``report.json`` ``attempts`` (by ``identity`` or ``candidate`` path).

    python -m memory.artifacts show RUN_DIR
    python -m memory.artifacts reeval RUN_DIR [IDENTITY|best] [--device cpu|cuda] [--task TASK] [--json]

``reeval`` runs ``python -m tools.evaluate TASK CANDIDATE.py --config JSON --json [--module M]``,
prints old against new, saves the new result under ``reevals/`` and exits with the evaluator's code.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from memory.console import console
from tools.run_folder import CANDIDATES, INDEX, REEVALS, RunFolder

PROJECT_ROOT = Path(__file__).resolve().parents[1]


class ArtifactError(ValueError):
    """A run folder or a candidate in it is missing or ambiguous."""


def _attempts_by_identity(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for attempt in report.get("attempts") or []:
        if not isinstance(attempt, dict):
            continue
        identity = attempt.get("identity") or (
            Path(attempt["candidate"]).stem if isinstance(attempt.get("candidate"), str) else None
        )
        if identity:
            found.setdefault(identity, attempt)
    return found


def _fastest(entries: list[dict[str, Any]]) -> str | None:
    timed = [e for e in entries if e["verdict"] == "pass" and e["geomean_us"] is not None]
    return min(timed, key=lambda e: e["geomean_us"])["identity"] if timed else None


def _entry(folder: RunFolder, identity: str, attempt: dict[str, Any]) -> dict[str, Any]:
    """One candidate as the index lists it; what its record and result lack comes from its attempt."""
    record = folder.candidate_record(identity)
    result_file = folder.result_file(identity)
    result = folder.read_json(result_file) or {}
    config = next((c for c in (record.get("config"), result.get("config"), attempt.get("config")) if c), {})
    metrics = result.get("metrics") or {}
    return {
        "identity": identity,
        "source": folder.candidate_file(identity),
        "config": config,
        "module": record.get("module") or attempt.get("module"),
        "origin": record.get("origin") or attempt.get("origin"),
        "result": result_file if folder.path(result_file).is_file() else None,
        "verdict": result.get("verdict") or attempt.get("verdict"),
        "error_type": result.get("error_type") or attempt.get("error_type"),
        "geomean_us": metrics.get("geomean_us", attempt.get("geomean_us")),
    }


def index_run(run_dir: str | Path) -> dict[str, Any]:
    """Scan the run folder, write ``index.json`` and return it."""
    folder = RunFolder(run_dir)
    if not folder.is_run:
        raise ArtifactError(f"{run_dir} is not a run folder (no {CANDIDATES}/)")
    report = folder.report()
    attempts = _attempts_by_identity(report)
    entries = [_entry(folder, i, attempts.get(i, {})) for i in folder.candidate_identities()]
    index = {
        "task": report.get("task"),
        "status": report.get("status"),
        "best": folder.best_identity() or _fastest(entries),
        "updated": datetime.now(UTC).isoformat(),
        "candidates": entries,
    }
    folder.write(INDEX, json.dumps(index, indent=2) + "\n")
    return index


def find_candidate(run_dir: str | Path, identity_or_prefix: str) -> dict[str, Any]:
    """The index entry of one candidate: a full identity, a unique prefix of one, or ``best``."""
    index = index_run(run_dir)
    wanted = identity_or_prefix
    if wanted == "best":
        if index["best"] is None:
            raise ArtifactError(f"{run_dir}: no best candidate (no report.json best, no timed pass)")
        wanted = index["best"]
    matches = [e for e in index["candidates"] if e["identity"].startswith(wanted)]
    exact = [e for e in matches if e["identity"] == wanted]
    if exact:
        return exact[0]
    if not matches:
        raise ArtifactError(f"{run_dir}: no candidate {identity_or_prefix!r}")
    if len(matches) > 1:
        names = ", ".join(e["identity"] for e in matches[:5])
        raise ArtifactError(f"{run_dir}: {identity_or_prefix!r} matches {len(matches)} candidates ({names})")
    return matches[0]


def _task_path(run_dir: Path, task: str | None) -> Path:
    named = task or RunFolder(run_dir).report().get("task")
    if not named:
        raise ArtifactError(f"{run_dir}/report.json names no task; pass --task")
    path = Path(named)
    for option in (path, run_dir / path, PROJECT_ROOT / path):
        if option.exists():
            return option.resolve()
    raise ArtifactError(f"task {named!r} (from {'--task' if task else 'report.json'}) not found")


def reeval_command(
    run_dir: str | Path, entry: dict[str, Any], device: str | None = None, task: str | None = None
) -> list[str]:
    """The evaluator command line (python -m tools.evaluate) that re-evaluates an index entry."""
    run_dir = Path(run_dir)
    command = [
        sys.executable,
        "-m",
        "tools.evaluate",
        str(_task_path(run_dir, task)),
        str((run_dir / entry["source"]).resolve()),
        "--config",
        json.dumps(entry["config"], sort_keys=True),
        "--json",
    ]
    if entry.get("module"):
        # The file is named by identity, so the evaluator cannot tell the module from its name.
        command += ["--module", entry["module"]]
    if device:
        command += ["--device", device]
    return command


def reeval(
    run_dir: str | Path, identity: str = "best", device: str | None = None, task: str | None = None
) -> tuple[int, dict[str, Any] | None, dict[str, Any]]:
    """(evaluator exit code, new EvalResult or None when it printed none, the index entry)."""
    run_dir = Path(run_dir)
    entry = find_candidate(run_dir, identity)
    command = reeval_command(run_dir, entry, device, task)
    done = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True)
    try:
        result = json.loads(done.stdout)
    except json.JSONDecodeError:
        result = None
    if result is not None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        name = f"{REEVALS}/{entry['identity']}-{device or 'default'}-{stamp}.json"
        RunFolder(run_dir).write(name, json.dumps(result, indent=2))
    elif done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
    return done.returncode, result, entry


# -- command line ---------------------------------------------------------------------------------
def _us(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) else "-"


def _show(run_dir: Path, console: Console) -> None:
    index = index_run(run_dir)
    table = Table(title=f"{run_dir}  task={index['task']}  status={index['status']}")
    for column in ("identity", "module", "config", "verdict", "geomean_us", "origin"):
        table.add_column(column, no_wrap=column == "identity")
    for e in index["candidates"]:
        verdict = e["verdict"] or "-"
        if verdict == "fail":
            verdict = f"[red]fail[/] {e['error_type'] or ''}"
        mark = " [bold]*best[/]" if e["identity"] == index["best"] else ""
        config = " ".join(f"{k}={v}" for k, v in e["config"].items())
        table.add_row(
            e["identity"] + mark,
            e["module"] or "-",
            config,
            verdict,
            _us(e["geomean_us"]),
            e["origin"] or "-",
        )
    console.print(table)
    console.print(f"{len(index['candidates'])} candidates; index written to {RunFolder(run_dir).path(INDEX)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memory.artifacts", description="Inspect a run folder.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("show", help="index the run folder and print its candidates")
    p.add_argument("run_dir", type=Path)
    p = sub.add_parser("reeval", help="re-evaluate a past candidate (default: the run's best)")
    p.add_argument("run_dir", type=Path)
    p.add_argument("identity", nargs="?", default="best", help="identity, a unique prefix of one, or 'best'")
    p.add_argument("--device", choices=["cpu", "cuda"])
    p.add_argument("--task", help="task folder, when report.json lacks it or it moved")
    p.add_argument("--json", action="store_true", help="print the new EvalResult as JSON")
    args = parser.parse_args(argv)
    out, err = console(), console(stderr=True)
    try:
        if args.command == "show":
            _show(args.run_dir, out)
            return 0
        code, result, entry = reeval(args.run_dir, args.identity, args.device, args.task)
    except ArtifactError as exc:
        err.print(f"error: {exc}")
        return 2
    if args.json and result is not None:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    elif result is not None:
        new_us = (result.get("metrics") or {}).get("geomean_us")
        out.print(
            f"{entry['identity']}: was {entry['verdict'] or '-'} {_us(entry['geomean_us'])} us, "
            f"now {result.get('verdict')} {result.get('error_type') or ''} {_us(new_us)} us "
            f"on {(result.get('device') or {}).get('name', '?')}"
        )
    else:
        err.print(f"the evaluator exited {code} without a result")
    return code


if __name__ == "__main__":
    sys.exit(main())
