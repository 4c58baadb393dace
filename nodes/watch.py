"""The watchdog's word on a new best, for the nodes that change the best (evaluate, human)."""

from __future__ import annotations

from loop.records import Attempt
from nodes.runtime import eval_settings
from nodes.step import Step
from tools.candidate import Candidate
from tools.run_folder import RunFolder
from tools.watchdog import recheck_new_best


def candidate_of(attempt: Attempt, folder: RunFolder) -> Candidate:
    """The candidate an attempt evaluated, read back from the run folder."""
    return Candidate(
        source=folder.path(attempt.candidate).read_text(),
        config=attempt.config,
        module=attempt.space_module or attempt.module,
    )


def watchdog_accepts(step: Step, new: Attempt, previous: Attempt) -> bool:
    """On a GPU ``new`` is re-timed against ``previous`` in one process, and a regression beyond
    ``watchdog.max_regression`` at any shape keeps ``previous`` (at a launch-bound size only when the
    geomean is not faster: tools.watchdog says why); the comparison goes into the trail."""
    settings = step.run.settings
    verdict = recheck_new_best(
        step.task,
        step.run.device,
        candidate_of(new, step.folder),
        candidate_of(previous, step.folder),
        settings.watchdog.max_regression,
        eval_settings(step.task, settings, step.context),
        launch_bound_below_pct=settings.profiler.launch_bound_below_pct,
    )
    if verdict.compared:
        step.audit(f"watchdog: {verdict.reason}")
    return verdict.accepted
