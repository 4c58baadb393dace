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

from loop.records import Attempt, Review, ShapeRow, Stop
from loop.scoring import judged_at
from loop.state import RunState
from loop.ties import tied_with
from memory.artifacts import ArtifactError, index_run
from nodes.audit import read_trail
from nodes.case_memory import cases_of_run, library_for_run
from nodes.llm.accounting import collect as collect_accounting
from nodes.runtime import module_source
from nodes.step import Step, Update, node
from tools.dispatch import shape_label, table_wins
from tools.export import export_to_run
from tools.run_folder import PROGRESS, REPORT_JSON, REPORT_MD
from tools.sandbox import describe as sandbox_description
from tools.task import Target, meets_min_dims

INTERPRETED_NOTE = (
    "Timings are Triton-interpreter wall times on the CPU: usable to rank candidates, never a speed claim."
)


SUMMARY_KEYS = {
    "n", "module", "config", "origin", "geomean_us", "roofline_pct", "candidate", "result", "rationale",
    "approved_by",  # set when a human approved a candidate held for review
    "round", "expected_effect", "interpreted",
}  # fmt: skip
ATTEMPT_KEYS = {
    "n", "round", "identity", "module", "config", "origin", "verdict", "stage", "error_type", "message",
    "geomean_us", "roofline_pct", "rationale", "expected_effect", "candidate", "result", "cached", "worker",
}  # fmt: skip


def _summary(a: Attempt) -> dict[str, Any]:
    return a.model_dump(mode="json", include=SUMMARY_KEYS)


def _per_shape(baseline: Attempt, best: Attempt, anchors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    base = {(json.dumps(r.shape, sort_keys=True), r.dtype): r for r in baseline.per_shape}
    anchored = {(json.dumps(a["shape"], sort_keys=True), a["dtype"]): a for a in anchors}
    rows = []
    for r in best.per_shape:
        key = (json.dumps(r.shape, sort_keys=True), r.dtype)
        b = base.get(key)
        b_us = b.median_us if b else None
        anchor = anchored.get(key, {})
        rows.append(
            {
                "shape": r.shape,
                "dtype": r.dtype,
                "baseline_us": b_us,
                "best_us": r.median_us,
                "speedup": round(b_us / r.median_us, 3) if b_us and r.median_us else None,
                "best_gbps": r.gbps,
                "best_roofline_pct": r.roofline_pct,
                "baseline_roofline_pct": b.roofline_pct if b else None,
                # the reference timed by the judge on the same GPU: eager and a static torch.compile (us)
                "anchors": {k: anchor[k].get("median_us") for k in ("eager", "compile") if k in anchor},
                "best_ceiling_pct": r.ceiling_pct,
                "baseline_ceiling_pct": b.ceiling_pct if b else None,
            }
        )
    return rows


def _versus_anchors(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Geomean of anchor time / best time over the shapes where both were timed, per anchor."""
    out: dict[str, float | None] = {}
    for name in ("eager", "compile"):
        ratios = [r["anchors"][name] / r["best_us"] for r in rows if r["anchors"].get(name) and r["best_us"]]
        out[name] = round(math.exp(sum(math.log(x) for x in ratios) / len(ratios)), 4) if ratios else None
    return out


def _evaluation(state: RunState) -> dict[str, Any]:
    """Where the candidates were judged: each worker (and its GPU) and how many it judged."""
    workers: dict[str, int] = {}
    for a in state.attempts:
        if a.worker:
            workers[a.worker] = workers.get(a.worker, 0) + 1
    return {"workers": [{"worker": w, "attempts": n} for w, n in sorted(workers.items())]}


def _target_summary(target: Target, shapes: list[dict[str, int]]) -> dict[str, Any]:
    """The task's target plus ``judged_at``: the shapes its roofline_pct is judged at (target.min_dims),
    in words and (``judged_shapes``) as the task's timed shapes that qualify."""
    if not target.roofline_pct:
        return {**target.model_dump(), "judged_at": None, "judged_shapes": []}
    judged = [shape_label(s) for s in shapes if meets_min_dims(s, target.min_dims)]
    return {**target.model_dump(), "judged_at": judged_at(target.min_dims), "judged_shapes": judged}


def _attempts(state: RunState) -> list[dict[str, Any]]:
    ties = {a.n for a in tied_with(state.best, state.attempts)}
    return [
        a.model_dump(mode="json", include=ATTEMPT_KEYS)
        | {"critique": {"objections": a.objections, "answers": a.answers}, "tied_with_best": a.n in ties}
        for a in state.attempts
    ]


def _rejected(reviews: list[Review]) -> list[dict[str, Any]]:
    return [
        {
            "module": r.proposal.module,
            "config": r.proposal.config,
            "origin": r.origin,
            "rationale": r.proposal.rationale,
            "objections": r.objections,
        }
        for r in reviews
    ]


def build_report(
    state: RunState, status: str, reason: str, *, target: Target, active_s: float, run_dir: str,
    memory: dict[str, Any] | None = None, paused: dict[str, Any] | None = None,
    shapes: list[dict[str, int]] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """report.json: the run's outcome, every attempt, and what the run was set up with."""
    baseline, best = state.baseline, state.best
    memory = state.memory if memory is None else memory
    return {
        "task": state.task,
        "task_name": state.task_name,
        "status": status,
        "reason": reason,
        "target": _target_summary(target, shapes or []),
        "device": {"kind": state.device, "name": best.device_name, "interpreted": best.interpreted},
        "note": INTERPRETED_NOTE if best.interpreted else "",
        "baseline": _summary(baseline),
        "best": _summary(best) | {"tied_with": [a.n for a in tied_with(best, state.attempts)]},
        "speedup": round(baseline.geomean_us / best.geomean_us, 4)
        if best.geomean_us and baseline.geomean_us
        else None,
        "per_shape": (per_shape := _per_shape(baseline, best, state.anchors)),
        "speedup_vs": _versus_anchors(per_shape),
        "evaluation": _evaluation(state),
        "rounds": state.rounds_done,
        "candidates_evaluated": sum(1 for a in state.attempts if a.round > 0),
        "wall_s": round(time.time() - state.started_at, 1),
        "active_s": round(active_s, 1),
        "model": state.model,
        "critic_model": state.critic_model or state.model,
        "seed": state.seed,
        "attempts": _attempts(state),
        "rejected_proposals": _rejected(state.rejected),
        "retrieved_cases": state.retrieved_cases,
        "memory": {"cases_added": 0, **(memory or {"enabled": False, "reason": "not recorded"})},
        "cache_hits": sum(1 for a in state.attempts if a.cached),
        "profiler": state.profiler,
        "search_spaces": state.search_spaces,
        "forbid": state.forbid,
        "settings": state.settings.model_dump(mode="json"),
        "paused": paused,
        "pauses": [p.model_dump(mode="json") for p in state.pauses],
        "run_dir": run_dir,
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


def target_line(target: dict[str, Any] | None, interpreted: bool) -> str:
    """The target in words, with the task's shapes a roofline target is judged at."""
    if target is None:
        return "not recorded"
    parts = []
    if target.get("speedup"):
        parts.append(f"{target['speedup']:g}x the baseline (geomean)")
    if target.get("roofline_pct"):
        shapes = ", ".join(target.get("judged_shapes") or [])
        parts.append(
            f"{target['roofline_pct']:g}% of the same-size ceiling at every judged shape, judged at "
            f"{judged_at(target.get('min_dims'))} ({shapes or 'no shape of this run'}; the lowest counts)"
        )
    text = " or ".join(parts) or "none (the budget ends the run)"
    if parts and interpreted:
        text += "; not judged here: interpreted timings never meet a target"
    return text


def device_line(device: dict[str, Any]) -> str:
    """"cpu (Triton interpreter)", "cuda (NVIDIA H200)": the kind, and the name when it adds something."""
    name, kind = device.get("name") or "", device.get("kind") or "?"
    return name if name.startswith(kind) else f"{kind} ({name})" if name else kind


def render_markdown(report: dict[str, Any], trail: list[dict[str, Any]]) -> str:
    """report.md: the report.json in words, with the audit trail."""
    lines = _head(report) + what_won(report, trail) + _pauses(report)
    lines += _per_shape_table(report) + _tried_table(report)
    lines += ["", "## Audit trail", ""]
    lines += [f"- r{e.get('round')} {e.get('node')}: {e.get('message')}" for e in trail]
    return "\n".join(lines) + "\n"


def _head(report: dict[str, Any]) -> list[str]:
    best, baseline, memory = report["best"], report["baseline"], report["memory"]
    approved = (
        f"; held for review as a suspicious speedup and approved by a {best['approved_by']}"
        if best.get("approved_by")
        else ""
    )
    interpreted = " (interpreted: a ranking, not a speed claim)" if report["device"]["interpreted"] else ""
    lines = [
        f"# {report['task_name']}: {report['status']}",
        "",
        f"- reason: {report['reason']}",
        f"- target: {target_line(report.get('target'), report['device']['interpreted'])}",
        f"- device: {device_line(report['device'])}",
        f"- baseline: {baseline['module']} {baseline['config']}: {_fmt(baseline['geomean_us'])} us geomean",
        f"- best: #{best['n']} {best['module']} {best['config']}: {_fmt(best['geomean_us'])} us geomean "
        f"({best['candidate']}){approved}",
        f"- speedup over the baseline: {_fmt(report['speedup'], 3)}x{interpreted}",
        f"- rounds: {report['rounds']}, candidates evaluated: {report['candidates_evaluated']}, "
        f"wall time: {report['wall_s']:.0f} s (active {report['active_s']:.0f} s)",
        f"- proposer: {report['model']}, critic: {report['critic_model']}, seed {report['seed']}",
        f"- memory: {memory_line(memory, report['cache_hits'])}",
    ]
    if report.get("resumed"):
        at = ", ".join(f"r{e['round']}" for e in report["resumed"])
        lines.append(f"- stopped mid-step and resumed {len(report['resumed'])} time(s) (after rounds: {at})")
    if report["note"]:
        lines += ["", f"> {report['note']}"]
    if report["paused"]:
        lines += [
            "",
            "## Waiting for a decision",
            "",
            f"Paused: {report['paused']['why']}. Resume with "
            f"`python -m graph.run --resume {report['run_dir']} --answer 'continue|stop|widen K=V|...'`.",
        ]
    return lines


def what_won(report: dict[str, Any], trail: list[dict[str, Any]]) -> list[str]:
    """Why the best won: by how much, at which shapes, what the diagnosis before it said and expected."""
    best, lines = report["best"], ["", "## What won", ""]
    ties = ", ".join(f"#{n}" for n in best.get("tied_with") or [])
    tie_line = [f"- tied with {ties}: the interpreter cannot tell them apart (within its noise), so "
                "neither ranks above the other"] if ties else []  # fmt: skip
    if best.get("origin") == "baseline":
        return lines + ["The baseline: nothing beat it."] + tie_line
    claim = " (interpreted: a ranking, not a speed claim)" if report["device"]["interpreted"] else ""
    lines.append(
        f"#{best['n']} {best['module']} {best['config']} ({best['origin']}, round {best['round']}): "
        f"{_fmt(report['speedup'], 3)}x the baseline's geomean{claim}."
    )
    rows = [r for r in report["per_shape"] if r.get("speedup")]
    faster = [f"{shape_label(r['shape'])} {r['dtype']} {r['speedup']:.2f}x" for r in rows if r["speedup"] > 1]
    slower = [f"{shape_label(r['shape'])} {r['dtype']} {r['speedup']:.2f}x" for r in rows if r["speedup"] <= 1]
    if faster:
        lines.append(f"- faster at {', '.join(faster)}")
    if slower:
        lines.append(f"- not faster at {', '.join(slower)}")
    diagnosis = next((e["message"] for e in trail if e.get("node") == "diagnose" and e.get("round") == best["round"]
                      and "diagnosis" in e), None)  # fmt: skip
    if diagnosis:
        expected = f"; it was expected to give: {best['expected_effect']}" if best.get("expected_effect") else ""
        lines.append(f"- the diagnosis of round {best['round']}: {diagnosis}{expected}")
    if best.get("rationale"):
        lines.append(f"- proposed as: {best['rationale']}")
    return lines + tie_line


def _pauses(report: dict[str, Any]) -> list[str]:
    if not report.get("pauses"):
        return []
    lines = ["", "## Pauses", ""]
    for p in report["pauses"]:
        who = "the unattended policy" if p["by"] == "policy" else "the human"
        lines.append(f"- after round {p['round']}: {p['why']} -> {who} answered {p['answer']}")
    return lines


def _per_shape_table(report: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## Per shape",
        "",
        "| shape | dtype | baseline us | best us | speedup | best GB/s | best % of copy bandwidth "
        "| best % of same-size ceiling |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report["per_shape"]:
        lines.append(
            f"| {shape_label(r['shape'])} | {r['dtype']} | {_fmt(r['baseline_us'])} | {_fmt(r['best_us'])} | "
            f"{_fmt(r['speedup'], 3)} | {_fmt(r['best_gbps'], 0)} | {_fmt(r['best_roofline_pct'], 1)} | "
            f"{_fmt(r.get('best_ceiling_pct'), 1)} |"
        )
    return lines


def _tried_table(report: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## What was tried",
        "",
        "| # | round | module | config | origin | verdict | us | why | critique |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for a in report["attempts"]:
        verdict = a["verdict"] if a["verdict"] == "pass" else f"{a['verdict']} ({a['error_type']})"
        if a.get("tied_with_best"):
            verdict += ", tied with the best"
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
    return lines


def plot_progress(state: RunState, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    progress, best = state.progress, state.best
    baseline_us = state.baseline.geomean_us or 0.0
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.step([p.round for p in progress], [p.best_us for p in progress], where="post", label="best so far")
    table = [(p.round, p.table_us) for p in progress if p.table_us]
    if any(p.table_us and p.best_us and table_wins(p.table_us, p.best_us) for p in progress):
        # The per-shape table (each shape's fastest config) is what export hands back when it beats the
        # best by more than tools.dispatch's threshold.
        ax.step(*zip(*table, strict=True), where="post", color="tab:purple", label="per-shape table so far")
    tried = [(p.round, p.round_best_us) for p in progress if p.round_best_us]
    if tried:
        ax.scatter(*zip(*tried, strict=True), s=14, color="gray", label="best of the round", zorder=3)
    ax.axhline(baseline_us, color="tab:red", linestyle="--", label=f"baseline {baseline_us:.1f} us")
    floor = roofline_floor(best.per_shape)
    if floor:
        ax.axhline(floor, color="tab:green", linestyle=":", label=f"roofline floor {floor:.1f} us")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_ylabel("geomean time (us)" + (", Triton interpreter" if best.interpreted else ""))
    ax.set_title(
        f"{state.task_name}: best time per round"
        + (" (interpreted: no speed claim)" if best.interpreted else "")
    )
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def roofline_floor(per_shape: list[ShapeRow]) -> float | None:
    """Geomean of each shape's time at 100% of the roofline (time x roofline %), when every shape has one."""
    floors = [(r.median_us or 0.0) * r.roofline_pct / 100 for r in per_shape if r.roofline_pct]
    if not floors or len(floors) != len(per_shape):
        return None
    return math.exp(sum(math.log(f) for f in floors) / len(floors))


def write_report(
    step: Step,
    status: str,
    reason: str = "",
    *,
    paused: dict[str, Any] | None = None,
    exported: dict[str, Any] | None = None,
    accounting: dict[str, Any] | None = None,
    memory: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """report.json, report.md and progress.png in the run folder, the run as it stands now."""
    state, folder = step.run, step.folder
    report = build_report(
        state, status, reason or (paused or {}).get("why", ""), target=step.task.spec.target,
        active_s=state.active_s + step.elapsed(), run_dir=str(folder.root), memory=memory, paused=paused,
        shapes=step.task.spec.shapes,
    )  # fmt: skip
    trail = read_trail(folder)
    report["resumed"] = [{"t": e["t"], "round": e["round"], "message": e["message"]}
                         for e in trail if e.get("node") == "resume"]  # fmt: skip
    report["sandbox"] = sandbox_description(state.device)
    if accounting is not None:
        report["accounting"] = accounting  # tokens, latency, cost per LLM role (empty for the expert policy)
    extra_markdown = ""
    if exported is not None:
        report["export"] = {k: v for k, v in exported.items() if k != "markdown"}
        extra_markdown = _export_markdown(exported)
    folder.write(REPORT_JSON, json.dumps(report, indent=2, default=str))
    folder.write(REPORT_MD, render_markdown(report, trail) + extra_markdown)
    plot_progress(state, folder.path(PROGRESS))
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


@node("report")
def report(state: RunState, step: Step) -> Update:
    stop = state.stop or Stop(status="budget_exhausted", reason="ended")
    step.audit(f"{stop.status}: {stop.reason}")
    memory = remember_run(step)
    # the winner as RUN_DIR/kernel.py: the state's best (the watchdog's or a human-approved one)
    exported = export_to_run(step.task, step.folder.root, best=state.best.identity)
    step.audit(f"export: {exported.get('path') or exported.get('reason')}")
    accounting = collect_accounting(step.agents)
    write_report(step, stop.status, stop.reason, exported=exported, accounting=accounting, memory=memory)
    try:
        index_run(step.folder.root)
    except ArtifactError as exc:  # a run folder without candidates/ has nothing to index
        step.audit(f"run not indexed: {exc}")
    # A stop set on the way in (graph.run's stop of a run stopped mid-step) arrives in this very step.
    return {"memory": memory} if state.stop else {"stop": stop, "memory": memory}


def remember_run(step: Step) -> dict[str, Any]:
    """Store every evaluated candidate as a case (deduplicated by task + identity); the memory record
    with ``cases_added``. Never raises: a store that fails is reported, the run still ends well."""
    state = step.run
    memory = {**state.memory, "cases_added": 0}
    library, why = library_for_run(state)
    if library is None:
        if memory.get("enabled"):
            memory["store_error"] = why
            step.audit(f"cases not stored: {why}")
        return memory
    diagnoses = {
        e["round"]: {"diagnosis": e.get("diagnosis", ""), "snapshot": e.get("snapshot")}
        for e in read_trail(step.folder)
        if e.get("node") == "diagnose" and "diagnosis" in e
    }

    def module_text(module: str) -> str | None:
        try:
            return module_source(step.task, state, step.folder, module)
        except OSError:
            return None

    try:
        cases = cases_of_run(state, step.task, step.folder, diagnoses, module_text)
        memory["cases_added"] = library.add(cases)
    except Exception as exc:
        memory["store_error"] = f"{type(exc).__name__}: {exc}"
        step.audit(f"cases not stored: {memory['store_error']}")
        return memory
    step.audit(f"memory: {memory['cases_added']} new case(s) of {len(cases)} evaluated candidate(s) stored")
    return memory
