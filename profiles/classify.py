"""Classify a snapshot's metrics into one of the seven bottleneck labels (docs/CONTRACTS.md).

Every rule reads measured counters only (never the kernel's name) against thresholds kept in
configs/profiles.yaml, and says why in evidence lines a person can check against the numbers.
A metric the report lacks is None and simply cannot fire a rule.
"""

from __future__ import annotations

import copy
import math
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel

Label = Literal[
    "memory_bound",
    "compute_bound",
    "memory_access_pattern",
    "register_spills",
    "low_parallelism",
    "contention",
    "latency_bound",
]
LABELS: tuple[str, ...] = Label.__args__  # type: ignore[attr-defined]
CONFIG_PATH = Path(__file__).resolve().parents[1] / "configs" / "profiles.yaml"
MEMORY_UNITS = {"dram_pct": "DRAM", "l1_pct": "L1", "l2_pct": "L2"}
PIPES = {"tensor_pipe_pct": "tensor", "fma_pipe_pct": "FMA", "alu_pipe_pct": "ALU", "xu_pipe_pct": "XU"}


class Verdict(BaseModel):
    label: Label
    confidence: float
    evidence: list[str]


@cache
def _load_file(path: str) -> dict[str, Any]:
    with open(path) as handle:
        return yaml.safe_load(handle)


def _merge(base: dict, override: dict) -> dict:
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def load_thresholds(path: str | Path | None = None, overrides: dict | None = None) -> dict[str, Any]:
    """configs/profiles.yaml (or ``path``), with per-task ``overrides`` deep-merged over it."""
    data = copy.deepcopy(_load_file(str(path or CONFIG_PATH)))
    return _merge(data, overrides or {})


def _pct(value: float) -> str:
    return f"{value:.1f}%" if value < 10 else f"{value:.0f}%"


def _known(m: dict, *keys: str) -> dict[str, float]:
    return {k: m[k] for k in keys if m.get(k) is not None}


def _stall_line(m: dict) -> str | None:
    stalls = m.get("top_stalls") or []
    if not stalls:
        return None
    return (
        "top stalls: " + ", ".join(f"{name} {_pct(share)}" for name, share in stalls[:2]) + " of stall cycles"
    )


def _with_stalls(lines: list[str], m: dict) -> list[str]:
    line = _stall_line(m)
    return lines + [line] if line else lines


def _units_line(m: dict) -> str:
    names = {"dram_pct": "DRAM", "sm_pct": "SM", "l1_pct": "L1", "l2_pct": "L2"}
    known = _known(m, *names)
    return ", ".join(f"{names[k]} {_pct(v)}" for k, v in known.items())


def _spills(m: dict, t: dict) -> Verdict | None:
    spills = m.get("spill_requests")
    if not spills or spills <= 0:
        return None
    rule = t["register_spills"]
    warps = (m.get("grid_blocks") or 1) * max(1, math.ceil((m.get("threads_per_block") or 32) / 32))
    per_warp = spills / warps
    overhead = m.get("spill_overhead_pct")
    by_overhead = overhead is not None and overhead >= rule["min_overhead_pct"]
    if not (by_overhead or per_warp >= rule["min_requests_per_warp"]):
        return None
    strong = per_warp >= 4 * rule["min_requests_per_warp"] or (
        overhead is not None and overhead >= 4 * rule["min_overhead_pct"]
    )
    lines = [f"local-memory spilling: {spills:,.0f} spill requests ({per_warp:.1f} per warp)"]
    if overhead is not None:
        lines.append(f"spill requests are {_pct(overhead)} of L1 requests")
    if m.get("registers_per_thread") is not None:
        lines.append(f"{m['registers_per_thread']} registers per thread")
    return Verdict(
        label="register_spills",
        confidence=rule["confidence_strong"] if strong else rule["confidence"],
        evidence=_with_stalls(lines, m),
    )


def _low_parallelism(m: dict, t: dict) -> Verdict | None:
    rule = t["low_parallelism"]
    sms = m.get("sm_count") or t["device"]["sm_count"]
    blocks = m.get("grid_blocks")
    few_blocks = blocks is not None and blocks < sms * rule["min_blocks_per_sm"]
    waves, achieved = m.get("waves_per_sm"), m.get("achieved_occupancy_pct")
    few_warps = (
        waves is not None
        and achieved is not None
        and waves < rule["max_waves_per_sm"]
        and achieved < rule["max_achieved_occupancy_pct"]
    )
    units = _known(m, "dram_pct", "sm_pct", "l1_pct", "l2_pct")
    if not (few_blocks or few_warps) or not units or max(units.values()) >= rule["idle_max_pct"]:
        return None
    lines = []
    if few_blocks:
        lines.append(f"grid of {blocks:,} blocks for {sms} SMs ({blocks / sms:.2f} per SM)")
    if waves is not None:
        lines.append(f"{waves:g} waves per SM")
    if achieved is not None:
        theo = m.get("theoretical_occupancy_pct")
        lines.append(f"achieved occupancy {_pct(achieved)}" + (f" of {_pct(theo)} possible" if theo else ""))
    lines.append(f"every unit idle: {_units_line(m)} (all < {rule['idle_max_pct']}%)")
    return Verdict(
        label="low_parallelism",
        confidence=rule["confidence_strong"] if few_blocks else rule["confidence"],
        evidence=lines,
    )


def _compute(m: dict, t: dict) -> Verdict | None:
    rule = t["compute_bound"]
    pipes = _known(m, *PIPES)
    top_key = max(pipes, key=pipes.get) if pipes else None
    sm = m.get("sm_pct")
    if top_key and pipes[top_key] >= rule["pipe_min_pct"]:
        value = pipes[top_key]
        lines = [f"{PIPES[top_key]} pipe {_pct(value)} active (compute_bound from {rule['pipe_min_pct']}%)"]
        strong = value >= rule["strong_pipe_pct"]
    elif (
        sm is not None
        and sm >= rule["sm_min_pct"]
        and not (top_key and pipes[top_key] < rule["pipe_min_pct"])
    ):
        lines = [f"SM throughput {_pct(sm)} of peak (no per-pipe breakdown in this report)"]
        strong = False
    else:
        return None
    if sm is not None:
        lines.append(f"SM throughput {_pct(sm)}")
    if m.get("dram_pct") is not None:
        lines.append(f"DRAM throughput only {_pct(m['dram_pct'])}")
    return Verdict(
        label="compute_bound",
        confidence=rule["confidence_strong"] if strong else rule["confidence"],
        evidence=_with_stalls(lines, m),
    )


def _memory(m: dict, t: dict) -> Verdict | None:
    rule, ceiling = t["memory_bound"], t["device"]["dram_ceiling_pct"]
    dram = m.get("dram_pct")
    if dram is None or dram < rule["dram_min_pct"]:
        return None
    lines = [f"DRAM throughput {_pct(dram)} of peak (ncu's ceiling on this GPU is ~{ceiling}%)"]
    if m.get("sm_pct") is not None:
        lines.append(f"SM throughput {_pct(m['sm_pct'])}")
    strong = dram >= rule["strong_fraction_of_ceiling"] * ceiling
    return Verdict(
        label="memory_bound",
        confidence=rule["confidence_strong"] if strong else rule["confidence"],
        evidence=_with_stalls(lines, m),
    )


def _sector_efficiency(m: dict) -> tuple[str, float] | None:
    effs = _known(m, "global_load_efficiency_pct", "global_store_efficiency_pct")
    if not effs:
        return None
    key = min(effs, key=effs.get)
    return ("loads" if "load" in key else "stores"), effs[key]


def _access_pattern_strong(m: dict, t: dict) -> Verdict | None:
    rule = t["memory_access_pattern"]
    found = _sector_efficiency(m)
    busy = _known(m, "l1_pct", "l2_pct", "dram_pct")
    if not found or not busy or found[1] >= rule["sector_efficiency_max_pct"]:
        return None
    if max(busy.values()) < rule["memory_busy_min_pct"]:
        return None
    kind, eff = found
    lines = [f"global {kind} use {eff:.1f}% of each 32-byte sector fetched (uncoalesced/strided)"]
    if m.get("sectors_per_load_request") is not None:
        lines.append(f"{m['sectors_per_load_request']:g} sectors per global load request")
    lines.append(f"memory units: {_units_line(m)}")
    return Verdict(label="memory_access_pattern", confidence=rule["confidence_strong"], evidence=lines)


def _access_pattern_weak(m: dict, t: dict) -> Verdict | None:
    rule = t["memory_access_pattern"]
    caches = _known(m, "l1_pct", "l2_pct")
    dram = m.get("dram_pct")
    if not caches or dram is None:
        return None
    key = max(caches, key=caches.get)
    if caches[key] < rule["cache_busy_min_pct"] or dram >= rule["dram_idle_max_pct"]:
        return None
    name = "L1" if key == "l1_pct" else "L2"
    lines = [f"{name} throughput {_pct(caches[key])} while DRAM is only {_pct(dram)}: caches busy, DRAM not"]
    if m.get("l1_hit_pct") is not None:
        lines.append(f"L1 hit rate {_pct(m['l1_hit_pct'])}, L2 hit rate {_pct(m.get('l2_hit_pct') or 0)}")
    sectors = _known(m, "global_load_efficiency_pct", "global_store_efficiency_pct")
    if sectors:
        # Coalesced accesses that still keep the caches busy: the same data is fetched again and again
        # (several programs re-reading one tile through L2), a reuse problem rather than a stride one.
        used = ", ".join(f"{'load' if 'load' in k else 'store'} {_pct(v)}" for k, v in sectors.items())
        lines.append(
            f"sectors are used ({used}): the traffic is repeated reads of the same data, not strides"
        )
    else:
        lines.append("no sector-efficiency counters in this report to confirm uncoalesced access")
    return Verdict(label="memory_access_pattern", confidence=rule["confidence"], evidence=lines)


def _contention(m: dict, t: dict) -> Verdict | None:
    rule = t["contention"]
    membar = next((share for name, share in m.get("top_stalls") or [] if name == "membar"), None)
    atomic = m.get("l2_atomic_pct")
    by_membar = membar is not None and membar >= rule["membar_stall_min_pct"]
    by_atomic = atomic is not None and atomic >= rule["l2_atomic_min_pct"]
    if not (by_membar or by_atomic):
        return _serialized(m, rule)
    lines = []
    if membar is not None:
        lines.append(f"membar stalls {_pct(membar)} of stall cycles (memory fences around atomics)")
    if atomic is not None:
        lines.append(f"L2 atomic unit {_pct(atomic)} busy")
    lines.append(f"throughput elsewhere: {_units_line(m)}")
    return Verdict(label="contention", confidence=rule["confidence"], evidence=lines)


def _serialized(m: dict, rule: dict) -> Verdict | None:
    """Contention read from the wait alone (no membar or atomic counter in the report): warps waiting
    far longer per instruction than a memory round trip takes, with the memory system idle."""
    cycles = m.get("warp_cycles_per_issue")
    memory = _known(m, *MEMORY_UNITS)
    if cycles is None or not memory or cycles < rule["serialized_cycles_per_issue_min"]:
        return None
    if max(memory.values()) >= rule["idle_memory_max_pct"]:
        return None
    idle = ", ".join(f"{name} {_pct(memory[key])}" for key, name in MEMORY_UNITS.items() if key in memory)
    lines = [
        f"each warp waits {cycles:,.0f} cycles per issued instruction (from "
        f"{rule['serialized_cycles_per_issue_min']:,}) while the memory system is idle: {idle}",
        "far longer than a memory round trip: the warps queue on a few addresses (atomics, locks)",
        "no membar-stall or L2-atomic counter in this report to confirm it",
    ]
    return Verdict(
        label="contention", confidence=rule["confidence_serialized"], evidence=_with_stalls(lines, m)
    )


def _latency(m: dict, t: dict) -> Verdict:
    rule = t["latency_bound"]
    units = _known(m, "dram_pct", "sm_pct", "l1_pct", "l2_pct")
    lines = [f"nothing saturated: {_units_line(m)}" if units else "no throughput counters in this report"]
    if m.get("issue_active_pct") is not None:
        lines.append(f"schedulers issue in {_pct(m['issue_active_pct'])} of cycles")
    if m.get("achieved_occupancy_pct") is not None:
        lines.append(f"achieved occupancy {_pct(m['achieved_occupancy_pct'])}")
    stall = _stall_line(m)
    if stall:
        lines.append("warps waiting, " + stall)
    return Verdict(
        label="latency_bound",
        confidence=rule["confidence_with_stalls"] if stall else rule["confidence"],
        evidence=lines,
    )


def _saturation(verdict: Verdict, m: dict, t: dict) -> float:
    """How close the named unit is to its ceiling (to pick between compute- and memory-bound)."""
    if verdict.label == "memory_bound":
        return m["dram_pct"] / t["device"]["dram_ceiling_pct"]
    pipes = _known(m, *PIPES)
    return (max(pipes.values()) if pipes else m.get("sm_pct") or 0) / 100


def classify(metrics: dict[str, Any], thresholds: dict[str, Any] | None = None) -> Verdict:
    """The bottleneck of a snapshot's ``metrics`` (see profiles.snapshot.snapshot_metrics)."""
    t = thresholds or load_thresholds()
    m = metrics
    for rule in (_spills, _low_parallelism):
        verdict = rule(m, t)
        if verdict:
            return verdict
    compute, memory = _compute(m, t), _memory(m, t)
    if compute and (not memory or _saturation(compute, m, t) >= _saturation(memory, m, t)):
        return compute
    # Wasted sectors come before memory_bound: a busy DRAM moving unused bytes is an access problem.
    for verdict in (_access_pattern_strong(m, t), memory):
        if verdict:
            return verdict
    for rule in (_contention, _access_pattern_weak):
        verdict = rule(m, t)
        if verdict:
            return verdict
    return _latency(m, t)
