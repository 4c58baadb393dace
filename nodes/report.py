"""report: write report.json, report.md and progress.png into the run folder; remember the run.

At the end of a run every evaluated candidate becomes a case in the case library (when memory is on)
and the run folder is indexed (index.json) so a past best can be re-evaluated with one command.

Also written (status ``awaiting_human``) whenever the run pauses for a human, so a paused run has a
report too. Interpreted (CPU) timings are labelled as such everywhere: they rank, they claim nothing.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from graph.routing import finish, judged_at
from memory.artifacts import ArtifactError, index_run
from nodes.audit import audit, read_trail
from nodes.case_memory import cases_of_run, library_for_run
from nodes.llm.accounting import collect as collect_accounting
from nodes.runtime import RunContext, agents_for, module_source, run_task
from tools.dispatch import shape_label, table_wins
from tools.export import export_to_run
from tools.sandbox import describe as sandbox_description
from tools.task import Task, meets_min_dims

INTERPRETED_NOTE = (
    "Timings are Triton-interpreter wall times on the CPU: usable to rank candidates, never a speed claim."
)


def _summary(a: dict[str, Any] | None) -> dict[str, Any] | None:
    if not a:
        return None
    keys = (
        "n",
        "module",
        "config",
        "origin",
        "geomean_us",
        "roofline_pct",
        "candidate",
        "result",
        "rationale",
        "approved_by",  # set when a human approved a candidate held for review
    )
    return {k: a.get(k) for k in keys}


def _per_shape(baseline: dict[str, Any], best: dict[str, Any]) -> list[dict[str, Any]]:
    base = {(json.dumps(r["shape"], sort_keys=True), r["dtype"]): r for r in baseline.get("per_shape", [])}
    rows = []
    for r in best.get("per_shape", []):
        b = base.get((json.dumps(r["shape"], sort_keys=True), r["dtype"]), {})
        rows.append(
            {
                "shape": r["shape"],
                "dtype": r["dtype"],
                "baseline_us": b.get("median_us"),
                "best_us": r["median_us"],
                "speedup": round(b["median_us"] / r["median_us"], 3)
                if b.get("median_us") and r["median_us"]
                else None,
                "best_gbps": r.get("gbps"),
                "best_roofline_pct": r.get("roofline_pct"),
                "baseline_roofline_pct": b.get("roofline_pct"),
            }
        )
    return rows


def _target_summary(target: dict[str, Any] | None) -> dict[str, Any] | None:
    """The task's target plus ``judged_at``: the shapes its roofline_pct is judged at (target.min_dims)."""
    if target is None:
        return None
    return {**target, "judged_at": judged_at(target.get("min_dims")) if target.get("roofline_pct") else None}


def build_report(
    state: dict[str, Any],
    status: str,
    reason: str,
    paused: dict | None = None,
    target: dict[str, Any] | None = None,
) -> dict[str, Any]:
    baseline, best = state["baseline"], state["best"]
    interpreted = bool(best.get("interpreted"))
    attempts = [
        {
            k: a.get(k)
            for k in (
                "n",
                "round",
                "identity",
                "module",
                "config",
                "origin",
                "verdict",
                "stage",
                "error_type",
                "message",
                "geomean_us",
                "roofline_pct",
                "rationale",
                "expected_effect",
                "candidate",
                "result",
                "cached",
            )
        }
        | {"critique": {"objections": a.get("objections", []), "answers": a.get("answers", [])}}
        for a in state.get("attempts", [])
    ]
    return {
        "task": state["task"],
        "task_name": state["task_name"],
        "status": status,
        "reason": reason,
        "target": _target_summary(target),
        "device": {"kind": state["device"], "name": best.get("device_name"), "interpreted": interpreted},
        "note": INTERPRETED_NOTE if interpreted else "",
        "baseline": _summary(baseline),
        "best": _summary(best),
        "speedup": round(baseline["geomean_us"] / best["geomean_us"], 4) if best.get("geomean_us") else None,
        "per_shape": _per_shape(baseline, best),
        "rounds": state.get("rounds_done", 0),
        "candidates_evaluated": sum(1 for a in state.get("attempts", []) if a["round"] > 0),
        "wall_s": round(time.time() - state["started_at"], 1),
        "active_s": round(state.get("active_s", 0.0), 1),
        "model": state.get("model"),
        "critic_model": state.get("critic_model") or state.get("model"),
        "seed": state.get("seed", 0),
        "attempts": attempts,
        "rejected_proposals": [
            {
                "module": r["proposal"]["module"],
                "config": r["proposal"]["config"],
                "origin": r.get("origin"),
                "rationale": r["proposal"]["rationale"],
                "objections": r["objections"],
            }
            for r in state.get("rejected", [])
        ],
        "retrieved_cases": state.get("retrieved_cases", []),
        "memory": {"cases_added": 0, **state.get("memory", {"enabled": False, "reason": "not recorded"})},
        "cache_hits": sum(1 for a in state.get("attempts", []) if a.get("cached")),
        "profiler": state.get("profiler", {}),
        "search_spaces": state.get("search_spaces"),
        "forbid": state.get("forbid"),
        "settings": state.get("settings"),
        "paused": paused,
        "run_dir": state["run_dir"],
    }


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def memory_line(memory: dict[str, Any], cache_hits: int) -> str:
    cache = memory.get("validation_cache") or {}
    cache_text = (
        f"validation cache served {cache_hits} candidate(s)"
        if cache.get("enabled")
        else f"validation cache off ({cache.get('reason') or 'not recorded'})"
    )
    if not memory.get("enabled"):
        return f"off ({memory.get('reason', '')}); {cache_text}"
    skipped = len(memory.get("skipped_cases") or {})
    outside = f", {skipped} retrieved config(s) outside this space" if skipped else ""
    return (
        f"on ({memory.get('cases_at_start', 0)} cases at the start, "
        f"{memory.get('cases_added', 0)} added{outside}); {cache_text}"
    )


def target_line(target: dict[str, Any] | None, per_shape: list[dict[str, Any]]) -> str:
    """The target in words, with the shapes a roofline target is judged at."""
    if target is None:
        return "not recorded"
    parts = []
    if target.get("speedup"):
        parts.append(f"{target['speedup']:g}x the baseline (geomean)")
    if target.get("roofline_pct"):
        min_dims = target.get("min_dims")
        shapes = []
        for r in per_shape:
            shape = shape_label(r["shape"])
            if meets_min_dims(r["shape"], min_dims) and shape not in shapes:
                shapes.append(shape)
        parts.append(
            f"{target['roofline_pct']:g}% of the roofline at every judged shape, judged at "
            f"{judged_at(min_dims)} ({', '.join(shapes) or 'no shape of this run'}; the lowest counts)"
        )
    return " or ".join(parts) or "none (the budget ends the run)"


def render_markdown(report: dict[str, Any], trail: list[dict[str, Any]]) -> str:
    best, baseline, memory = report["best"], report["baseline"], report["memory"]
    lines = [
        f"# {report['task_name']}: {report['status']}",
        "",
        f"- reason: {report['reason']}",
        f"- target: {target_line(report.get('target'), report['per_shape'])}",
        f"- device: {report['device']['kind']} ({report['device']['name']})",
        f"- baseline: {baseline['module']} {baseline['config']}: {_fmt(baseline['geomean_us'])} us geomean",
        f"- best: #{best['n']} {best['module']} {best['config']}: {_fmt(best['geomean_us'])} us geomean "
        f"({best['candidate']})"
        + (
            f"; held for review as a suspicious speedup and approved by a {best['approved_by']}"
            if best.get("approved_by")
            else ""
        ),
        f"- speedup over the baseline: {_fmt(report['speedup'], 3)}x"
        + (" (interpreted: a ranking, not a speed claim)" if report["device"]["interpreted"] else ""),
        f"- rounds: {report['rounds']}, candidates evaluated: {report['candidates_evaluated']}, "
        f"wall time: {report['wall_s']:.0f} s (active {report['active_s']:.0f} s)",
        f"- proposer: {report['model']}, critic: {report['critic_model']}, seed {report['seed']}",
        f"- memory: {memory_line(memory, report['cache_hits'])}",
    ]
    if report["note"]:
        lines += ["", f"> {report['note']}"]
    if report["paused"]:
        p = report["paused"]
        lines += [
            "",
            "## Waiting for a decision",
            "",
            f"Paused: {p['why']}. Resume with "
            f"`python -m graph.run --resume {report['run_dir']} --answer 'continue|stop|widen K=V|...'`.",
        ]
    lines += ["", "## What won", "", best.get("rationale") or "the baseline (nothing beat it)"]
    lines += [
        "",
        "## Per shape",
        "",
        "| shape | dtype | baseline us | best us | speedup | best GB/s | best % roofline |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["per_shape"]:
        shape = shape_label(r["shape"])
        lines.append(
            f"| {shape} | {r['dtype']} | {_fmt(r['baseline_us'])} | {_fmt(r['best_us'])} | "
            f"{_fmt(r['speedup'], 3)} | "
            f"{_fmt(r['best_gbps'], 0)} | {_fmt(r['best_roofline_pct'], 1)} |"
        )
    lines += [
        "",
        "## What was tried",
        "",
        "| # | round | module | config | origin | verdict | us | why | critique |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for a in report["attempts"]:
        verdict = a["verdict"] if a["verdict"] == "pass" else f"{a['verdict']} ({a['error_type']})"
        crit = "; ".join(a["critique"]["objections"] + a["critique"]["answers"])
        lines.append(
            f"| {a['n']} | {a['round']} | {a['module']} | `{json.dumps(a['config'])}` | {a['origin']} | "
            f"{verdict} | {_fmt(a['geomean_us'])} | {(a['rationale'] or '').replace('|', '/')} | "
            f"{crit.replace('|', '/')} |"
        )
    if report["rejected_proposals"]:
        lines += ["", "## Rejected before evaluation", ""]
        for r in report["rejected_proposals"]:
            lines.append(f"- {r['module']} `{json.dumps(r['config'])}`: {'; '.join(r['objections'])}")
    lines += ["", "## Audit trail", ""]
    lines += [f"- r{e.get('round')} {e.get('node')}: {e.get('message')}" for e in trail]
    return "\n".join(lines) + "\n"


def plot_progress(state: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    progress = state.get("progress", [])
    baseline_us = state["baseline"]["geomean_us"]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.step(
        [p["round"] for p in progress], [p["best_us"] for p in progress], where="post", label="best so far"
    )
    table = [(p["round"], p["table_us"]) for p in progress if p.get("table_us")]
    if any(p.get("table_us") and table_wins(p["table_us"], p["best_us"]) for p in progress):
        # The per-shape table (each shape's fastest config) is what export hands back when it beats the
        # best by more than tools.dispatch's threshold.
        ax.step(*zip(*table, strict=True), where="post", color="tab:purple", label="per-shape table so far")
    tried = [(p["round"], p["round_best_us"]) for p in progress if p.get("round_best_us")]
    if tried:
        ax.scatter(*zip(*tried, strict=True), s=14, color="gray", label="best of the round", zorder=3)
    ax.axhline(baseline_us, color="tab:red", linestyle="--", label=f"baseline {baseline_us:.1f} us")
    floor = roofline_floor(state["best"].get("per_shape", []))
    if floor:
        ax.axhline(floor, color="tab:green", linestyle=":", label=f"roofline floor {floor:.1f} us")
    interpreted = state["best"].get("interpreted")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_ylabel("geomean time (us)" + (", Triton interpreter" if interpreted else ""))
    ax.set_title(
        f"{state['task_name']}: best time per round"
        + (" (interpreted: no speed claim)" if interpreted else "")
    )
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def roofline_floor(per_shape: list[dict[str, Any]]) -> float | None:
    """Geomean of each shape's time at 100% of the roofline (time x roofline %), when every shape has one."""
    floors = [r["median_us"] * r["roofline_pct"] / 100 for r in per_shape if r.get("roofline_pct")]
    if not floors or len(floors) != len(per_shape):
        return None
    return math.exp(sum(math.log(f) for f in floors) / len(floors))


def write_report(
    state: dict[str, Any],
    status: str,
    reason: str = "",
    paused: dict | None = None,
    exported: dict[str, Any] | None = None,
    accounting: dict[str, Any] | None = None,
    target: dict[str, Any] | None = None,
) -> dict[str, Any]:
    run_dir = Path(state["run_dir"])
    report = build_report(state, status, reason or (paused or {}).get("why", ""), paused, target)
    report["sandbox"] = sandbox_description(state["device"])
    if accounting is not None:
        report["accounting"] = accounting  # tokens, latency, cost per LLM role (empty for the expert policy)
    extra_markdown = ""
    if exported is not None:
        report["export"] = {k: v for k, v in exported.items() if k != "markdown"}
        extra_markdown = _export_markdown(exported)
    (run_dir / "report.json").write_text(json.dumps(report, indent=2, default=str))
    (run_dir / "report.md").write_text(render_markdown(report, read_trail(run_dir)) + extra_markdown)
    plot_progress(state, run_dir / "progress.png")
    return report


def _export_markdown(exported: dict[str, Any]) -> str:
    if not exported.get("path"):
        return f"\n## Take-home kernel\n\nNot exported: {exported.get('reason', 'nothing to export')}\n"
    lines = [
        "",
        "## Take-home kernel",
        "",
        f"`{exported['path']}`: a standalone module (torch + triton only). {exported.get('reason', '')}".rstrip(),
    ]
    if exported.get("markdown"):
        lines += ["", exported["markdown"]]
    return "\n".join(lines) + "\n"


def report(state: dict[str, Any], runtime: Runtime[RunContext]) -> dict[str, Any]:
    started = time.monotonic()
    task = run_task(state)
    target = task.spec.target.model_dump()
    done = finish(state, target) or {"status": "budget_exhausted", "reason": "ended"}
    audit(state["run_dir"], "report", f"{done['status']}: {done['reason']}", round=state["round"])
    memory = remember_run(state, task)
    state = {**state, "memory": memory, "active_s": state.get("active_s", 0.0) + (time.monotonic() - started)}
    # the winner as RUN_DIR/kernel.py: the state's best (the watchdog's or a human-approved one)
    exported = export_to_run(task, state["run_dir"], best=state["best"]["identity"])
    audit(
        state["run_dir"],
        "report",
        f"export: {exported.get('path') or exported.get('reason')}",
        round=state["round"],
    )
    accounting = collect_accounting(agents_for(state, runtime))
    write_report(
        state, done["status"], done["reason"], exported=exported, accounting=accounting, target=target
    )
    try:
        index_run(state["run_dir"])
    except ArtifactError as exc:  # a run folder without candidates/ has nothing to index
        audit(state["run_dir"], "report", f"run not indexed: {exc}", round=state["round"])
    return {"stop": done, "memory": memory, "active_s": time.monotonic() - started}


def remember_run(state: dict[str, Any], task: Task) -> dict[str, Any]:
    """Store every evaluated candidate as a case (deduplicated by task + identity); the memory record
    with ``cases_added``. Never raises: a store that fails is reported, the run still ends well."""
    memory = {**state.get("memory", {}), "cases_added": 0}
    library, why = library_for_run(state)
    if library is None:
        if memory.get("enabled"):
            memory["store_error"] = why
            audit(state["run_dir"], "report", f"cases not stored: {why}", round=state["round"])
        return memory
    run_dir = state["run_dir"]
    diagnoses = {
        e["round"]: {"diagnosis": e.get("diagnosis", ""), "snapshot": e.get("snapshot")}
        for e in read_trail(run_dir)
        if e.get("node") == "diagnose" and "diagnosis" in e
    }

    def module_text(module: str) -> str | None:
        try:
            return module_source(task, state, module)
        except OSError:
            return None

    try:
        cases = cases_of_run(state, task, diagnoses, module_text)
        memory["cases_added"] = library.add(cases)
    except Exception as exc:
        memory["store_error"] = f"{type(exc).__name__}: {exc}"
        audit(run_dir, "report", f"cases not stored: {memory['store_error']}", round=state["round"])
        return memory
    audit(
        run_dir,
        "report",
        f"memory: {memory['cases_added']} new case(s) of {len(cases)} evaluated candidate(s) stored",
        round=state["round"],
    )
    return memory
