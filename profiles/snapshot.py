"""Compress an ncu launch into the profile snapshot: a few dozen numbers and a bottleneck label.

Both ncu pages are read into the same fields, so a raw report and a details report of the same kernel
classify the same way. The details page lacks the per-reason stall and per-pipe counters unless they
were requested with ``--metrics`` (tools/ncu.py does); without them the top stall and the busiest pipe
are read from ncu's own rule text, which names them with their numbers.

CLI: ``python -m profiles.snapshot FILE.csv [--json]`` prints one snapshot per profiled launch (text,
or one JSON object per line with --json). Exit 2 when the file is not an ncu CSV report.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

from profiles.classify import classify, load_thresholds
from profiles.ncu_csv import NcuLaunch, NcuParseError, read_ncu_csv

# Snapshot metric -> the ncu keys that hold it: raw-page names first, then details-page names.
SOURCES: dict[str, tuple[str, ...]] = {
    "duration": (
        "gpu__time_duration.sum",
        "gpu__time_duration.avg",
        "gpu_speed_of_light_throughput.duration",
    ),
    "dram_pct": (
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
        "gpu_speed_of_light_throughput.dram_throughput",
    ),
    "memory_pct": (
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
        "gpu_speed_of_light_throughput.memory_throughput",
    ),
    "sm_pct": (
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "gpu_speed_of_light_throughput.compute_sm_throughput",
    ),
    "l1_pct": (
        "l1tex__throughput.avg.pct_of_peak_sustained_active",
        "gpu_speed_of_light_throughput.l1_tex_cache_throughput",
    ),
    "l2_pct": (
        "lts__throughput.avg.pct_of_peak_sustained_elapsed",
        "gpu_speed_of_light_throughput.l2_cache_throughput",
    ),
    "l1_hit_pct": ("l1tex__t_sector_hit_rate.pct", "memory_workload_analysis.l1_tex_hit_rate"),
    "l2_hit_pct": ("lts__t_sector_hit_rate.pct", "memory_workload_analysis.l2_hit_rate"),
    "achieved_occupancy_pct": (
        "sm__warps_active.avg.pct_of_peak_sustained_active",
        "occupancy.achieved_occupancy",
    ),
    "theoretical_occupancy_pct": (
        "sm__maximum_warps_per_active_cycle_pct",
        "occupancy.theoretical_occupancy",
    ),
    "registers_per_thread": ("launch__registers_per_thread", "launch_statistics.registers_per_thread"),
    "spill_requests": (
        "derived__local_spilling_requests",
        "memory_workload_analysis.local_memory_spilling_requests",
    ),
    "spill_overhead_pct": (
        "derived__local_spilling_requests_pct",
        "memory_workload_analysis.local_memory_spilling_request_overhead",
    ),
    "waves_per_sm": ("launch__waves_per_multiprocessor", "launch_statistics.waves_per_sm"),
    "sm_count": ("launch__sm_count", "launch_statistics.sms", "device__attribute_multiprocessor_count"),
    "issue_active_pct": (
        "smsp__issue_active.avg.pct_of_peak_sustained_active",
        "scheduler_statistics.one_or_more_eligible",
    ),
    "warp_cycles_per_issue": (
        "smsp__average_warp_latency_per_inst_issued.ratio",
        "warp_state_statistics.warp_cycles_per_issued_instruction",
    ),
    "eligible_warps_per_scheduler": (
        "smsp__warps_eligible.avg.per_cycle_active",
        "scheduler_statistics.eligible_warps_per_scheduler",
    ),
    "tensor_pipe_pct": ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",),
    "fma_pipe_pct": ("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed",),
    "alu_pipe_pct": ("sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_elapsed",),
    "xu_pipe_pct": ("sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_elapsed",),
    "fp64_pipe_pct": ("sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_elapsed",),
    "l2_atomic_pct": ("lts__d_atomic_input_cycles_active.avg.pct_of_peak_sustained_elapsed",),
    "global_load_efficiency_pct": ("smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct",),
    "global_store_efficiency_pct": ("smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct",),
}

# Occupancy limiter -> (raw key, details key): blocks per SM each resource allows.
LIMITERS: dict[str, tuple[str, str]] = {
    "registers": ("launch__occupancy_limit_registers", "occupancy.block_limit_registers"),
    "shared_mem": ("launch__occupancy_limit_shared_mem", "occupancy.block_limit_shared_mem"),
    "warps": ("launch__occupancy_limit_warps", "occupancy.block_limit_warps"),
    "blocks": ("launch__occupancy_limit_blocks", "occupancy.block_limit_sm"),
    "barriers": ("launch__occupancy_limit_barriers", "occupancy.block_limit_barriers"),
}

SHARED_PARTS = (
    ("launch__shared_mem_per_block_static", "launch_statistics.static_shared_memory_per_block"),
    ("launch__shared_mem_per_block_dynamic", "launch_statistics.dynamic_shared_memory_per_block"),
)

STALL_KEY = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
NOT_A_STALL = {"selected"}  # the cycle a warp issues: part of the CPI, not a stall

# ncu's CPIStall rule text -> stall reason (used when the details page lacks the per-reason counters).
STALL_PHRASES: tuple[tuple[str, str], ...] = (
    (r"scoreboard dependency on a L1TEX", "long_scoreboard"),
    (r"scoreboard dependency on a MIO", "short_scoreboard"),
    (r"sibling warps at a CTA barrier", "barrier"),
    (r"memory barrier", "membar"),
    (r"fixed latency execution dependency", "wait"),
    (r"MIO .*queue|MIO instruction queue", "mio_throttle"),
    (r"(LG|local and global).*queue", "lg_throttle"),
    (r"TEX .*queue|texture .*queue", "tex_throttle"),
    (r"execution pipe|math pipe", "math_pipe_throttle"),
    (r"branch target", "branch_resolving"),
    (r"dispatch", "dispatch_stall"),
    (r"memory instructions to complete|EXIT", "drain"),
    (r"instruction fetch|instruction cache|not having the next instruction", "no_instruction"),
    (r"GMMA|warpgroup", "gmma"),
    (r"sleep", "sleeping"),
)
PIPE_FIELDS = {"tensor": "tensor_pipe_pct", "fma": "fma_pipe_pct", "alu": "alu_pipe_pct", "xu": "xu_pipe_pct"}

TIME_TO_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
TIME_TO_US |= {"s": 1e6, "second": 1e6}
BYTE_PREFIX = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3}


def _first(launch: NcuLaunch, keys: tuple[str, ...]) -> tuple[float | None, str]:
    for key in keys:
        value = launch.number(key)
        if value is not None:
            return value, launch.units.get(key, "")
    return None, ""


def _bytes(value: float, unit: str) -> float:
    match = re.match(r"^([KMG]i?)?(byte|B)", unit.strip())
    return value * BYTE_PREFIX[match.group(1) or ""] if match else value


def _duration_us(launch: NcuLaunch) -> float | None:
    value, unit = _first(launch, SOURCES["duration"])
    if value is None:
        return None
    return round(value * TIME_TO_US.get(unit.strip().lower(), 1e-3), 3)


def _occupancy_limiter(launch: NcuLaunch, theoretical: float | None) -> str | None:
    limits = {}
    for name, keys in LIMITERS.items():
        value, _ = _first(launch, keys)
        if value is not None:
            limits[name] = value
    if not limits:
        return None
    if theoretical is not None and theoretical >= 100:
        return "none"
    low = min(limits.values())
    return "+".join(name for name, value in limits.items() if value == low)


def _shared_bytes(launch: NcuLaunch) -> float | None:
    parts = [_first(launch, keys) for keys in SHARED_PARTS]
    known = [_bytes(v, u) for v, u in parts if v is not None]
    return sum(known) if known else None


def _stalls_from_counters(launch: NcuLaunch, total: float | None) -> list[list] | None:
    ratios = {}
    for key, value in launch.metrics.items():
        match = STALL_KEY.match(key)
        if match and isinstance(value, float):
            ratios[match.group(1)] = value
    if not ratios:
        return None
    total = total or sum(ratios.values())
    if not total:
        return []
    shares = [[name, round(100 * v / total, 1)] for name, v in ratios.items() if name not in NOT_A_STALL]
    return sorted(shares, key=lambda item: -item[1])


def _stalls_from_rules(launch: NcuLaunch, total: float | None) -> list[list]:
    stalls = []
    for rule in launch.rules:
        if rule.name != "CPIStall":
            continue
        cycles = re.search(r"spends ([\d.,]+) cycles being stalled (.*?)\.", rule.description)
        if not cycles:
            continue
        reason = next((r for p, r in STALL_PHRASES if re.search(p, cycles.group(2))), "other")
        share = re.search(r"represents about ([\d.]+)% of the total", rule.description)
        if share:
            pct = float(share.group(1))
        elif total:
            pct = 100 * float(cycles.group(1).replace(",", "")) / total
        else:
            continue
        stalls.append([reason, round(pct, 1)])
    return sorted(stalls, key=lambda item: -item[1])


def _pipes_from_rules(launch: NcuLaunch) -> dict[str, float]:
    """'Tensor is the highest-utilized pipeline (83.0%)' -> {'tensor_pipe_pct': 83.0}."""
    found = {}
    for rule in launch.rules:
        match = re.search(r"(\w[\w ]*?) is the highest-utilized pipeline \(([\d.]+)%\)", rule.description)
        if match:
            field = PIPE_FIELDS.get(match.group(1).strip().lower())
            if field:
                found[field] = float(match.group(2))
    return found


def _round(value: float | None, digits: int = 2) -> float | int | None:
    if value is None:
        return None
    if float(value).is_integer():
        return int(value)
    return round(value, digits)


def snapshot_metrics(launch: NcuLaunch) -> dict[str, Any]:
    """The snapshot's ``metrics`` dict from one launch (None where the report does not say)."""
    m: dict[str, Any] = {}
    for field, keys in SOURCES.items():
        if field != "duration":
            m[field] = _round(_first(launch, keys)[0])
    for field, value in _pipes_from_rules(launch).items():
        if m.get(field) is None:
            m[field] = value
    m["occupancy_limiter"] = _occupancy_limiter(launch, m["theoretical_occupancy_pct"])
    m["shared_bytes"] = _round(_shared_bytes(launch))
    m["grid_blocks"] = math.prod(launch.grid)
    m["threads_per_block"] = math.prod(launch.block)
    sectors = launch.number("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum")
    requests = launch.number("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum")
    m["sectors_per_load_request"] = _round(sectors / requests) if sectors is not None and requests else None
    stalls = _stalls_from_counters(launch, m["warp_cycles_per_issue"])
    if stalls is None:
        stalls = _stalls_from_rules(launch, m["warp_cycles_per_issue"])
    m["top_stalls"] = [s for s in stalls if s[1] >= 1.0][:3]
    return m


def build_snapshot(launch: NcuLaunch, thresholds: dict | None = None) -> dict[str, Any]:
    """The profile snapshot of one ncu launch, classified."""
    metrics = snapshot_metrics(launch)
    verdict = classify(metrics, thresholds or load_thresholds())
    return {
        "source": "ncu",
        "page": launch.page,
        "kernel": launch.kernel,
        "launch_id": launch.id,
        "grid": list(launch.grid),
        "block": list(launch.block),
        "duration_us": _duration_us(launch),
        "bottleneck": verdict.label,
        "confidence": verdict.confidence,
        "evidence": verdict.evidence,
        "metrics": metrics,
    }


def snapshots_from_csv(path: str | Path, thresholds: dict | None = None) -> list[dict[str, Any]]:
    """One snapshot per launch in an ncu CSV file. Raises NcuParseError for a file that is not one."""
    thresholds = thresholds or load_thresholds()
    return [build_snapshot(launch, thresholds) for launch in read_ncu_csv(path)]


def main(argv: list[str] | None = None) -> int:
    from profiles.render import render_snapshot

    parser = argparse.ArgumentParser(
        prog="python -m profiles.snapshot",
        description="Read an Nsight Compute CSV (--page raw or details) and print one snapshot per launch.",
    )
    parser.add_argument("csv", type=Path, help="ncu CSV report (ncu --csv --page raw|details ... > FILE.csv)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line instead of text")
    args = parser.parse_args(argv)
    try:
        snaps = snapshots_from_csv(args.csv)
    except NcuParseError as exc:
        print(f"error: {args.csv}: {exc}", file=sys.stderr)
        return 2
    for i, snap in enumerate(snaps):
        if args.json:
            print(json.dumps(snap))
        else:
            print(("\n" if i else "") + render_snapshot(snap))
    return 0


if __name__ == "__main__":
    sys.exit(main())
