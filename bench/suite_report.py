"""The benchmark suite's report: acceptance checks and suite.md from suite.json, and the roofline plot
(no GPU needed; bench/suite.py writes the JSON).

Every row of a task holds each method's record: a time on the device clock (``median_us``: the CUDA-
graph replay after a clean L2 flush) and on the user's clock (``user_us``: one eager call on an idle
GPU, host work included), or ``refused`` / ``error`` with the message. Ours are "best" (the exported
module) and "baseline"; every other method is an anchor, and the strongest anchor at a shape is the
fastest one on that clock.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.plot import METHODS, plot_roofline
from tools.dispatch import geomean_or_none

OURS = ("best", "baseline")
CLOCK_KEYS = {"device": "median_us", "user": "user_us"}

# The acceptance figures, checked on the suite's own numbers. where: (dim, op, value).
ACCEPTANCE: dict[str, list[dict[str, Any]]] = {
    "add_rmsnorm": [
        {"what": "our best >= 92% of the copy bandwidth at M >= 4096", "metric": "roofline_pct",
         "where": ("M", ">=", 4096), "min": 92.0},
        {"what": "our best >= 1.3x torch.compile (static, per shape) at M >= 4096 (geomean)",
         "metric": "speedup_vs_compile", "where": ("M", ">=", 4096), "min": 1.3},
    ],
    "softmax": [
        {"what": "our best >= 90% of the copy bandwidth at N >= 4096", "metric": "roofline_pct",
         "where": ("N", ">=", 4096), "min": 90.0},
    ],
    "gqa_decode": [
        {"what": "our best >= 85% of the copy bandwidth at B >= 8", "metric": "roofline_pct",
         "where": ("B", ">=", 8), "min": 85.0},
        {"what": "our best >= 60% of the copy bandwidth at B = 1", "metric": "roofline_pct",
         "where": ("B", "==", 1), "min": 60.0},
    ],
}  # fmt: skip
SEARCH_LIMIT_S = 600.0  # "every run <= 10 minutes"

INTRO = (
    "Two clocks. **Device**: one call captured in a CUDA graph, its replay timed by CUDA events after a "
    "clean L2 flush (a 256 MB read, tools.timing.bench_ms), median of 3 medians: the GPU time the "
    "evaluator scores. **User's**: one eager Python call as a user makes it (`launch(*inputs)`, the "
    "compiled function, the library call), on an idle GPU after the same flush, timed by CUDA events "
    "around the call (bench/clocks.py): host work included. Every method ran in the same process as its "
    "copy-bandwidth measurement, and every output was checked against the task's reference before it "
    "was timed; an anchor that refused a shape is listed with its message. Anchors: torch eager; "
    "torch.compile compiled afresh for each shape and dtype with `dynamic=False` (mode default, and "
    "max-autotune as Inductor's autotuned kernels in the suite's own CUDA graph: mode "
    "max-autotune-no-cudagraphs); torch.compile dynamic, one compile object called over the shapes in "
    "order as a model would (it recompiles with dynamic shapes at the second shape); the task's library "
    "anchors (Liger-Kernel, torch SDPA). The strongest anchor is the fastest anchor at that shape on "
    "that clock. `% copy` = achieved GB/s (bytes read + written, inputs and outputs once) / the copy "
    "bandwidth (a 1 GiB device copy). `same-size copy`: a device copy moving the shape's bytes, the "
    "ceiling at that size (a short op pays ramp-up and tail that 1 GiB hides)."
)


# -- reading rows ---------------------------------------------------------------------------------------
def _selected(rows: list[dict], where: tuple[str, str, int] | None) -> list[dict]:
    if where is None:
        return rows
    dim, op, value = where
    keep = {">=": lambda v: v >= value, "==": lambda v: v == value, "<=": lambda v: v <= value}[op]
    return [r for r in rows if keep(r["shape"][dim])]


def _us(row: dict, method: str | None, key: str = "median_us") -> float | None:
    return (row["methods"].get(method) or {}).get(key) if method else None


def strongest_anchor(row: dict[str, Any], key: str = "median_us") -> str | None:
    """The fastest anchor at this row on the clock ``key`` (None when no anchor was timed)."""
    timed = {m: r[key] for m, r in row["methods"].items() if m not in OURS and (r or {}).get(key)}
    return min(timed, key=timed.__getitem__) if timed else None


def speedup(rows: list[dict], method: str, key: str = "median_us") -> float | None:
    """Geomean over rows of method time / our best's time on the clock ``key`` (rows where both were
    timed). ``method`` "strongest": each row's strongest anchor on that clock."""
    ratios = []
    for r in rows:
        other = strongest_anchor(r, key) if method == "strongest" else method
        if _us(r, other, key) and _us(r, "best", key):
            ratios.append(_us(r, other, key) / _us(r, "best", key))
    return geomean_or_none(ratios)


def check_acceptance(name: str, task: dict[str, Any]) -> list[dict[str, Any]]:
    """Each acceptance figure of the task: its value on this run, the target, met or not (None: not measured)."""
    checks = []
    for spec in ACCEPTANCE.get(name, []):
        rows = _selected(task.get("rows", []), spec.get("where"))
        if spec["metric"] == "roofline_pct":
            values = [r["methods"]["best"]["roofline_pct"] for r in rows if _us(r, "best")]
            value = min(values) if values and len(values) == len(rows) else None
        else:
            value = speedup(rows, "compile")
        checks.append(
            {"what": spec["what"], "value": value, "target": spec["min"],
             "met": None if value is None else value >= spec["min"]}
        )  # fmt: skip
    wall = (task.get("search") or {}).get("wall_s")
    checks.append(
        {"what": "the search run took <= 10 minutes", "value": wall, "target": SEARCH_LIMIT_S,
         "met": None if wall is None else wall <= SEARCH_LIMIT_S}
    )  # fmt: skip
    return checks


# -- the markdown ---------------------------------------------------------------------------------------
def _cell(m: dict | None, key: str = "median_us", spec: str = ".1f") -> str:
    if not m:
        return "-"
    if "refused" in m:
        return "refused"
    if "error" in m:
        return f"error: {m['error'][:40]}"
    return format(m[key], spec) if m.get(key) is not None else "-"


def _times(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _same_size_pct(row: dict[str, Any]) -> str:
    best = row["methods"].get("best") or {}
    if not row.get("copy_same_size_us") or not best.get("median_us"):
        return "-"
    return f"{100 * row['copy_same_size_us'] / best['median_us']:.1f}"


def _shape(row: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in row["shape"].items())


def _label(method: str | None) -> str:
    return "-" if method is None else METHODS.get(method, method)


def _device_table(rows: list[dict], present: list[str]) -> list[str]:
    head = " | ".join(f"{_label(m)} us" for m in present)
    lines = [
        f"| shape | dtype | MB | {head} | strongest anchor | vs strongest | best GB/s | best % copy | "
        "same-size copy us | best % same-size copy |",
        "|---|---|---|" + "---|" * len(present) + "---|---|---|---|---|---|",
    ]
    for r in rows:
        best = r["methods"].get("best")
        strongest = strongest_anchor(r)
        lines.append(
            f"| {_shape(r)} | {r['dtype']} | {(r.get('bytes') or 0) / 1e6:.3g} | "
            + " | ".join(_cell(r["methods"].get(m)) for m in present)
            + f" | {_label(strongest)} | {_times(speedup([r], 'strongest'))} | "
            + f"{_cell(best, 'gbps', '.0f')} | {_cell(best, 'roofline_pct')} | "
            + f"{_cell(r, 'copy_same_size_us')} | {_same_size_pct(r)} |"
        )
    return lines


def _user_table(rows: list[dict], present: list[str]) -> list[str]:
    head = " | ".join(f"{_label(m)} us" for m in present)
    lines = [
        f"| shape | dtype | {head} | strongest anchor | vs strongest |",
        "|---|---|" + "---|" * len(present) + "---|---|",
    ]
    for r in rows:
        strongest = strongest_anchor(r, "user_us")
        lines.append(
            f"| {_shape(r)} | {r['dtype']} | "
            + " | ".join(_cell(r["methods"].get(m), "user_us") for m in present)
            + f" | {_label(strongest)} | {_times(speedup([r], 'strongest', 'user_us'))} |"
        )
    return lines


def _each_table(rows: list[dict], anchors: list[str]) -> list[str]:
    """Our best's speedup over every anchor, device / user's clock."""
    lines = [
        "| shape | dtype | " + " | ".join(f"vs {_label(m)}" for m in anchors) + " |",
        "|---|---|" + "---|" * len(anchors),
    ]
    for r in rows:
        cells = [f"{_times(speedup([r], m))} / {_times(speedup([r], m, 'user_us'))}" for m in anchors]
        lines.append(f"| {_shape(r)} | {r['dtype']} | " + " | ".join(cells) + " |")
    return lines


def _geomeans(rows: list[dict], present: list[str]) -> list[str]:
    lines = []
    for clock, key in CLOCK_KEYS.items():
        each = {m: speedup(rows, m, key) for m in present if m != "best"}
        if all(v is None for v in each.values()):
            continue  # our best was not timed
        lines.append(
            f"- {clock} clock, geomean speedup of our best over the strongest anchor "
            f"{_times(speedup(rows, 'strongest', key))}; over each: "
            + ", ".join(f"{_label(m)} {v:.2f}x" for m, v in each.items() if v is not None)
        )
    return lines


def _refusals(rows: list[dict]) -> list[str]:
    return [
        f"- {_label(m)} refused {_shape(r)} {r['dtype']}: {rec['refused']}"
        for r in rows
        for m, rec in r["methods"].items()
        if "refused" in (rec or {})
    ]


def _task_facts(t: dict[str, Any]) -> list[str]:
    s, e = t.get("search") or {}, t.get("export") or {}
    lines = []
    if t.get("rows"):
        libraries = "".join(f", {name} {v}" for name, v in (t.get("libraries") or {}).items())
        partial = " (partial: the time stage did not finish)" if t.get("partial") else ""
        lines.append(
            f"- measured {t.get('date')} on {t.get('gpu')} (torch {t.get('torch')}, triton "
            f"{t.get('triton')}{libraries}); copy bandwidth {t.get('copy_gbps') or 0:.0f} GB/s{partial}"
        )
        if "compilers" not in t:
            lines.append(
                "- **timed before torch.compile was compiled per shape**: its torch.compile columns are "
                "one compile called over every shape (dynamic after the second), and it has no user's clock"
            )
    if s:
        facts = [
            f"{s['rounds']} rounds" if s.get("rounds") is not None else "",
            f"{s['candidates_evaluated']} candidates" if s.get("candidates_evaluated") is not None else "",
            f"{s['wall_s']:.0f} s" if s.get("wall_s") is not None else "",
            _pauses(s),
            f"run folder `{s['run_dir']}`" if s.get("run_dir") else "",
        ]
        why = f" ({s['reason']})" if s.get("reason") else ""
        lines.append(f"- search: {s.get('status')}{why}; " + ", ".join(f for f in facts if f))
    if e.get("error"):
        lines.append(f"- export failed: {e['error']}")
    elif e:
        why = f" ({e['reason']})" if e.get("reason") else ""
        lines.append(
            f"- our best: `{e.get('path')}`, {e.get('dispatch')}: {e.get('module')} "
            f"`{json.dumps(e.get('config'))}`{why}"
        )
    return lines


def _task_tables(rows: list[dict]) -> list[str]:
    rows = sorted(rows, key=lambda r: (r.get("bytes") or 0, json.dumps(r["shape"])))
    known = [m for m in METHODS if any(r["methods"].get(m) for r in rows)]
    present = known + sorted({m for r in rows for m in r["methods"]} - set(known))
    anchors = [m for m in present if m not in OURS]
    lines = ["", "Device clock:", "", *_device_table(rows, present)]
    lines += ["", "User's clock:", "", *_user_table(rows, present)]
    lines += ["", "Our best over each anchor (device / user's clock):", "", *_each_table(rows, anchors)]
    lines += ["", *_geomeans(rows, present)]
    refused = _refusals(rows)
    return lines + (["", "Refused:", *refused] if refused else [])


def markdown(report: dict[str, Any]) -> str:
    lines = ["# Benchmark suite", "", INTRO, "", "![roofline](roofline.png)", ""]
    for name, t in report["tasks"].items():
        lines += [f"## {name}", "", *_task_facts(t)]
        if t.get("rows"):
            lines += _task_tables(t["rows"])
        lines += ["", "| acceptance | value | target | met |", "|---|---|---|---|"]
        for c in check_acceptance(name, t):
            value = "-" if c["value"] is None else f"{c['value']:.2f}"
            met = "not measured" if c["met"] is None else ("yes" if c["met"] else "**no**")
            lines.append(f"| {c['what']} | {value} | {c['target']:g} | {met} |")
        lines.append("")
    return "\n".join(lines)


def write_outputs(report: dict[str, Any], out: Path) -> None:
    (out / "suite.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "suite.md").write_text(markdown(report))
    if any(t.get("rows") for t in report["tasks"].values()):
        plot_roofline(report, out / "roofline.png")


def _pauses(search: dict[str, Any]) -> str:
    """How often an unattended search paused and what the policy answered (runs before the unattended
    mode counted the 'continue' answers the suite gave)."""
    pauses = search.get("pauses") or []
    if pauses:
        answers = ", ".join(p["answer"].split(" ", 1)[0] for p in pauses)
        return f"paused {len(pauses)} time(s), answered by the unattended policy ({answers})"
    if search.get("answered_continue"):
        return f"paused {search['answered_continue']} time(s) for a human, answered 'continue' (unattended)"
    return ""
