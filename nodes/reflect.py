"""reflect: before proposing again after repeated failures, put the failing code next to the baseline.

The reflection (each recent failure: its config, error and log tail, and a diff of its source against
the baseline when the source differs) is what the proposer reads in reflect mode.
"""

from __future__ import annotations

import difflib

from loop.records import Decision
from loop.state import RunState
from nodes.step import Step, Update, node
from tools.run_folder import RunFolder

LOG_TAIL_LINES = 30
MAX_FAILURES = 6


def reflection_text(state: RunState, folder: RunFolder, baseline_source: str) -> str:
    failed_rounds = max(state.streaks.compile_failures, state.streaks.same_error.count, 1)
    first_round = state.round - failed_rounds
    failures = [a for a in state.attempts if not a.passed and a.round >= first_round]
    parts = [f"{len(failures)} failed attempt(s) in the last {failed_rounds} round(s), against the baseline:"]
    for a in failures[-MAX_FAILURES:]:
        parts.append(f"\n## attempt #{a.n}: {a.module} {a.config}: {a.stage}/{a.error_type}: {a.message}")
        result = folder.load_result(a.identity)
        if result and result.log:
            parts.append("log (tail):\n" + "\n".join(result.log.splitlines()[-LOG_TAIL_LINES:]))
        source = folder.path(a.candidate).read_text()
        if source.strip() != baseline_source.strip():
            diff = difflib.unified_diff(
                baseline_source.splitlines(), source.splitlines(), "baseline", "attempt", lineterm=""
            )
            parts.append("diff against the baseline:\n" + "\n".join(diff))
        else:
            parts.append("source: the baseline's own code; the config is what differs")
    return "\n".join(parts)


@node("reflect")
def reflect(state: RunState, step: Step) -> Update:
    reason = state.route.reason or "repeated failures"
    step.audit(f"re-reading the failures against the baseline ({reason})")
    return {
        "reflection": reflection_text(state, step.folder, step.task.baseline_source),
        "streaks": state.streaks.model_copy(update={"compile_failures": 0}),  # the reflection answers it
        "route": Decision(source="reflect", to="propose", reason=reason, mode="reflect"),
    }
