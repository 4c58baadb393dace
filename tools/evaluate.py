"""The evaluator: static checks here, then the judge (tools/judge.py) runs compile, correctness and
timing with each candidate in its own worker process, and the timings are judged here.

    python -m tools.evaluate TASK CANDIDATE.py [--config JSON] [--device cuda|cpu|auto] [--json]

Exit 0: passed; 1: the candidate was rejected; 2: the task or the command line is wrong.

Processes: this one (static checks, holds for review) never imports a candidate; the judge (one per task
and device, kept for the whole run) holds the inputs and expected outputs and compares; each candidate
runs in a worker the judge's zygote forks. A judge that dies is started again and its unfinished
candidates are sent again, once.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tools import sandbox
from tools.backend import LocalBackend
from tools.candidate import Candidate, candidate_identity
from tools.dispatch import geomean_or_none
from tools.results import EvalResult, ShapeTiming, merge_launch_resources
from tools.static_check import check_source
from tools.task import Task, TaskError, evaluator_overrides, load_task, unknown_fixed_dims
from tools.timing import TimingSettings

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class EvalSettings:
    seeds: int = 3
    check_timeout_s: float = 240.0
    timing_timeout_s: float = 300.0
    parallel: int | None = None
    # The roofline is the copy bandwidth, which counts each byte read and written; a read-only kernel
    # streams faster than a copy (gqa_decode's split kernel: 4.61 TB/s of reads at the margin, 109% of
    # the H200's 4.22 TB/s copy). Its HBM peak, 4.8 TB/s, is 114% of that copy: beyond 115% is not physics.
    suspicious_roofline_pct: float = 115.0
    suspicious_speedup: float = 10.0
    workdir: str | None = None
    timing: TimingSettings = field(default_factory=TimingSettings)
    # Resource limits of a worker process (sandbox): open files, core dumps off, address space on CPU.
    max_open_files: int = sandbox.MAX_OPEN_FILES
    cpu_address_space_bytes: int = 12 << 30
    max_file_bytes: int = 1 << 30  # any one file a worker writes (its log): a flood dies with SIGXFSZ
    # Extra correctness shapes drawn per run near the workload shapes (a kernel tuned to the benchmark
    # shapes only fails them); None draws a fresh seed each run.
    hidden_shapes: int = 1
    hidden_seed: int | None = None
    hidden_fixed_dims: list[str] = field(default_factory=list)  # kept at the first workload shape's size
    # Off only to test the run-time defenses behind the static checks.
    static_checks: bool = True
    # None: this machine's judge; "local:N" or "tcp://HOST:PORT": a Dask cluster (tools/cluster.py)
    cluster: str | None = None
    # The judge times each candidate as it passes while others are still checked (tools.judge_settings)
    overlap_timing: bool = False
    # Without overlap: a group's passed candidates are timed while its last checks still run (tools.judge_settings)
    early_timing: bool = False
    # Without overlap: at most this many candidates in a group, waiting for its timings; on a GPU a group also
    # closes when the device's free memory runs short (tools/batch_groups.py)
    max_waiting: int = 32
    # Triton's C launchers built once by the judge and copied into later workers' caches (tools.judge_settings)
    prebuilt_launchers: bool = True
    # The run's budget, as a wall-clock time (time.time()): a candidate's checks are cut when it runs out
    # (at least MIN_CHECK_S each, tools/session.py) instead of holding the round for check_timeout_s. None:
    # check_timeout_s alone. Not a judge setting: each request carries its own.
    run_deadline_unix: float | None = None

    @classmethod
    def for_task(cls, task: Task, **overrides: Any) -> EvalSettings:
        """The defaults, then the task's own (task.json "settings": {"evaluator": {...}}), then ``overrides``.

        A task whose baseline is naive declares a higher ``suspicious_speedup``: a correct kernel at the
        roofline may be far more than 10x faster. The roofline check holds every candidate regardless."""
        return cls(**(evaluator_overrides(task.spec.settings) | overrides))

    def for_judge(self, device: str) -> dict[str, Any]:
        """What the judge process is started with (tools.judge.JudgeSettings)."""
        return {
            "seeds": self.seeds,
            "check_timeout_s": self.check_timeout_s,
            "timing_timeout_s": self.timing_timeout_s,
            "parallel": self.parallel or _default_parallel(device),
            "max_open_files": self.max_open_files,
            "cpu_address_space_bytes": self.cpu_address_space_bytes,
            "file_bytes": self.max_file_bytes,
            "timing": asdict(self.timing),
            "overlap_timing": self.overlap_timing,
            "early_timing": self.early_timing,
            "max_waiting": self.max_waiting,
            "prebuilt_launchers": self.prebuilt_launchers,
        }


def resolve_device(device: str = "auto") -> str:
    if device not in {"auto", "cpu", "cuda"}:
        raise ValueError(f"device must be auto, cpu or cuda, not {device!r}")
    if device == "auto":
        try:
            import torch

            return "cuda" if torch.cuda.is_available() else "cpu"
        except ImportError:
            return "cpu"
    return device


def _default_parallel(device: str) -> int:
    # GPU: one check worker per core but one, at most 15: 24 at once broke five candidates of 24 with
    # runtime errors on the H200 (likely memory, several GB each at 16384x8192), 15 broke none
    # (bench/results/evaluator_baselines_h200.md).
    cores = os.cpu_count() or 1
    return max(1, min(cores - 1, 15)) if device == "cuda" else max(1, min(cores, 2))


def draw_hidden_shapes(task: Task, device: str, settings: EvalSettings) -> list[dict[str, int]]:
    """Shapes near the workload that the candidate's author cannot know in advance. The dims a task
    fixes (``hidden_fixed_dims``: a model's sizes) keep the first workload shape's sizes: one model."""
    rng = random.Random(settings.hidden_seed)
    if problem := unknown_fixed_dims(settings.hidden_fixed_dims, task.spec.shapes[0]):
        raise ValueError(f"evaluator.{problem}")
    known = [shape for shape, _ in task.workload(device) + task.check_workload(device)]
    workload = [shape for shape, _ in task.workload(device)]
    model = {dim: workload[0][dim] for dim in settings.hidden_fixed_dims}
    hidden: list[dict[str, int]] = []
    for _ in range(settings.hidden_shapes * 20):
        if len(hidden) >= settings.hidden_shapes:
            break
        base = rng.choice(workload)
        shape = {dim: model.get(dim, max(1, size + rng.randint(-3, 3))) for dim, size in base.items()}
        if shape not in known and shape not in hidden:
            hidden.append(shape)
    return hidden


# --------------------------------------------------------------------------------------------
# the evaluator


class Evaluator:
    """Evaluates candidates of one task on one device. Reuse it across rounds: one judge, whose input sets
    and references are made once."""

    def __init__(self, task: Task, device: str = "auto", settings: EvalSettings | None = None, backend: Any = None):
        self.task = task
        self.device = resolve_device(device)
        self.settings = settings or EvalSettings.for_task(task)
        self.calls = 0
        self._owns_backend = backend is None
        self.backend = backend or make_backend(task, self.device, self.settings)
        self.hidden_shapes = self.backend.hidden_shapes
        self.sandbox = sandbox.describe(self.device)

    @property
    def judge(self) -> Any:
        """The local backend's judge process (tests look at its zygote)."""
        return self.backend.judge

    def close(self) -> None:
        if self._owns_backend:
            self.backend.close()

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- static (here, no process) ------------------------------------------------------------
    def _static(self, cand: Candidate) -> EvalResult | None:
        problems = self.task.config_problems(cand.config, cand.module)
        if problems:
            return EvalResult.failure(
                "static", "out_of_search_space", "config outside the task's search space: " + "; ".join(problems)
            )
        report = check_source(cand.source, self.task.spec.constraints.forbid)
        if not report.ok and self.settings.static_checks:
            return EvalResult.failure("static", report.error_type or "forbidden_construct", report.message, report.log)
        return None

    def _job(self, key: int, cand: Candidate) -> dict[str, Any]:
        return {"key": key, "source": cand.source, "config": cand.config, "identity": cand.identity,
                "deadline_unix": self.settings.run_deadline_unix}  # fmt: skip

    def evaluate_many(
        self,
        candidates: list[Candidate],
        baseline: EvalResult | None = None,
        on_result: Callable[[int, EvalResult], None] | None = None,
    ) -> list[EvalResult]:
        started = time.perf_counter()
        results: list[EvalResult | None] = [None] * len(candidates)

        def done(i: int, result: EvalResult) -> None:
            result.identity = candidates[i].identity
            result.sandbox = self.sandbox
            results[i] = result
            if on_result:
                on_result(i, result)

        jobs = []
        for i, cand in enumerate(candidates):
            self.calls += 1
            rejected = self._static(cand)
            if rejected is not None:
                done(i, rejected)
            else:
                jobs.append(self._job(i, cand))
        if jobs:
            self.backend.evaluate(jobs, lambda key, raw: done(key, self._finish(raw, baseline)))
        elapsed = time.perf_counter() - started
        final = [r for r in results if r is not None]
        for r in final:
            r.seconds = r.seconds or elapsed / max(len(final), 1)
        return final

    def evaluate(self, cand: Candidate, baseline: EvalResult | None = None) -> EvalResult:
        return self.evaluate_many([cand], baseline)[0]

    def retime(self, candidates: list[Candidate]) -> list[EvalResult]:
        """Time candidates that already passed, each in a fresh worker, their repeats interleaved on one GPU
        (free of run-to-run drift), each cross-checked against the judge's own wall clock. GPU only."""
        if self.device != "cuda":
            raise RuntimeError("re-timing needs a GPU: interpreted timings only rank")
        answers = self.backend.retime([self._job(i, cand) for i, cand in enumerate(candidates)])
        out = []
        for i, cand in enumerate(candidates):
            result = self._finish(answers.get(i, {"verdict": "fail", "stage": "timing", "error_type": "runtime_error",
                                                  "message": "the judge returned no re-time"}), None)  # fmt: skip
            result.identity = cand.identity
            out.append(result)
        return out

    # -- merging ------------------------------------------------------------------------------
    def _finish(self, raw: dict, baseline: EvalResult | None) -> EvalResult:
        data = {k: v for k, v in raw.items() if k in EvalResult.model_fields}
        result = EvalResult.model_validate(data)
        if result.verdict != "pass":
            return result
        if raw.get("grids"):
            kernels = merge_launch_resources(raw["grids"], result.resources.get("kernels", []))
            result.resources["kernels"] = kernels
            for key in ("n_regs", "n_spills", "shared_bytes"):  # the worst over the timed shapes
                values = [k[key] for k in kernels if k.get(key) is not None]
                if values:
                    result.resources[key] = max(values)
        result.metrics.geomean_us = _geomean_us(result.metrics.per_shape)
        if self.device != "cuda":  # CPU: interpreted timings only
            result.stage = "done"
            return result
        return self._judge_timing(result, baseline)

    def _judge_timing(self, result: EvalResult, baseline: EvalResult | None) -> EvalResult:
        s = self.settings
        for row in result.metrics.per_shape:
            if row.spread > s.timing.unstable_spread:
                return _reject(
                    result,
                    "timing",
                    "unstable_timing",
                    f"median/min = {row.spread:.2f} over {s.timing.repeats} repeats at {row.shape} "
                    f"(> {s.timing.unstable_spread}); the measurement is not trustworthy",
                )
            if row.roofline_pct is not None and row.roofline_pct > s.suspicious_roofline_pct:
                result.details["held"] = "roofline"  # the measurement itself is wrong: never approvable
                return _reject(
                    result,
                    "timing",
                    "suspicious_speedup",
                    f"{row.gbps:.0f} GB/s at {row.shape} is {row.roofline_pct:.0f}% of the measured "
                    "copy bandwidth: faster than the roofline; held for human review",
                )
        held = held_speedup(result, baseline, s.suspicious_speedup)
        if held is not None:
            speedup, shape = held
            # plausible for a naive baseline, so a human may approve it after checking
            result.details["held"] = "speedup"
            return _reject(
                result,
                "timing",
                "suspicious_speedup",
                f"{speedup:.1f}x faster than the baseline at {shape} (hold "
                f"threshold {s.suspicious_speedup:g}x): held for human review",
            )
        result.stage = "done"
        return result


def held_speedup(
    result: EvalResult, baseline: EvalResult | None, threshold: float
) -> tuple[float, dict[str, int]] | None:
    """(speedup, shape) of the first shape where ``result`` beats ``baseline`` by more than
    ``threshold``x (the evaluator holds such a candidate for review), or None."""
    if baseline is None:
        return None
    base = {(json.dumps(r.shape, sort_keys=True), r.dtype): r.median_us for r in baseline.metrics.per_shape}
    for row in result.metrics.per_shape:
        ref = base.get((json.dumps(row.shape, sort_keys=True), row.dtype))
        if ref and row.median_us and ref / row.median_us > threshold:
            return ref / row.median_us, row.shape
    return None


def _reject(result: EvalResult, stage: str, error_type: str, message: str) -> EvalResult:
    result.verdict, result.stage, result.error_type, result.message = "fail", stage, error_type, message
    return result


def _geomean_us(per_shape: list[ShapeTiming]) -> float | None:
    """The geomean of the shapes' median times (those timed, > 0); None when no shape was timed."""
    return geomean_or_none(r.median_us for r in per_shape if r.median_us and r.median_us > 0)


# --------------------------------------------------------------------------------------------
# functional API: one judge per task and device for the life of this process (a run's rounds share it)

_SHARED: dict[tuple, Any] = {}
_SHARED_LOCK = threading.Lock()


def make_backend(task: Task, device: str, settings: EvalSettings) -> Any:
    """The backend ``settings.cluster`` names: None this machine's judge, else a Dask cluster."""
    root = Path(settings.workdir) if settings.workdir else Path(tempfile.mkdtemp(prefix="ka-eval-"))
    root.mkdir(parents=True, exist_ok=True)
    hidden = draw_hidden_shapes(task, device, settings)
    if settings.cluster:
        from tools.cluster import DaskBackend

        return DaskBackend(settings.cluster, task, device, settings.for_judge(device), hidden, root)
    return LocalBackend(str(task.folder), device, settings.for_judge(device), hidden, root)


def shared_backend(task: Task, device: str, settings: EvalSettings) -> Any:
    """The one judge (or cluster) per task, device and settings for the life of this process: a run's rounds,
    its watchdog and its anchors share its input sets and references."""
    key = (str(task.folder), device, json.dumps(settings.for_judge(device), sort_keys=True),
           settings.hidden_shapes, settings.hidden_seed, settings.workdir, settings.cluster)  # fmt: skip
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = make_backend(task, device, settings)
        return _SHARED[key]


@atexit.register
def close_shared_backends() -> None:
    with _SHARED_LOCK:
        for backend in _SHARED.values():
            backend.close()
        _SHARED.clear()


def evaluate_many(
    task: Task | str | Path,
    candidates: list[Candidate],
    *,
    device: str = "auto",
    baseline: EvalResult | None = None,
    on_result: Callable[[int, EvalResult], None] | None = None,
    settings: EvalSettings | None = None,
) -> list[EvalResult]:
    task = task if isinstance(task, Task) else load_task(task)
    device = resolve_device(device)
    settings = settings or EvalSettings.for_task(task)
    evaluator = Evaluator(task, device, settings, backend=shared_backend(task, device, settings))
    return evaluator.evaluate_many(candidates, baseline, on_result)


def measure_anchors(task: Task, device: str, settings: EvalSettings) -> list[dict[str, Any]]:
    """Per timed shape, the reference in eager and under a static torch.compile, timed by the run's judge
    (GPU only; an empty list on a CPU, whose interpreted times claim nothing)."""
    device = resolve_device(device)
    if device != "cuda":
        return []
    return shared_backend(task, device, settings).anchors()


def evaluate(
    task: Task | str | Path,
    source: str,
    config: dict | None = None,
    *,
    device: str = "auto",
    module: str | None = None,
    baseline: EvalResult | None = None,
    settings: EvalSettings | None = None,
) -> EvalResult:
    task = task if isinstance(task, Task) else load_task(task)
    cand = Candidate(source=source, config=dict(config or {}), module=module or task.baseline_name)
    return evaluate_many(task, [cand], device=device, baseline=baseline, settings=settings)[0]


# --------------------------------------------------------------------------------------------
# CLI


def _render(result: EvalResult) -> str:
    lines = [
        f"verdict: {result.verdict}   stage: {result.stage}"
        + (f"   error: {result.error_type}" if result.error_type else "")
    ]
    if result.message:
        lines.append(result.message)
    for row in result.metrics.per_shape:
        extra = f"  {row.gbps:8.0f} GB/s  {row.roofline_pct:5.1f}% of copy" if row.gbps else ""
        lines.append(
            f"  {json.dumps(row.shape):32s} {row.dtype:9s} {row.median_us:12.2f} us  ({row.method}){extra}"
        )
    if result.metrics.geomean_us:
        note = "  (interpreted: not a speed claim)" if result.device.interpreted else ""
        lines.append(f"geomean: {result.metrics.geomean_us:.2f} us{note}")
    if result.verdict == "fail" and result.log:
        lines.append("--- log ---")
        lines.append(result.log[-4000:])
    return "\n".join(lines)


CONFIG_EXAMPLE = """'{"BLOCK": 1024, "num_warps": 4}'"""


def _candidate_source(path: str) -> str:
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"candidate file not found: {file}" + (" (a folder)" if file.is_dir() else ""))
    return file.read_text()


def _config(text: str) -> dict[str, Any]:
    """--config as a JSON object; anything else is refused with what the flag wants."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError:
        config = None
    if not isinstance(config, dict):
        raise ValueError(f"--config takes a JSON object of search-space values, e.g. {CONFIG_EXAMPLE}; got {text!r}")
    return config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.evaluate", description=__doc__.split("\n\n")[0])
    parser.add_argument("task", help="task folder or its task.json")
    parser.add_argument("candidate", help="candidate module (.py)")
    parser.add_argument(
        "--config", default=None, help=f"a JSON object, e.g. {CONFIG_EXAMPLE}; default: the task's baseline config"
    )
    parser.add_argument("--module", default=None, help="which task module's search space the config is in")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--json", action="store_true", help="print one EvalResult as JSON")
    parser.add_argument("--timeout", type=float, default=None, help="seconds for compile + correctness")
    args = parser.parse_args(argv)
    try:
        task = load_task(args.task)
        source = _candidate_source(args.candidate)
        module = args.module or (
            Path(args.candidate).name if Path(args.candidate).name in task.module_names else task.default_module
        )
        config = _config(args.config) if args.config else task.default_config(module)
        device = resolve_device(args.device)
    except (TaskError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    settings = EvalSettings.for_task(task)
    if args.timeout:
        settings.check_timeout_s = args.timeout
    with Evaluator(task, device, settings) as evaluator:
        result = evaluator.evaluate(Candidate(source=source, config=config, module=module))
    print(result.model_dump_json(indent=2) if args.json else _render(result))
    if result.details.get("task_error"):  # the task's own reference or make_inputs failed
        print(f"error: the task is wrong: {result.message}", file=sys.stderr)
        return 2
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "EvalSettings", "Evaluator", "evaluate", "evaluate_many", "held_speedup", "resolve_device",
    "candidate_identity",
]  # fmt: skip
