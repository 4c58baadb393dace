"""The attempt record of an evaluated candidate, built from the candidate and its EvalResult, and the
failure the proposer reads in fix mode, read back from the run folder."""

from __future__ import annotations

from loop.records import Attempt, Failure, Review, ShapeRow
from loop.scoring import judged_roofline
from tools.candidate import Candidate
from tools.results import EvalResult
from tools.run_folder import RunFolder


def attempt_record(
    n: int,
    round_: int,
    candidate: Candidate,
    module: str,
    result: EvalResult,
    review: Review | None = None,
    min_dims: dict[str, int] | None = None,
) -> Attempt:
    """The state's record of one evaluated candidate (the full log stays in results/). ``min_dims`` is
    the task's target.min_dims: ``roofline_pct`` is the roofline % a roofline target is judged on."""
    per_shape = [ShapeRow.model_validate(row.model_dump()) for row in result.metrics.per_shape]
    held = result.details.get("held") if result.error_type == "suspicious_speedup" else None
    return Attempt(
        n=n,
        round=round_,
        identity=candidate.identity,
        module=module,
        space_module=candidate.module,
        config=candidate.config,
        origin=candidate.origin,
        parent=candidate.parent,
        rationale=candidate.rationale,
        expected_effect=review.proposal.expected_effect if review else "",
        objections=review.objections if review else [],
        answers=review.answers if review else [],
        verdict=result.verdict,
        stage=result.stage,
        error_type=result.error_type,
        message=result.message,
        held=held,
        geomean_us=result.metrics.geomean_us,
        per_shape=per_shape,
        roofline_pct=judged_roofline(per_shape, min_dims),
        resources={k: v for k, v in result.resources.items() if k != "kernels"},
        interpreted=result.device.interpreted,
        device_name=result.device.name,
        seconds=result.seconds,
        candidate=RunFolder.candidate_file(candidate.identity),
        result=RunFolder.result_file(candidate.identity),
        worker=result.worker,
    )


def with_log(attempt: Attempt, folder: RunFolder) -> Failure:
    """The attempt plus the evaluator's full log and the failing source, from the run folder, so a run
    resumed in a new process still has both."""
    result = folder.load_result(attempt.identity)
    source = folder.read(attempt.candidate) if attempt.candidate else None
    return Failure(
        **attempt.model_dump(),
        log=result.log if result else "",
        details=result.details if result else {},
        source=source or "",
    )
