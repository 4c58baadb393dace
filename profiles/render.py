"""Compact text of a snapshot for a prompt: the verdict, its evidence, then the numbers (<= 1,500 chars)."""

from __future__ import annotations

from typing import Any

MAX_CHARS = 1500


def _num(value: float | int) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:.3g}" if abs(value) < 10 else f"{value:,.1f}"


def _pct(value: float | None) -> str | None:
    return None if value is None else f"{value:.1f}%" if value < 10 else f"{value:.0f}%"


def _join(parts: list[str | None], sep: str = " | ") -> str:
    return sep.join(p for p in parts if p)


def _labelled(pairs: list[tuple[str, Any]]) -> list[str | None]:
    return [f"{name} {value}" if value is not None else None for name, value in pairs]


def _dims(dims: list[int] | None) -> str:
    return "x".join(str(d) for d in dims) if dims else "?"


def _ncu_lines(m: dict[str, Any]) -> list[str]:
    lines = []
    throughput = _labelled(
        [
            ("DRAM", _pct(m.get("dram_pct"))),
            ("SM", _pct(m.get("sm_pct"))),
            ("L1", _pct(m.get("l1_pct"))),
            ("L2", _pct(m.get("l2_pct"))),
            ("hit L1", _pct(m.get("l1_hit_pct"))),
            ("hit L2", _pct(m.get("l2_hit_pct"))),
        ]
    )
    if any(throughput):
        lines.append("throughput: " + _join(throughput))
    occ = []
    if m.get("achieved_occupancy_pct") is not None:
        theo = m.get("theoretical_occupancy_pct")
        occ.append(f"achieved {_pct(m['achieved_occupancy_pct'])}" + (f" of {_pct(theo)}" if theo else ""))
    if m.get("occupancy_limiter") not in (None, "none"):
        occ.append(f"limited by {m['occupancy_limiter']}")
    occ += _labelled(
        [
            ("regs/thread", m.get("registers_per_thread")),
            ("spill requests", _num(m["spill_requests"]) if m.get("spill_requests") is not None else None),
            ("smem B/block", _num(m["shared_bytes"]) if m.get("shared_bytes") is not None else None),
            ("waves/SM", m.get("waves_per_sm")),
        ]
    )
    if any(occ):
        lines.append("occupancy: " + _join(occ))
    issue = _labelled(
        [
            ("issue active", _pct(m.get("issue_active_pct"))),
            ("warp cycles/issue", m.get("warp_cycles_per_issue")),
        ]
    )
    if m.get("top_stalls"):
        issue.append("stalls " + ", ".join(f"{n} {_pct(s)}" for n, s in m["top_stalls"]))
    if any(issue):
        lines.append("issue: " + _join(issue))
    pipes = _labelled(
        [
            ("tensor", _pct(m.get("tensor_pipe_pct"))),
            ("FMA", _pct(m.get("fma_pipe_pct"))),
            ("ALU", _pct(m.get("alu_pipe_pct"))),
            ("XU", _pct(m.get("xu_pipe_pct"))),
        ]
    )
    if any(pipes):
        lines.append("pipes: " + _join(pipes))
    access = _labelled(
        [
            ("load sector use", _pct(m.get("global_load_efficiency_pct"))),
            ("store sector use", _pct(m.get("global_store_efficiency_pct"))),
            ("sectors/load req", m.get("sectors_per_load_request")),
            ("L2 atomics", _pct(m.get("l2_atomic_pct"))),
        ]
    )
    if any(access):
        lines.append("access: " + _join(access))
    return lines


def _derived_lines(m: dict[str, Any]) -> list[str]:
    lines = []
    launch = _labelled(
        [
            ("programs", _num(m["programs"]) if m.get("programs") is not None else None),
            ("warps/program", m.get("num_warps")),
            ("warps/SM", m.get("warps_per_sm")),
            ("SMs", m.get("sm_count")),
        ]
    )
    if any(launch):
        lines.append("launch: " + _join(launch))
    res = _labelled(
        [
            ("regs/thread", m.get("registers_per_thread")),
            ("spilled regs", m.get("spilled_registers")),
            ("smem B", _num(m["shared_bytes"]) if m.get("shared_bytes") is not None else None),
        ]
    )
    if any(res):
        lines.append("resources: " + _join(res))
    timing = _labelled(
        [
            ("median", f"{m['median_us']:.1f} us" if m.get("median_us") is not None else None),
            ("GB/s", _num(m["gbps"]) if m.get("gbps") is not None else None),
            ("roofline", _pct(m.get("roofline_pct"))),
            ("method", m.get("method")),
        ]
    )
    if any(timing):
        lines.append("timing: " + _join(timing))
    if m.get("kernels") and len(m["kernels"]) > 1:
        lines.append(
            "kernels: " + ", ".join(f"{k['name']} grid {_dims(k.get('grid'))}" for k in m["kernels"])
        )
    return lines


def _at(snap: dict[str, Any]) -> str:
    """'at M=2048 N=21504 bfloat16 (81% of its same-size ceiling, bandwidth-bound size)', or ''."""
    if not snap.get("shape"):
        return ""
    where = " ".join(f"{k}={v}" for k, v in snap["shape"].items()) + (
        f" {snap['dtype']}" if snap.get("dtype") else ""
    )
    standing = snap.get("standing") or {}
    notes = (
        [f"{_pct(standing['ceiling_pct'])} of its same-size ceiling"] if standing.get("ceiling_pct") else []
    )
    if standing.get("size_class"):
        notes.append(standing["size_class"].replace("_", "-") + " size")
    return f"at {where}" + (f" ({', '.join(notes)})" if notes else "")


def _others(snap: dict[str, Any]) -> list[str]:
    return [
        f"also profiled {_at(o)}: {o.get('bottleneck')} (confidence {o.get('confidence', 0):.2f})"
        + (f": {o['evidence'][0]}" if o.get("evidence") else "")
        for o in snap.get("others") or []
    ]


def render_snapshot(snap: dict[str, Any], max_chars: int = MAX_CHARS) -> str:
    """Text for a prompt: header, verdict, evidence, metrics; never longer than ``max_chars``."""
    source = snap.get("source", "ncu")
    where = f"ncu {snap['page']}" if source == "ncu" and snap.get("page") else source
    head = [f"kernel {snap.get('kernel', '?')}"]
    if _at(snap):
        head.append(_at(snap))
    if snap.get("grid"):
        head.append(f"grid {_dims(snap['grid'])}")
    if snap.get("block"):
        head.append(f"block {_dims(snap['block'])}")
    if snap.get("duration_us") is not None:
        head.append(f"{snap['duration_us']:,.1f} us")
    lines = ["  ".join(head) + f"  [{where}]"]
    lines.append(f"bottleneck: {snap.get('bottleneck')} (confidence {snap.get('confidence', 0):.2f})")
    evidence = [f"- {line}" for line in snap.get("evidence", [])]
    m = snap.get("metrics", {})
    body = (_ncu_lines(m) if source == "ncu" else _derived_lines(m)) + _others(snap)
    text = "\n".join(lines + evidence + body)
    while len(text) > max_chars and evidence:  # keep the numbers, drop the weakest evidence first
        evidence.pop()
        text = "\n".join(lines + evidence + body)
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."
