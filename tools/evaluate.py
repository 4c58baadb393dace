"""The evaluator: static → compile → correctness → timing → done, each candidate in its own process.

    python -m tools.evaluate TASK CANDIDATE.py [--config JSON] [--device cuda|cpu|auto] [--json]

Exit 0: passed; 1: the candidate was rejected; 2: the task or the command line is wrong.

``evaluate_many`` runs static checks here, compile + correctness in parallel worker processes (one
per candidate, CPU cores permitting), then times the survivors one at a time per GPU in a timing
server that reuses each candidate's Triton cache, so nothing is compiled twice.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tools import sandbox
from tools.candidate import Candidate, candidate_identity
from tools.dispatch import geomean_or_none
from tools.results import EvalResult, ShapeTiming, merge_launch_resources
from tools.static_check import check_source
from tools.task import Task, TaskError, evaluator_overrides, load_task
from tools.timing import TimingSettings
from tools.zygote import Zygote

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
    max_open_files: int = 4096
    cpu_address_space_bytes: int = 12 << 30
    # Extra correctness shapes drawn per run near the workload shapes (a kernel tuned to the benchmark
    # shapes only fails them); None draws a fresh seed each run.
    hidden_shapes: int = 1
    hidden_seed: int | None = None
    # Off only to test the run-time sandbox behind the static checks.
    static_checks: bool = True
    # Fork check workers from one process that has imported torch and Triton already (tools/zygote.py)
    # instead of starting each in a fresh interpreter; off falls back to one interpreter per candidate.
    fork_workers: bool = field(
        default_factory=lambda: os.environ.get("KERNEL_AGENT_FORK_WORKERS", "1") != "0"
    )

    @classmethod
    def for_task(cls, task: Task, **overrides: Any) -> EvalSettings:
        """The defaults, then the task's own (task.json "settings": {"evaluator": {...}}), then ``overrides``.

        A task whose baseline is naive declares a higher ``suspicious_speedup``: a correct kernel at the
        roofline may be far more than 10x faster. The roofline check holds every candidate regardless."""
        return cls(**(evaluator_overrides(task.spec.settings) | overrides))


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


# --------------------------------------------------------------------------------------------
# one worker process


def _worker_env(device: str, triton_cache: Path, scratch: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TRITON_CACHE_DIR"] = str(triton_cache)
    (scratch / "tmp").mkdir(parents=True, exist_ok=True)
    env["TMPDIR"] = str(scratch / "tmp")  # temporary files stay in the sandbox
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    sandbox.kill_group(proc.pid)
    proc.wait()


def _run_check_worker(job: dict, scratch: Path, settings: EvalSettings, zygote: Zygote | None = None) -> dict:
    job_file, out_file = scratch / "job.json", scratch / "check.json"

    def fresh_job() -> None:
        job_file.write_text(json.dumps({**job, "spawned_at": time.time()}))
        out_file.unlink(missing_ok=True)

    fresh_job()
    argv = ["check", str(job_file), str(out_file)]
    env = _worker_env(job["device"], Path(job["triton_cache"]), scratch)
    limits = {
        "max_open_files": settings.max_open_files,
        "cpu_seconds": settings.check_timeout_s * 2 + 60,
        "address_space": settings.cpu_address_space_bytes if job["device"] == "cpu" else None,
    }
    outcome = None
    if zygote is not None and zygote.alive:
        own = {key: env[key] for key in ("TRITON_CACHE_DIR", "TMPDIR")}
        try:
            outcome = zygote.run(argv, scratch, own, limits, settings.check_timeout_s)
        except RuntimeError:  # the zygote failed (its worker is killed): a fresh interpreter instead
            fresh_job()
    returncode, text = outcome or _spawn_worker(argv, scratch, env, limits, settings.check_timeout_s)
    if returncode is None:
        return {
            "verdict": "fail",
            "stage": "correctness",
            "error_type": "timeout",
            "message": f"the candidate did not finish within {settings.check_timeout_s:.0f} s "
            "(hang or runaway loop); its worker was killed",
        }
    if out_file.exists():
        result = json.loads(out_file.read_text())
        if result.get("verdict") == "fail" and not result.get("log"):
            result["log"] = text[-20000:]
        return result
    return _died(returncode, text, "correctness")


def _spawn_worker(
    argv: list[str], scratch: Path, env: dict[str, str], limits: dict[str, Any], timeout: float
) -> tuple[int | None, str]:
    """A worker in a fresh interpreter: (exit code, output), exit code None when killed at timeout."""
    proc = subprocess.Popen(
        [*sandbox.network_isolation(), sys.executable, "-P", "-m", "tools.worker", *argv],
        cwd=scratch,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=sandbox.limits(**limits),
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return None, ""
    return proc.returncode, output.decode(errors="replace")


def _died(returncode: int | None, output: str, stage: str) -> dict:
    error_type = "crash"
    if returncode == -signal.SIGXCPU:
        error_type = "timeout"
        message = "the worker used up its CPU-time limit (SIGXCPU): the candidate computes on the host"
    elif returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name
        message = f"the worker died with {name} (e.g. an out-of-bounds access)"
    else:
        message = f"the worker exited with status {returncode} without a result"
    return {
        "verdict": "fail",
        "stage": stage,
        "error_type": error_type,
        "message": message,
        "log": output[-20000:],
    }


class TimingServer:
    """A long-lived timing worker on one GPU; restarted after a crash, timeout or tampering."""

    def __init__(self, settings: EvalSettings, scratch_root: Path):
        self.settings = settings
        self.scratch_root = scratch_root
        self.proc: subprocess.Popen | None = None

    def start(self) -> subprocess.Popen:
        log = open(self.scratch_root / "timing_server.log", "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            [*sandbox.network_isolation(), sys.executable, "-P", "-m", "tools.worker", "serve"],
            cwd=self.scratch_root,
            env=_worker_env("cuda", self.scratch_root / "triton_cache_unused", self.scratch_root),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            preexec_fn=sandbox.limits(self.settings.max_open_files, cpu_seconds=None, address_space=None),
        )
        return self.proc

    def time(self, job: dict) -> dict:
        proc = self.proc if self.proc and self.proc.poll() is None else self.start()
        out = Path(job["out"])
        out.unlink(missing_ok=True)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write((json.dumps(job) + "\n").encode())
        proc.stdin.flush()
        line: list[bytes] = []
        reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(self.settings.timing_timeout_s)
        if reader.is_alive():
            _kill_group(proc)
            return {
                "verdict": "fail",
                "stage": "timing",
                "error_type": "timeout",
                "message": f"timing did not finish within {self.settings.timing_timeout_s:.0f} s",
            }
        if out.exists():
            result = json.loads(out.read_text())
            if result.get("tampered") or proc.poll() is not None:
                self.close()
            return result
        proc.wait(timeout=30)
        log = (self.scratch_root / "timing_server.log").read_bytes().decode(errors="replace")
        self.proc = None
        return _died(proc.returncode, log, "timing")

    def close(self) -> None:
        if self.proc is not None:
            sandbox.stop_server(self.proc)
        self.proc = None


# --------------------------------------------------------------------------------------------
# the evaluator


class Evaluator:
    """Evaluates candidates of one task on one device. Reuse it across rounds (one timing server)."""

    def __init__(self, task: Task, device: str = "auto", settings: EvalSettings | None = None):
        self.task = task
        self.device = resolve_device(device)
        self.settings = settings or EvalSettings.for_task(task)
        root = (
            Path(self.settings.workdir)
            if self.settings.workdir
            else Path(tempfile.mkdtemp(prefix="ka-eval-"))
        )
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self._server: TimingServer | None = None
        self._zygote: Zygote | None = None
        self.calls = 0
        # wall seconds per phase over this evaluator's life: where a batch's time goes
        self.phase_seconds = {"static": 0.0, "check": 0.0, "timing": 0.0}
        self.hidden_shapes = draw_hidden_shapes(task, self.device, self.settings)
        self.sandbox = sandbox.describe(self.device)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None

    def _worker_source(self) -> Zygote | None:
        """The zygote that forks check workers (started once, restarted if it died), or None."""
        if not self.settings.fork_workers:
            return None
        if self._zygote is None or not self._zygote.alive:
            if self._zygote is not None:
                self._zygote.close()
            env = _worker_env(self.device, self.root / "zygote_triton_cache", self.root)
            env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # an is_available() there must not initialize CUDA
            self._zygote = Zygote(sandbox.network_isolation(), self.root, env, self.settings.max_open_files)
        return self._zygote

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- static (here, no process) ------------------------------------------------------------
    def _static(self, cand: Candidate) -> EvalResult | None:
        problems = self.task.config_problems(cand.config, cand.module)
        if problems:
            return EvalResult.failure(
                "static",
                "out_of_search_space",
                "config outside the task's search space: " + "; ".join(problems),
            )
        report = check_source(cand.source, self.task.spec.constraints.forbid)
        if not report.ok and self.settings.static_checks:
            return EvalResult.failure(
                "static", report.error_type or "forbidden_construct", report.message, report.log
            )
        return None

    def _job(self, cand: Candidate, scratch: Path) -> dict:
        path = scratch / "candidate.py"
        path.write_text(cand.source)
        return {
            "task": str(self.task.folder),
            "candidate": str(path),
            "config": cand.config,
            "device": self.device,
            "identity": cand.identity,
            "seeds": self.settings.seeds,
            "hidden_shapes": self.hidden_shapes,
            "triton_cache": str(scratch / "triton_cache"),
        }

    def evaluate_many(
        self,
        candidates: list[Candidate],
        baseline: EvalResult | None = None,
        on_result: Callable[[int, EvalResult], None] | None = None,
    ) -> list[EvalResult]:
        started = time.perf_counter()
        results: list[EvalResult | None] = [None] * len(candidates)
        jobs: dict[int, dict] = {}
        for i, cand in enumerate(candidates):
            self.calls += 1
            rejected = self._static(cand)
            if rejected is not None:
                rejected.identity = cand.identity
                results[i] = rejected
                if on_result:
                    on_result(i, rejected)
                continue
            scratch = self.root / f"{cand.identity}-{time.time_ns()}"
            (scratch / "triton_cache").mkdir(parents=True)
            jobs[i] = self._job(cand, scratch)

        checking = time.perf_counter()
        self.phase_seconds["static"] += checking - started
        checked: dict[int, dict] = {}
        if self.device == "cuda" and jobs and self._server is None:
            # Start the timing server now: its imports overlap the checks instead of following them.
            self._server = TimingServer(self.settings, self.root)
            self._server.start()
        workers = self.settings.parallel or _default_parallel(self.device)
        zygote = self._worker_source()
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            futures = {
                i: pool.submit(_run_check_worker, job, Path(job["candidate"]).parent, self.settings, zygote)
                for i, job in jobs.items()
            }
            for i, fut in futures.items():
                checked[i] = fut.result()
                if checked[i].get("verdict") != "pass" or self.device != "cuda":
                    results[i] = self._finish(candidates[i], checked[i], None, baseline)
                    if on_result:
                        on_result(i, results[i])

        timing = time.perf_counter()
        self.phase_seconds["check"] += timing - checking
        if self.device == "cuda":
            for i, job in jobs.items():
                if checked[i].get("verdict") != "pass":
                    continue
                timing_job = {
                    **job,
                    "out": str(Path(job["candidate"]).parent / "timing.json"),
                    "timing": asdict(self.settings.timing),
                }
                assert self._server is not None  # started before the checks
                timed_at = time.perf_counter()
                timed = self._server.time(timing_job)
                results[i] = self._finish(candidates[i], checked[i], timed, baseline)
                results[i].stage_seconds["timing"] = time.perf_counter() - timed_at
                if on_result:
                    on_result(i, results[i])
        self.phase_seconds["timing"] += time.perf_counter() - timing
        elapsed = time.perf_counter() - started
        final = [r for r in results if r is not None]
        for r in final:
            r.sandbox = self.sandbox
            r.seconds = r.seconds or elapsed / max(len(final), 1)
        return final

    def evaluate(self, cand: Candidate, baseline: EvalResult | None = None) -> EvalResult:
        return self.evaluate_many([cand], baseline)[0]

    def retime(self, candidates: list[Candidate]) -> list[EvalResult]:
        """Time candidates that already passed back to back in one timing-server job (same process,
        repeats interleaved), for comparisons free of run-to-run drift. GPU only.

        Each result carries timings only (static and correctness are not repeated) and is judged for
        unstable or suspicious timing like any other."""
        if self.device != "cuda":
            raise RuntimeError("re-timing in one process needs a GPU: interpreted timings only rank")
        scratch = self.root / f"retime-{time.time_ns()}"
        (scratch / "triton_cache").mkdir(parents=True)
        entries = []
        for i, cand in enumerate(candidates):
            path = scratch / f"candidate_{i}.py"
            path.write_text(cand.source)
            entries.append({"candidate": str(path), "config": cand.config, "identity": cand.identity})
        job = {
            "kind": "compare",
            "task": str(self.task.folder),
            "identity": "compare",
            "candidates": entries,
            "triton_cache": str(scratch / "triton_cache"),
            "out": str(scratch / "timing.json"),
            "timing": asdict(self.settings.timing),
        }
        if self._server is None:
            self._server = TimingServer(self.settings, self.root)
        timed = self._server.time(job)
        fields = EvalResult.model_fields
        results = []
        for i, cand in enumerate(candidates):
            entry = (timed.get("results") or [timed] * len(candidates))[i]
            data = {k: v for k, v in entry.items() if k in fields and k != "metrics"}
            result = EvalResult.model_validate({**data, "device": timed.get("device", {})})
            result.identity = cand.identity
            if result.passed:
                result.metrics = result.metrics.model_validate(entry["metrics"])
                result.metrics.geomean_us = _geomean_us(result.metrics.per_shape)
                result = self._judge_timing(result, None)
            results.append(result)
        return results

    # -- merging ------------------------------------------------------------------------------
    def _finish(
        self, cand: Candidate, checked: dict, timed: dict | None, baseline: EvalResult | None
    ) -> EvalResult:
        data = {k: v for k, v in checked.items() if k in EvalResult.model_fields}
        result = EvalResult.model_validate(data)
        result.identity = cand.identity
        if result.verdict != "pass":
            return result
        if timed is None:  # CPU: interpreted timings only
            result.stage = "done"
            result.metrics.geomean_us = _geomean_us(result.metrics.per_shape)
            return result
        if timed.get("verdict") != "pass":
            merged = EvalResult.model_validate(
                {**data, **{k: v for k, v in timed.items() if k in EvalResult.model_fields}}
            )
            merged.identity = cand.identity
            return merged
        result.metrics = result.metrics.model_validate(timed["metrics"])
        if timed.get("grids"):
            kernels = merge_launch_resources(timed["grids"], result.resources.get("kernels", []))
            result.resources["kernels"] = kernels
            for key in ("n_regs", "n_spills", "shared_bytes"):  # the worst over the timed shapes
                values = [k[key] for k in kernels if k.get(key) is not None]
                if values:
                    result.resources[key] = max(values)
        result.metrics.geomean_us = _geomean_us(result.metrics.per_shape)
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


def draw_hidden_shapes(task: Task, device: str, settings: EvalSettings) -> list[dict[str, int]]:
    """Shapes near the workload that the candidate's author cannot know in advance."""
    rng = random.Random(settings.hidden_seed)
    known = [shape for shape, _ in task.workload(device) + task.check_workload(device)]
    hidden: list[dict[str, int]] = []
    for _ in range(settings.hidden_shapes * 20):
        if len(hidden) >= settings.hidden_shapes:
            break
        base = rng.choice([shape for shape, _ in task.workload(device)])
        shape = {dim: max(1, size + rng.randint(-3, 3)) for dim, size in base.items()}
        if shape not in known and shape not in hidden:
            hidden.append(shape)
    return hidden


def _reject(result: EvalResult, stage: str, error_type: str, message: str) -> EvalResult:
    result.verdict, result.stage, result.error_type, result.message = "fail", stage, error_type, message
    return result


def _geomean_us(per_shape: list[ShapeTiming]) -> float | None:
    """The geomean of the shapes' median times (those timed, > 0); None when no shape was timed."""
    return geomean_or_none(r.median_us for r in per_shape if r.median_us and r.median_us > 0)


def _default_parallel(device: str) -> int:
    # GPU: one check worker per core but one, at most 15: 24 at once broke five candidates of 24 with
    # runtime errors on the H200 (likely memory, several GB each at 16384x8192), 15 broke none
    # (bench/results/evaluator_baselines_h200.md).
    cores = os.cpu_count() or 1
    return max(1, min(cores - 1, 15)) if device == "cuda" else max(1, min(cores, 2))


# --------------------------------------------------------------------------------------------
# functional API


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
    with Evaluator(task, device, settings) as evaluator:
        return evaluator.evaluate_many(candidates, baseline, on_result)


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.evaluate", description=__doc__.split("\n\n")[0])
    parser.add_argument("task", help="task folder or its task.json")
    parser.add_argument("candidate", help="candidate module (.py)")
    parser.add_argument("--config", default=None, help="JSON object; default: the task's baseline config")
    parser.add_argument("--module", default=None, help="which task module's search space the config is in")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--json", action="store_true", help="print one EvalResult as JSON")
    parser.add_argument("--timeout", type=float, default=None, help="seconds for compile + correctness")
    args = parser.parse_args(argv)
    try:
        task = load_task(args.task)
        source = Path(args.candidate).read_text()
        module = args.module or (
            Path(args.candidate).name
            if Path(args.candidate).name in task.module_names
            else task.baseline_name
        )
        config = json.loads(args.config) if args.config else task.default_config(module)
        if not isinstance(config, dict):
            raise ValueError("--config must be a JSON object")
        device = resolve_device(args.device)
    except (TaskError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    settings = EvalSettings.for_task(task)
    if args.timeout:
        settings.check_timeout_s = args.timeout
    result = evaluate(task, source, config, device=device, module=module, settings=settings)
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
