"""The search on each task against its brute force: one markdown table from a GPU session's files.

    python bench/unseen_summary.py OUT_DIR      (reads OUT_DIR/brute/*.json, OUT_DIR/runs/*/report.json and
                                                 OUT_DIR/suite.json when there is one)

Per task: how the graph run ended and why, rounds, evaluations against the size of the space, active
minutes, its best against the brute-force best, each shape's % of its same-size ceiling and of the copy
bandwidth, and (from bench/suite.py's time stage) the run's winner against torch eager and a static
per-shape torch.compile timed in one process. Writes OUT_DIR/unseen.md and prints it; exit 2 when
OUT_DIR holds none of them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.suite_report import speedup  # noqa: E402
from tools.dispatch import geomean_or_none  # noqa: E402


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def brute_best(table: dict[str, Any]) -> dict[str, Any] | None:
    passing = [m for m in table.get("measured", []) if m.get("verdict") == "pass" and m.get("geomean_us")]
    return min(passing, key=lambda m: m["geomean_us"], default=None)


def task_rows(name: str, report: dict[str, Any] | None, table: dict[str, Any] | None) -> list[str]:
    best = brute_best(table) if table else None
    space = table.get("space_size") if table else None
    if report is None:
        return [f"| {name} | no run | - | - | - | {space or '-'} | - | - | {_fmt(best and best['geomean_us'], 2)} | - "
                "| - | - |"]  # fmt: skip
    found = report["best"]["geomean_us"]
    gap = 100 * (found / best["geomean_us"] - 1) if best and found else None
    evaluated = report["candidates_evaluated"] + 1  # the baseline's config is one of the space's too
    found_at = report["best"].get("n", 0) + 1  # configs evaluated when the best was (attempt n, from 0)
    versus = report.get("speedup_vs") or {}
    return [
        f"| {name} | {report['status']}: {report['reason']} | {report['rounds']} | {evaluated}{_share(evaluated, space)} | "
        f"{found_at}{_share(found_at, space)} | {space or '-'} | {report['active_s'] / 60:.1f} | {_fmt(found, 2)} | "
        f"{_fmt(best and best['geomean_us'], 2)} | {_fmt(gap)} | {_fmt(versus.get('compile'), 2)} | "
        f"{_fmt(versus.get('eager'), 2)} |"
    ]


def _share(count: int, space: int | None) -> str:
    return f" ({100 * count / space:.0f}%)" if space else ""


def shape_rows(name: str, report: dict[str, Any]) -> list[str]:
    return [
        f"| {name} | {' '.join(f'{k}={v}' for k, v in r['shape'].items())} | {r['dtype']} | {_fmt(r['best_us'], 2)} | "
        f"{_fmt(r.get('best_ceiling_pct'))} | {_fmt(r.get('best_roofline_pct'))} | "
        f"{_fmt((r.get('anchors') or {}).get('compile'), 2)} | {_fmt((r.get('anchors') or {}).get('eager'), 2)} |"
        for r in report["per_shape"]
    ]


def anchor_rows(name: str, timed: dict[str, Any]) -> list[str]:
    """The winner's geomean against eager and torch.compile on both clocks (rows where both were timed)."""
    rows = timed.get("rows") or []

    def us(method: str) -> str:
        return _fmt(geomean_or_none(r["methods"][method]["median_us"] for r in rows
                                    if (r["methods"].get(method) or {}).get("median_us")), 2)  # fmt: skip

    ratios = [_fmt(speedup(rows, m, key), 2) for key in ("median_us", "user_us") for m in ("compile", "eager")]
    return [f"| {name} | {len(rows)} | {us('best')} | {us('compile')} | {us('eager')} | " + " | ".join(ratios) + " |"]


def anchor_section(suite: dict[str, Any]) -> list[str]:
    tasks = {name: t for name, t in sorted(suite.get("tasks", {}).items()) if t.get("rows")}
    if not tasks:
        return []
    lines = ["", "## Against torch.compile and eager (bench/suite.py, one process)", "",
             "Geomeans over the timed shapes; speedups are the anchor's time over the winner's, on the device's "
             "clock (CUDA-graph replay, L2 flushed) and on the user's (one eager call).", "",
             "| task | shapes | winner us | torch.compile us | eager us | x compile (device) | x eager (device) "
             "| x compile (user) | x eager (user) |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, timed in tasks.items():
        lines += anchor_rows(name, timed)
    return lines


def summary(out: Path) -> str | None:
    tables = {p.stem: json.loads(p.read_text()) for p in sorted((out / "brute").glob("*.json"))}
    reports = {p.parent.name: json.loads(p.read_text()) for p in sorted((out / "runs").glob("*/report.json"))}
    suite = json.loads((out / "suite.json").read_text()) if (out / "suite.json").is_file() else {}
    if not tables and not reports and not suite:
        return None
    lines = ["# The search against the brute force", "",
             "The run's own anchors (report.json `speedup_vs`: the reference in eager and under a static per-shape "
             "torch.compile, timed by the run's judge like its candidates), geomean over the shapes; `best found "
             "after`: the configs evaluated when the run's best was.", "",
             "| task | how it ended | rounds | configs evaluated | best found after | configs | active min | best us "
             "| brute-force best us | gap % | x torch.compile | x eager |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name in sorted(set(tables) | set(reports)):
        lines += task_rows(name, reports.get(name), tables.get(name))
    lines += ["", "## Per shape (the run's best)", "",
              "| task | shape | dtype | us | % of same-size ceiling | % of copy bandwidth | torch.compile us | eager us |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, report in sorted(reports.items()):
        lines += shape_rows(name, report)
    lines += anchor_section(suite)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        print("usage: python bench/unseen_summary.py OUT_DIR", file=sys.stderr)
        return 2
    out = Path(args[0])
    text = summary(out)
    if text is None:
        print(f"error: {out} holds no brute/*.json, runs/*/report.json or suite.json", file=sys.stderr)
        return 2
    (out / "unseen.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
