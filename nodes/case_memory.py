"""The graph's side of memory: opening the case library, recalling cases, remembering a run, and the
validation cache in front of the evaluator.

The library itself never enters the state (it is not JSON-plain); nodes reopen it, which is cheap
because it is cached per process and store folder. Whatever fails here turns memory off with a
reason, said once on the terminal and in the report: memory never ends a run.

Settings (configs/default.yaml ``memory``): ``enabled`` (case library and validation cache),
``validation_cache`` (the cache alone), ``model_path`` (another sentence-transformers folder).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from loop.judge import challenger
from loop.records import Attempt
from loop.settings import Settings
from loop.state import RunState
from memory import default_case_store, default_validation_cache, open_case_library
from nodes.runtime import eval_settings
from tools.candidate import Candidate
from tools.evaluate import held_speedup
from tools.results import EvalResult
from tools.run_folder import RunFolder
from tools.task import Task

if TYPE_CHECKING:
    from memory.cases import Case
    from memory.cases.library import CaseLibrary

RECALL_K = 5
OFF_BY_SETTING = "memory off: turned off by the settings (memory.enabled: false, or --no-memory)"
# Verdicts that depend on this run rather than on the candidate: the human may widen the space, and a
# speedup is judged suspicious against this run's baseline measurement.
RUN_DEPENDENT_ERRORS = frozenset({"out_of_search_space", "suspicious_speedup"})


# -- the case library ------------------------------------------------------------------------------
@lru_cache(maxsize=8)
def _open(store: str, model_path: str | None) -> tuple[CaseLibrary | None, str | None]:
    return open_case_library(store, model_path=model_path)


def open_library(settings: Settings) -> tuple[CaseLibrary | None, str]:
    """(library, "") or (None, why memory is off). Never raises."""
    chosen = settings.memory
    if not chosen.enabled:
        return None, OFF_BY_SETTING
    library, why = _open(str(default_case_store().resolve()), chosen.model_path)
    return library, why or ""


def library_for_run(state: RunState) -> tuple[CaseLibrary | None, str]:
    """(library, "") when setup found memory on, else (None, why): nodes after setup never open a
    library setup refused, and say why when one setup opened cannot be opened again (a resumed run
    in another environment)."""
    if not state.memory.get("enabled"):
        return None, state.memory.get("reason", "")
    return open_library(state.settings)


def _entry(case: Case, score: float, role: str) -> dict[str, Any]:
    from memory.cases.library import scored_case_dict

    return {
        **scored_case_dict(case, score),
        "role": role,
        "identity": case.identity,
        "source_digest": case.change.source_digest,
        "device": case.outcome.device,
        "interpreted": case.outcome.interpreted,
    }


def recall(
    library: CaseLibrary, task: Task, bottleneck: str | None, interpreted: bool
) -> tuple[list[dict[str, Any]], float]:
    """(cases for the state, the best similarity score; 0 when the library has nothing).

    Each case dict is ``scored_case_dict`` plus ``role``: ``start`` (a kept winner: try its config
    first), ``avoid`` (a failure: do not repeat it) or ``similar`` (the rest of the top hits). Starting
    points timed on the same kind of device as this run come first: an interpreter ranking says
    nothing about a GPU and the other way round.
    """
    found = library.retrieve(task.signature(), bottleneck=bottleneck, k=RECALL_K)
    starts = sorted(found.starting_points, key=lambda hit: hit[0].outcome.interpreted != interpreted)
    entries: dict[str, dict[str, Any]] = {}
    for role, hits in (("start", starts), ("avoid", found.avoid), ("similar", found.hits)):
        for case, score in hits:
            entries.setdefault(case.id, _entry(case, score, role))
    return list(entries.values()), found.confidence


def combined_confidence(diagnosed: float, recalled: float | None) -> float:
    """The diagnosis confidence once memory has spoken.

    The best case score says how familiar the situation is, the diagnoser's confidence how clearly
    the profile names the bottleneck; either alone misleads (a clear ncu profile of a new op, a
    familiar op with a murky profile), so they count equally: their mean. Without a recalled case
    (memory off, empty library) the diagnoser's confidence stands.
    """
    if recalled is None or recalled <= 0:
        return diagnosed
    return round((diagnosed + recalled) / 2, 2)


def out_of_space_starts(
    cases: list[dict[str, Any]], task: Task, modules: list[str]
) -> list[tuple[dict[str, Any], str]]:
    """Starting points whose config does not fit this task's current space, each with the reason."""
    skipped = []
    for case in cases:
        if case.get("role") != "start":
            continue
        module = case.get("module") or task.baseline_name
        if module not in modules:
            skipped.append((case, f"module {module} is not one of this task's ({', '.join(modules)})"))
            continue
        problems = task.config_problems(dict(case.get("config") or {}), module)
        if problems:
            skipped.append((case, "; ".join(problems)))
    return skipped


# -- remembering a run -----------------------------------------------------------------------------
def kept_identities(attempts: list[Attempt]) -> set[str]:
    """Attempts that became the best when their round was judged (loop.judge.challenger, the
    watchdog aside)."""
    best = next((a for a in attempts if a.round == 0), None)
    kept: set[str] = set()
    for rnd in sorted({a.round for a in attempts if a.round > 0}):
        winner = challenger([a for a in attempts if a.round == rnd], best)
        if winner is not None:
            best = winner
            kept.add(winner.identity)
    return kept


def cases_of_run(
    state: RunState,
    task: Task,
    folder: RunFolder,
    diagnoses: dict[int, dict[str, Any]],
    module_text: Callable[[str], str | None],
) -> list[Case]:
    """Every evaluated candidate of the run as a case (the baseline included).

    ``diagnoses``: round -> {"diagnosis", "snapshot"} as the diagnose node logged them; a candidate of
    round r started from round r's snapshot (the baseline is described by round 1's).
    ``module_text(module)``: the source of the task module a candidate's config belongs to.
    """
    from memory.cases import case_from_attempt

    kept = kept_identities(state.attempts)
    best, approved = state.best.identity, set(state.approved)
    cases = []
    for a in state.attempts:
        seen = diagnoses.get(max(a.round, 1)) or {}
        # held for review and approved by a human: a result like any pass (kept if it became the best)
        cases.append(
            case_from_attempt(
                task_signature=task.signature(),
                candidate=a,
                result=a.approved() if a.n in approved else a,
                kept=a.identity in kept or (a.n in approved and a.identity == best),
                run_id=folder.root.name,
                baseline_us=state.baseline.geomean_us,
                snapshot=seen.get("snapshot"),
                diagnosis=seen.get("diagnosis", ""),
                source=folder.read(a.candidate) if a.candidate else None,
                module_source=module_text(a.space_module or a.module),
                best_of_run=a.identity == best,
            )
        )
    return cases


# -- the validation cache --------------------------------------------------------------------------
def validation_cache_status(settings: Settings, baseline: EvalResult) -> dict[str, Any]:
    """Whether evaluate may serve results from the cache, and why not; decided once, by setup.

    The key holds the device and the Triton/torch versions of the baseline's result (the graph
    process never touches CUDA); a result without versions could not be told apart from one of
    another version, so it turns the cache off.
    """
    chosen = settings.memory
    path = str(default_validation_cache())
    if not chosen.enabled or not chosen.validation_cache:
        why = "memory.enabled: false" if not chosen.enabled else "memory.validation_cache: false"
        return {"enabled": False, "reason": f"turned off by the settings ({why})", "path": path}
    device = baseline.device
    if not (device.triton and device.torch):
        return {
            "enabled": False,
            "reason": "the baseline's result names no Triton/torch versions",
            "path": path,
        }
    try:
        from memory.validation_cache import ValidationCache

        ValidationCache()
    except Exception as exc:  # an unwritable home must not end the run
        return {"enabled": False, "reason": f"{type(exc).__name__}: {exc}", "path": path}
    return {"enabled": True, "reason": "", "path": path}


class RunCache:
    """The validation cache as one evaluate step uses it: identity + task + device -> EvalResult."""

    def __init__(
        self,
        task: Task,
        device: dict[str, Any],
        baseline: EvalResult | None = None,
        suspicious_speedup: float | None = None,
    ):
        from memory.validation_cache import ValidationCache

        self.cache = ValidationCache()
        self.task, self.device = task, device
        self.baseline, self.suspicious_speedup = baseline, suspicious_speedup

    @classmethod
    def for_run(cls, state: RunState, task: Task, baseline: EvalResult | None) -> RunCache | None:
        status = state.memory.get("validation_cache") or {}
        if not status.get("enabled") or baseline is None:
            return None
        threshold = eval_settings(task, state.settings).suspicious_speedup
        try:
            return cls(task, baseline.device.model_dump(), baseline, threshold)
        except Exception:  # the file went away or became unwritable mid-run: evaluate as usual
            return None

    def get(self, candidate: Candidate) -> EvalResult | None:
        stored = self.cache.get(candidate.identity, self.task, self.device)
        if stored is None:
            return None
        try:
            result = EvalResult.model_validate(stored)
        except ValueError:
            return None  # written by another version of the result model: evaluate again
        if result.passed and self._held_here(result):
            return None  # passed under a higher hold threshold: this run's evaluator must hold it
        result.identity = candidate.identity
        return result

    def _held_here(self, result: EvalResult) -> bool:
        """Whether this run's threshold would hold ``result`` against this run's baseline (the evaluator
        judges GPU timings only: interpreter times rank, they are never held)."""
        if self.suspicious_speedup is None or result.device.interpreted:
            return False
        return held_speedup(result, self.baseline, self.suspicious_speedup) is not None

    def put(self, candidate: Candidate, result: EvalResult) -> None:
        if result.error_type in RUN_DEPENDENT_ERRORS:
            return
        # A full disk or a locked file costs a later run one evaluation, no more.
        with contextlib.suppress(Exception):
            self.cache.put(candidate.identity, self.task, self.device, result)


def served_from_cache(
    cache: RunCache | None, candidates: list[Candidate], results: list[EvalResult | None], folder: RunFolder
) -> set[str]:
    """Fill ``results`` from the validation cache (identity + task + device + versions); the served
    results land in results/ like evaluated ones. Returns the identities served."""
    served: set[str] = set()
    if cache is None:
        return served
    for i, cand in enumerate(candidates):
        if results[i] is None and (hit := cache.get(cand)) is not None:
            folder.save_result(cand.identity, hit)
            results[i] = hit
            served.add(cand.identity)
    return served
