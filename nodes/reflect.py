"""reflect: before proposing again after repeated failures, put the failing code next to the baseline.

The reflection (each recent failure: its config, error and log tail, and a diff of its source against
the baseline when the source differs) is what the proposer reads in reflect mode.
"""

from __future__ import annotations

import difflib
import time
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from graph.routing import decision
from nodes.audit import audit
from nodes.records import load_result
from nodes.runtime import RunContext, run_task

LOG_TAIL_LINES = 30
MAX_FAILURES = 6


def reflection_text(state: dict[str, Any], baseline_source: str) -> str:
    failed_rounds = max(state["streaks"]["compile_failures"], state["streaks"]["same_error"]["count"], 1)
    first_round = state["round"] - failed_rounds
    failures = [a for a in state.get("attempts", []) if a["verdict"] != "pass" and a["round"] >= first_round]
    parts = [f"{len(failures)} failed attempt(s) in the last {failed_rounds} round(s), against the baseline:"]
    for a in failures[-MAX_FAILURES:]:
        parts.append(
            f"\n## attempt #{a['n']}: {a['module']} {a['config']}: "
            f"{a['stage']}/{a['error_type']}: {a['message']}"
        )
        result = load_result(state["run_dir"], a["identity"])
        if result and result.log:
            parts.append("log (tail):\n" + "\n".join(result.log.splitlines()[-LOG_TAIL_LINES:]))
        source = Path(state["run_dir"], a["candidate"]).read_text()
        if source.strip() != baseline_source.strip():
            diff = difflib.unified_diff(
                baseline_source.splitlines(), source.splitlines(), "baseline", "attempt", lineterm=""
            )
            parts.append("diff against the baseline:\n" + "\n".join(diff))
        else:
            parts.append("source: the baseline's own code; the config is what differs")
    return "\n".join(parts)


def reflect(state: dict[str, Any], runtime: Runtime[RunContext]) -> dict[str, Any]:
    started = time.monotonic()
    task = run_task(state)
    text = reflection_text(state, task.baseline_source)
    streaks = {**state["streaks"], "compile_failures": 0}  # the reflection answers this streak
    reason = state.get("route", {}).get("reason", "repeated failures")
    audit(
        state["run_dir"],
        "reflect",
        f"re-reading the failures against the baseline ({reason})",
        round=state["round"],
    )
    return {
        "reflection": text,
        "streaks": streaks,
        "route": decision("reflect", "propose", reason, "reflect"),
        "active_s": time.monotonic() - started,
    }
