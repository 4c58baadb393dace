"""A snapshot without a profiler: what the evaluator's result (an EvalResult) already says.

Triton's resource report (registers, spills, shared memory), the launch grid against the SM count and
the achieved bandwidth against the roofline. Labelled ``"source": "derived"`` and classified with the
same labels where that evidence allows; otherwise a low-confidence ``latency_bound`` whose evidence
says what was missing. Interpreted (CPU) results ran on no GPU: their grid is never read against SMs.
"""

from __future__ import annotations

import math
from typing import Any

from profiles.classify import Verdict, load_thresholds


def _entry_for_shape(entries: list[dict], shape: dict | None) -> dict | None:
    if not entries:
        return None
    if shape is None:
        return entries[0]
    return next((e for e in entries if e.get("shape") == shape), None)


def _kernels_for_shape(resources: dict, shape: dict | None) -> tuple[list[dict], bool]:
    """The kernels launched at ``shape`` and whether their grids are that shape's (True) or another's."""
    kernels = resources.get("kernels") or []
    matching = [k for k in kernels if shape is not None and k.get("shape") == shape]
    if matching:
        return matching, True
    untagged = [k for k in kernels if k.get("shape") is None]
    return (untagged, True) if untagged else (kernels, False)


def _programs(kernel: dict) -> int | None:
    grid = kernel.get("grid")
    return math.prod(int(g) for g in grid) if grid else None


def derived_metrics(result: dict[str, Any], shape: dict | None, sm_count: int) -> tuple[dict, dict]:
    """(metrics, main kernel) from an EvalResult dict for one shape (None: the first timed shape)."""
    resources = result.get("resources") or {}
    timing = _entry_for_shape((result.get("metrics") or {}).get("per_shape") or [], shape)
    if shape is None and timing is not None:
        shape = timing.get("shape")
    kernels, grid_is_this_shape = _kernels_for_shape(resources, shape)
    # With several kernels per launch the one with the most programs carries the work.
    main = max(kernels, key=lambda k: _programs(k) or 0) if kernels else {}
    # A grid recorded at another shape (the evaluator's compile shape) says nothing about this one.
    programs = _programs(main) if grid_is_this_shape else None
    num_warps = main.get("num_warps", resources.get("num_warps"))
    interpreted = bool((result.get("device") or {}).get("interpreted"))
    if interpreted:  # the interpreter's tiny shapes run on no SM: a grid says nothing about a GPU here
        sm_count = None
    metrics: dict[str, Any] = {
        "shape": shape,
        "programs": programs,
        "grid_recorded_at": None if grid_is_this_shape or not main else main.get("shape"),
        "num_warps": num_warps,
        "sm_count": sm_count,
        "warps_per_sm": round(programs * num_warps / sm_count, 2)
        if programs and num_warps and sm_count
        else None,
        "registers_per_thread": main.get("n_regs", resources.get("n_regs")),
        "spilled_registers": main.get("n_spills", resources.get("n_spills")),
        "shared_bytes": main.get("shared_bytes", resources.get("shared_bytes")),
        "median_us": (timing or {}).get("median_us"),
        "gbps": (timing or {}).get("gbps"),
        "roofline_pct": (timing or {}).get("roofline_pct"),
        "method": (timing or {}).get("method"),
        "interpreted": interpreted,
        "kernels": [
            {"name": k.get("name"), "grid": k.get("grid"), "num_warps": k.get("num_warps")} for k in kernels
        ],
    }
    return metrics, main


def classify_derived(m: dict[str, Any], thresholds: dict[str, Any] | None = None) -> Verdict:
    """Bottleneck from resources, grid and roofline only (no hardware counters). Interpreted (CPU)
    metrics say nothing about a GPU: a low-confidence guess that says so, never a claim about SMs."""
    t = thresholds or load_thresholds()
    rule, sms = t["derived"], m.get("sm_count") or t["device"]["sm_count"]
    spills, roofline = m.get("spilled_registers"), m.get("roofline_pct")
    programs, warps_per_sm = m.get("programs"), m.get("warps_per_sm")
    if spills:  # a compiled kernel's own report: true wherever it was timed
        lines = [f"Triton reports {spills} spilled registers (local-memory traffic in the kernel)"]
        if m.get("registers_per_thread") is not None:
            lines.append(f"{m['registers_per_thread']} registers per thread")
        return Verdict(label="register_spills", confidence=rule["confidence_spills"], evidence=lines)
    if m.get("interpreted"):
        return _interpreted(m, rule)
    if roofline is not None and roofline >= rule["memory_bound_roofline_pct"]:
        lines = [
            f"achieved {roofline:.0f}% of the bandwidth roofline"
            + (f" ({m['gbps']:,.0f} GB/s)" if m.get("gbps") is not None else ""),
            f"memory_bound from {rule['memory_bound_roofline_pct']}% of the roofline",
        ]
        return Verdict(label="memory_bound", confidence=rule["confidence_memory_bound"], evidence=lines)
    few_blocks = programs is not None and programs < sms * t["low_parallelism"]["min_blocks_per_sm"]
    few_warps = warps_per_sm is not None and warps_per_sm < rule["min_warps_per_sm"]
    if few_blocks or few_warps:
        lines = [f"grid of {programs:,} programs for {sms} SMs ({programs / sms:.2f} per SM)"]
        if warps_per_sm is not None:
            lines.append(f"{warps_per_sm:g} warps per SM in total ({m['num_warps']} per program)")
        if roofline is not None:
            lines.append(f"only {roofline:.0f}% of the bandwidth roofline")
        return Verdict(label="low_parallelism", confidence=rule["confidence_low_parallelism"], evidence=lines)
    missing = ["no hardware counters (ncu unavailable)"]
    if roofline is None:
        missing.append("no roofline figure")
        confidence = rule["confidence_unknown"]
    else:
        missing.append(f"{roofline:.0f}% of the roofline with a grid that fills the GPU: cause not measured")
        confidence = rule["confidence_below_roofline"]
    if programs is None and m.get("grid_recorded_at"):
        missing.append(f"launch grid known only at shape {m['grid_recorded_at']}, not this one")
    elif programs is None:
        missing.append("no launch grid reported")
    lines = ["latency_bound assumed, not measured: " + "; ".join(missing)]
    if programs is not None:
        lines.append(f"grid of {programs:,} programs for {sms} SMs")
    return Verdict(label="latency_bound", confidence=confidence, evidence=lines)


def _interpreted(m: dict[str, Any], rule: dict[str, Any]) -> Verdict:
    lines = [
        "latency_bound assumed, not measured: timed under the Triton interpreter on a CPU, which has no "
        "GPU counters, no roofline and runs the programs one by one"
    ]
    if m.get("programs") is not None:
        lines.append(f"{m['programs']:,} programs at shape {m.get('shape')} (the interpreter's timing shape)")
    return Verdict(label="latency_bound", confidence=rule["confidence_unknown"], evidence=lines)


def derived_snapshot(
    result: dict, shape: dict | None = None, sm_count: int = 132, *, thresholds: dict | None = None
) -> dict:
    """The profile snapshot (docs/CONTRACTS.md) from an EvalResult dict (``.model_dump()``), labelled "derived".

    ``shape`` picks the timed shape (default: the first); ``thresholds`` defaults to configs/profiles.yaml.
    """
    thresholds = thresholds or load_thresholds()
    metrics, main = derived_metrics(result, shape, sm_count)
    verdict = classify_derived(metrics, thresholds)
    return {
        "source": "derived",
        "kernel": main.get("name"),
        "grid": list(main["grid"]) if main.get("grid") and metrics["programs"] is not None else None,
        "block": [32 * metrics["num_warps"], 1, 1] if metrics.get("num_warps") else None,
        "duration_us": metrics.get("median_us"),
        "bottleneck": verdict.label,
        "confidence": verdict.confidence,
        "evidence": verdict.evidence,
        "metrics": metrics,
    }
