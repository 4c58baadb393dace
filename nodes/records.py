"""Files of a run folder (candidates/, results/) and the attempt record kept in the state.

Each finished EvalResult is written to results/<identity>.json the moment it arrives (atomically),
so a run killed mid-evaluation resumes without evaluating that candidate again.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from graph.routing import judged_roofline
from tools.candidate import Candidate
from tools.results import EvalResult

SHAPE_FIELDS = ("shape", "dtype", "median_us", "min_us", "gbps", "roofline_pct", "method")


def default_run_dir(task_name: str) -> Path:
    return Path("runs").resolve() / f"{task_name}-{time.strftime('%Y%m%d-%H%M%S')}"


def candidate_path(run_dir: str | Path, identity: str) -> Path:
    return Path(run_dir) / "candidates" / f"{identity}.py"


def result_path(run_dir: str | Path, identity: str) -> Path:
    return Path(run_dir) / "results" / f"{identity}.json"


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_candidate(run_dir: str | Path, candidate: Candidate) -> Path:
    """candidates/<identity>.py (the source) and .json (config, module, origin, rationale)."""
    path = candidate_path(run_dir, candidate.identity)
    if not path.exists():
        _write_atomic(path, candidate.source)
    meta = candidate.model_dump(exclude={"source"})
    _write_atomic(path.with_suffix(".json"), json.dumps(meta, indent=2, default=str))
    return path


def save_result(run_dir: str | Path, identity: str, result: EvalResult) -> Path:
    path = result_path(run_dir, identity)
    _write_atomic(path, result.model_dump_json(indent=2))
    return path


def load_result(run_dir: str | Path, identity: str) -> EvalResult | None:
    path = result_path(run_dir, identity)
    if not path.exists():
        return None
    try:
        return EvalResult.model_validate_json(path.read_text())
    except ValueError:
        return None  # cut short by a kill: evaluate it again


def attempt_record(
    n: int,
    round_: int,
    candidate: Candidate,
    module: str,
    result: EvalResult,
    run_dir: str | Path,
    review: dict[str, Any] | None = None,
    expected_effect: str = "",
    min_dims: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The state's JSON-plain record of one evaluated candidate (the full log stays in results/).
    ``min_dims`` is the task's target.min_dims: ``roofline_pct`` is the roofline % a roofline target is
    judged on (the lowest at the shapes with every dim >= min_dims, all shapes when None)."""
    review = review or {}
    per_shape = [{k: row.get(k) for k in SHAPE_FIELDS} for row in result.model_dump()["metrics"]["per_shape"]]
    return {
        "n": n,
        "round": round_,
        "identity": candidate.identity,
        "module": module,
        "space_module": candidate.module,
        "config": candidate.config,
        "origin": candidate.origin,
        "parent": candidate.parent,
        "rationale": candidate.rationale,
        "expected_effect": expected_effect,
        "objections": review.get("objections", []),
        "answers": review.get("answers", []),
        "verdict": result.verdict,
        "stage": result.stage,
        "error_type": result.error_type,
        "message": result.message,
        # "speedup" | "roofline" when held for human review as a suspicious speedup
        "held": result.details.get("held") if result.error_type == "suspicious_speedup" else None,
        "geomean_us": result.metrics.geomean_us,
        "per_shape": per_shape,
        # lowest roofline % among the judged shapes (graph.routing.judged_roofline), as target_met reads it
        "roofline_pct": judged_roofline(per_shape, min_dims),
        "resources": {k: v for k, v in result.resources.items() if k != "kernels"},
        "interpreted": result.device.interpreted,
        "device_name": result.device.name,
        "seconds": result.seconds,
        "candidate": str(candidate_path(run_dir, candidate.identity).relative_to(run_dir)),
        "result": str(result_path(run_dir, candidate.identity).relative_to(run_dir)),
    }


def approved_record(attempt: dict[str, Any]) -> dict[str, Any]:
    """A candidate held for review, as the result a human's approval makes it."""
    return {
        **attempt,
        "verdict": "pass",
        "stage": "done",
        "error_type": None,
        "approved_by": "human",
        "message": f"held for review ({attempt.get('message', '')}); approved by a human",
    }


def with_log(attempt: dict[str, Any], run_dir: str | Path) -> dict[str, Any]:
    """The attempt plus the evaluator's full log and the failing source (what the proposer reads in fix
    mode), from the run folder, so a run resumed in a new process still has both."""
    result = load_result(run_dir, attempt["identity"])
    candidate = Path(run_dir) / attempt["candidate"] if attempt.get("candidate") else None
    source = candidate.read_text() if candidate is not None and candidate.is_file() else ""
    return {
        **attempt,
        "log": result.log if result else "",
        "details": result.details if result else {},
        "source": source,
    }
