"""The judge: one long-lived trusted process per device that never imports a candidate.

    python -m tools.judge_boot   (started by tools.evaluate; JSON lines on stdin, replies on stdout)

It loads the task, makes every (shape, dtype, seed) input set and the reference's outputs once per run
(tools/references.py), measures the device's copy bandwidth, and drives candidate workers
(tools/worker.py, forked by its zygote, each in its own process and CUDA context). A worker gets copies
of the inputs in its arena and hands back its outputs there; the judge compares them with the expected
outputs it alone holds, checks the inputs and the guard bands after every call, checks determinism,
and checks the outputs of every timed CUDA-graph replay. Nothing a verdict depends on lives in a process
where candidate code has run.

Requests: ``{"op": "evaluate", "id", "jobs": [...]}`` streams ``{"id", "key", "result"}`` per job, then
``{"id", "done": true}``; ``{"op": "retime", "id", "jobs": [...]}`` answers ``{"id", "results": {...}}``
(GPU); ``{"op": "anchors", "id"}`` answers ``{"id", "anchors": [...]}`` (GPU). The first line on stdin is
the start request (task, device, settings, hidden shapes, folder); the judge answers ``{"ready": true,
...}``. Its parts: ``tools/session.py`` (a worker from the judge's side), ``tools/checks.py`` (compile and
correctness), ``tools/timed.py`` (checked timing and the re-measure of a win), ``tools/references.py``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import queue
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from tools import lifeline, process_seal, staging
from tools.batch_groups import AliveLimit, MemoryRoom, check_in_groups
from tools.checks import Checks
from tools.compare import compare, same_bits
from tools.gpu_gate import GpuGate
from tools.judge_settings import (
    FRESH_SEED,
    SAMPLES_PER_OUTPUT,
    TASK_ERROR,
    JudgeSettings,
    Verdict,
    device_info,
    device_limits,
)
from tools.launcher_cache import LauncherCache, c_launchers
from tools.references import Entry, ReferenceCache, TaskFailure
from tools.session import Session
from tools.task import bytes_moved, load_task
from tools.timed import Retime, Timing
from tools.timing import TimingSettings, copy_bandwidth_gbps, copy_time_us, flush_l2, time_fn
from tools.zygote import Zygote, start_zygote

# Checks (or timings) of one candidate run again after the judge itself ran out of device memory: big
# tasks' reference caches, arenas and comparisons share one device with 15 workers (a softmax brute force
# on the H200 lost 3 of 72 candidates to it).
JUDGE_OOM_RETRIES = 2


class Judge:
    def __init__(self, start: dict[str, Any], zygote: Zygote | None = None):
        self.task = load_task(start["task"])
        self.device = start["device"]
        raw = dict(start.get("settings", {}))
        raw["timing"] = TimingSettings(**raw.get("timing", {}))
        self.settings = JudgeSettings(**raw)
        self.hidden = [dict(s) for s in start.get("hidden_shapes", [])]
        self.root = Path(start["workdir"])
        self.setup_s: dict[str, float] = {}  # where the judge's own start went (the bench reports it)
        lap = time.perf_counter()
        self._zygote: Zygote | None = zygote  # started by tools/judge_boot.py before this process's imports
        self._zygote_lock = threading.Lock()
        self.zygote()  # first: its imports and warm-up (seconds) overlap this judge's own setup
        lap = self._lap("zygote_spawn", lap)
        budget = 0
        if self.device == "cuda":
            torch.cuda.init()
            budget = int(torch.cuda.get_device_properties(0).total_memory * self.settings.references_share)
        self.gate = GpuGate()  # checks share the GPU, a timed run has it alone
        memory = Path(self.settings.launcher_memory) if self.settings.launcher_memory else None
        prebuild = self.settings.prebuilt_launchers and self.device == "cuda" and c_launchers()
        self.launchers = LauncherCache(self.root / "launchers", prebuild, memory)
        self.refs = ReferenceCache(self.task, self.device, budget, self.gate)
        self.limits = device_limits(self.device)
        self.info = device_info(self.device)
        lap = self._lap("device", lap)
        self.copy_gbps = copy_bandwidth_gbps(self.settings.timing) if self.device == "cuda" else None
        self.flush_us = _flush_us() if self.device == "cuda" else 0.0
        self._lap("copy_bandwidth", lap)
        self._layout: staging.Layout | None = None
        self._layout_lock = threading.Lock()
        self._retry_lock = threading.Lock()  # one re-check at a time after the judge ran out of memory
        self._arenas: staging.ArenaPool | None = None
        self._degenerate: str | None = None
        self._ceilings: dict[int, float] = {}
        self.out_lock = threading.Lock()
        self.overlapping = self.device == "cuda" and self.settings.overlap_timing
        # timings that may run while checks do: each shape of a timing holds the GPU alone (the gate), and
        # the checks' Triton compiling is moved into commands that launch nothing
        self.timing_beside_checks = self.device == "cuda" and (self.overlapping or self.settings.early_timing)

    def alone_on_gpu(self) -> contextlib.AbstractContextManager:
        """Held around each shape of a timing: nothing else on the GPU meanwhile. Between two shapes the
        checks waiting for the GPU go on, so a candidate's ten timed shapes do not hold them all up."""
        return self.gate.exclusive() if self.timing_beside_checks else contextlib.nullcontext()

    def _lap(self, step: str, since: float) -> float:
        now = time.perf_counter()
        self.setup_s[step] = round(now - since, 3)
        return now

    # -- the workload ---------------------------------------------------------------------------
    def check_pairs(self) -> list[tuple[dict, str]]:
        extra = [(shape, dtype) for shape in self.hidden for dtype in self.task.dtypes]
        return self.task.workload(self.device) + self.task.check_workload(self.device) + extra

    def compile_pair(self) -> tuple[dict, str]:
        pairs = self.task.workload(self.device) + self.task.check_workload(self.device)
        return min(pairs, key=lambda sd: math.prod(sd[0].values()))

    def every_entry(self) -> list[tuple[dict, str, int]]:
        """Seed 0 of every pair first (the arena's size needs them), then each pair's other sets in the
        order the checks use them."""
        pairs = self.check_pairs()
        by_size = sorted(pairs, key=lambda sd: math.prod(sd[0].values()))
        rest = [s for seed in range(self.settings.seeds) for s in (seed, FRESH_SEED + seed)][1:]
        return [(sh, dt, 0) for sh, dt in by_size] + [(sh, dt, seed) for sh, dt in pairs for seed in rest]

    def entry(self, shape: dict, dtype: str, seed: int, stage: str) -> Entry:
        try:
            return self.refs.get(shape, dtype, seed)
        except TaskFailure as failure:
            raise Verdict(stage, "runtime_error", failure.message, failure.log, details=dict(TASK_ERROR)) from None

    def prepare(self) -> None:
        """Every input set and reference of the run, made in parallel (slow make_inputs run once) while the
        zygote, started with the judge, imports and warms up: it would otherwise hold up every worker of
        the first batch."""
        threads = max(2, (os.cpu_count() or 2) // 2)
        threading.Thread(target=self.refs.prefetch, args=(self.every_entry(), threads), daemon=True).start()
        if self.device == "cuda":
            threading.Thread(target=self._warm_close_scan, daemon=True).start()

    def _warm_close_scan(self) -> None:
        """The GPU comparison's kernels compiled for the outputs' dtypes before the first checks need them."""
        from tools import close_scan

        try:
            entry = self.refs.get(*self.compile_pair(), 0)
        except TaskFailure:
            return  # the checks say it
        with self.gate.shared():
            failed = close_scan.warm({t.dtype for t in entry.expected}, self.device)
        if failed:
            print(f"judge: the GPU close scan is off, torch compares every output: {failed}", file=sys.stderr)

    def layout(self) -> staging.Layout:
        """The arena layout: room for the largest input set and output set of the run (waits for them)."""
        with self._layout_lock:
            if self._layout is None:
                inputs = outputs = 0
                for shape, dtype in self.check_pairs():
                    try:
                        e = self.refs.get(shape, dtype, 0)
                    except TaskFailure:
                        continue
                    inputs = max(inputs, staging.Layout.input_span(e.inputs))
                    outputs = max(outputs, sum(staging._aligned(t.numel() * t.element_size()) for t in e.expected))
                self._layout = staging.Layout(inputs, outputs, self._log_bytes(outputs))
            return self._layout

    def arenas(self) -> staging.ArenaPool:
        layout = self.layout()
        with self._layout_lock:
            if self._arenas is None:
                self._arenas = staging.ArenaPool(layout.size, self.device, self.root / "arenas")
            return self._arenas

    def _log_bytes(self, outputs: int) -> int:
        n_out = max((len(self.refs.get(s, d, 0).expected) for s, d in self.task.workload(self.device)
                     if self._ok(s, d)), default=1)  # fmt: skip
        return 8 * 4 * 1000 * n_out * (1 + SAMPLES_PER_OUTPUT)  # 4 benches x 1000 runs at most

    def _ok(self, shape: dict, dtype: str) -> bool:
        try:
            self.refs.get(shape, dtype, 0)
            return True
        except TaskFailure:
            return False

    def degenerate(self) -> str:
        """Why the reference cannot tell kernels apart ("" when it can): at every shape its outputs are the
        same whatever the inputs, so a kernel writing those constants passes. Decided once."""
        with self._layout_lock:
            if self._degenerate is None:
                self._degenerate = self._find_degenerate()
            return self._degenerate

    def _find_degenerate(self) -> str:
        other = 1 if self.settings.seeds > 1 else FRESH_SEED
        for shape, dtype in self.check_pairs():
            try:
                a, b = self.refs.get(shape, dtype, 0), self.refs.get(shape, dtype, other)
            except TaskFailure:
                return ""
            if not same_bits(a.expected, b.expected):
                return ""
        return ("the reference's outputs do not depend on its inputs: at every shape two different input sets give "
                "bit-identical outputs, so any kernel writing those values would pass; make_inputs or the reference "
                "is degenerate")  # fmt: skip

    # -- workers --------------------------------------------------------------------------------
    def zygote(self, replacing: Zygote | None = None) -> Zygote:
        """The zygote that forks workers: started once, again when it died or failed (``replacing``)."""
        with self._zygote_lock:
            if self._zygote is None or not self._zygote.alive or self._zygote is replacing:
                if self._zygote is not None:
                    self._zygote.close()
                self._zygote = start_zygote(self.device, self.root, self.settings.max_open_files)
            return self._zygote

    def worker_limits(self) -> dict[str, Any]:
        s = self.settings
        return {"max_open_files": s.max_open_files, "cpu_seconds": s.check_timeout_s * 2 + s.timing_timeout_s + 60,
                "address_space": s.cpu_address_space_bytes if self.device == "cpu" else None,
                "file_bytes": s.file_bytes}  # fmt: skip

    def close(self) -> None:
        if self._zygote is not None:
            self._zygote.close()
        if self._arenas is not None:
            self._arenas.close()

    # -- results --------------------------------------------------------------------------------
    def row(self, shape: dict, dtype: str, entry: Entry, medians: list[float], method: str) -> dict[str, Any]:
        median, low = sorted(medians)[len(medians) // 2], min(medians)
        moved = bytes_moved(self.task, entry.inputs, entry.expected)
        gbps = moved / (median * 1e-6) / 1e9
        row = {"shape": shape, "dtype": dtype, "median_us": median, "min_us": low,
               "spread": median / low if low > 0 else float("inf"), "gbps": gbps,
               "roofline_pct": 100 * gbps / self.copy_gbps if self.copy_gbps else None, "method": method,
               "bytes": moved}  # fmt: skip
        if self.task.spec.flops:
            row["tflops"] = self.task.spec.flops / (median * 1e-6) / 1e12
        ceiling = self.ceiling_us(moved)
        if ceiling:
            row.update(ceiling_us=ceiling, ceiling_pct=100 * ceiling / median)
        return row

    def ceiling_us(self, moved: int) -> float | None:
        """A device copy of ``moved`` bytes (half read, half written), timed here once per size: what a
        memory-bound kernel of this size can reach, ramp-up and tail included (the 1 GiB copy hides them).
        Measured while this judge's GPU is quiet: timing runs only after the checks."""
        if self.device != "cuda":
            return None
        with self._layout_lock:
            if moved not in self._ceilings:
                self._ceilings[moved] = copy_time_us(moved, self.settings.timing)
            return self._ceilings[moved]

    def evaluate_one(self, job: dict[str, Any], time_it: bool) -> tuple[dict[str, Any], Session | None]:
        """Compile + correctness; (result, the open session when it passed and will be timed). The judge
        running out of device memory is no verdict on the candidate: its cache is emptied and the candidate
        checked again, one retried candidate at a time."""
        result, session = self._evaluate_once(job, time_it)
        for _ in range(JUDGE_OOM_RETRIES):
            if not result.get("details", {}).get("judge_out_of_memory"):
                break
            with self._retry_lock:
                _free_judge_memory()
                result, session = self._evaluate_once(job, time_it)
        return result, session

    def _evaluate_once(self, job: dict[str, Any], time_it: bool) -> tuple[dict[str, Any], Session | None]:
        session = Session(self, job)
        checks = Checks(session)
        try:
            with session.phase("startup"):
                session.open(session.check_limit_s)
            with self.gate.shared():
                degenerate = self.degenerate()
            if degenerate:
                raise Verdict("correctness", "runtime_error", degenerate, details=dict(TASK_ERROR))
            with session.phase("compile"):
                checks.compile()
            session.stage = "correctness"
            with session.phase("correctness"):
                checks.correctness()
            result: dict[str, Any] = {"verdict": "pass", "stage": "correctness"}
            if self.device != "cuda":
                with session.phase("interpreter_timing"):
                    result["metrics"] = {"per_shape": checks.interpreted_times(), "runs": 3}
        except Verdict as verdict:
            session.close()
            return self._finish(verdict.fields, session, checks), None
        except Exception as exc:  # the judge's own fault: said, never hidden
            session.close()
            return self._finish(_internal(exc), session, checks), None
        if time_it:
            try:
                session.park()
            except Verdict as verdict:
                session.close()
                return self._finish(verdict.fields, session, checks), None
            return self._finish(result, session, checks), session
        problem = session.close()
        if problem:
            result = Verdict("correctness", "forbidden_construct", problem).fields
        return self._finish(result, session, checks), None

    def time_one(self, session: Session, checked: dict[str, Any]) -> dict[str, Any]:
        session.stage = "timing"
        session.deadline = time.monotonic() + self.settings.timing_timeout_s
        with session.phase("timing"):
            try:
                session.unpark()
                metrics, kernels = self._timed(session)
                result = {**checked, "stage": "timing", "metrics": metrics, "grids": kernels}
            except Verdict as verdict:
                result = {**checked, **verdict.fields}
            except Exception as exc:
                result = {**checked, **_internal(exc)}
            problem = session.close()
        if problem and result.get("verdict") == "pass":
            result = {**checked, **Verdict("timing", "forbidden_construct", problem).fields}
        result["stage_seconds"] = dict(session.seconds)
        return result

    def _timed(self, session: Session) -> tuple[dict[str, Any], Any]:
        for _ in range(JUDGE_OOM_RETRIES):
            try:
                return Timing(session).run()
            except torch.OutOfMemoryError:  # the judge's own: its cache emptied, the candidate timed again
                with self._retry_lock:
                    _free_judge_memory()
        return Timing(session).run()

    def _finish(self, result: dict[str, Any], session: Session, checks: Checks) -> dict[str, Any]:
        result = dict(result)
        result["device"] = self.info
        result.setdefault("resources", session.resources)
        details = result.setdefault("details", {})
        details.setdefault("checks", checks.count)
        details.setdefault("hidden_shapes", self.hidden)
        result["stage_seconds"] = dict(session.seconds)
        return result

    def wall_clock_us(self, session: Session, per_call_us: float) -> float:
        """The candidate's time per replay by the judge's own clock: K flushed replays in the worker, the
        round trip of an empty request and the judge's own flush time taken off."""
        k = int(min(5000, max(20, self.settings.confirm_wall_ms * 1000 / (per_call_us + self.flush_us))))
        t0 = time.perf_counter()
        session.ask("replay_k", k=0, stage="timing")
        empty = time.perf_counter() - t0
        t0 = time.perf_counter()
        session.ask("replay_k", k=k, stage="timing")
        full = time.perf_counter() - t0
        return (full - empty) / k * 1e6 - self.flush_loop_us(k)

    def writeback_us(self, entry: Entry) -> float:
        """The longest the outputs still in the L2 can take to be written back (at half the copy rate)."""
        if not self.copy_gbps:
            return 0.0
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or (60 << 20)
        dirty = min(entry.output_bytes(), l2)
        return dirty / (self.copy_gbps / 2 * 1e9) * 1e6

    def flush_loop_us(self, k: int) -> float:
        """Per flush, K flushes back to back in this process by the wall clock (the same loop the worker
        runs, less the candidate's replays)."""
        flush_l2()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(k):
            flush_l2()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / k * 1e6

    def anchors(self, request: dict[str, Any], say: Any) -> None:
        """The reference in eager and under a fresh static torch.compile at each timed shape, timed as
        candidates are (CUDA-graph replay after a clean flush) on this GPU: what a task without a baseline
        kernel is measured against. Each output is checked first; a failure is reported, not timed."""
        rows = []
        for shape, dtype in self.task.workload("cuda"):
            entry = self.entry(shape, dtype, 0, "timing")
            row: dict[str, Any] = {"shape": shape, "dtype": dtype}
            with self.refs.alone.exclusive():  # no input set is drawn while torch.compile moves the RNG
                for label, fn in (("eager", self.task.reference), ("compile", None)):
                    row[label] = self._anchor(fn, entry)
            rows.append(row)
        say({"id": request["id"], "anchors": rows, "done": True})

    def _anchor(self, fn: Any, entry: Entry) -> dict[str, Any]:
        inputs = tuple(t.to("cuda").clone() for t in entry.inputs)
        try:
            if fn is None:  # compiled afresh for this shape alone (dynamic=False): what a user would pick
                torch._dynamo.reset()
                fn = torch.compile(self.task.reference, dynamic=False)
            with torch.no_grad():
                got = fn(*inputs)
                got = tuple(got) if isinstance(got, tuple | list) else (got,)
                rtol, atol = self.task.tolerance(entry.dtype)
                for g, e in zip(got, entry.expected, strict=True):
                    found = compare(g, e, rtol, atol, self.task.row_scaled)
                    if found is not None:
                        return {"error": f"{found[0]} against the reference: {found[1].get('what')}"}
                timed = time_fn(lambda: fn(*inputs), self.settings.timing)
        except Exception as exc:  # a finding, not hidden: torch.compile may fail on a reference
            return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        return {"median_us": timed.median_us, "spread": timed.spread, "method": timed.method}

    def retime(self, request: dict[str, Any], say: Any) -> None:
        results = Retime(self, request["jobs"]).run()
        say({"id": request["id"], "results": {str(k): v for k, v in results.items()}, "done": True})

    def evaluate(self, request: dict[str, Any], say: Any) -> None:
        jobs = request["jobs"]
        parallel = max(1, int(request.get("parallel") or self.settings.parallel))
        timed = self.device == "cuda"
        order = {job["key"]: i for i, job in enumerate(jobs)}
        passed: queue.Queue[tuple[dict, Session, dict]] = queue.Queue()

        def check(job: dict) -> bool:
            result, session = self.evaluate_one(job, timed)
            if session is None:
                say({"id": request["id"], "key": job["key"], "result": result})
                return False
            passed.put((job, session, result))
            return True

        def time_group(checked: threading.Event) -> None:
            """The group's passed candidates, in batch order among those waiting, until every check of the
            group has ended (``checked``) and none waits."""
            while not (checked.is_set() and passed.empty()):
                waiting = _drain(passed, 0.05)
                for job, session, result in sorted(waiting, key=lambda p: order[p[0]["key"]]):
                    say({"id": request["id"], "key": job["key"], "result": self.time_one(session, result)})
            if timed:  # the group's comparisons and timings cached memory the next group's workers need
                _free_judge_memory()

        if self.overlapping:
            self._check_while_timing(jobs, parallel, request["id"], say)
        else:
            cap = max(1, self.settings.max_waiting, parallel)
            check_in_groups(jobs, parallel, cap, check, time_group, self._memory_room if timed else None,
                            time_early=self.timing_beside_checks)  # fmt: skip
        zygote = self._zygote
        say({"id": request["id"], "done": True, "zygote_pid": zygote.proc.pid if zygote else None,
             "zygote_ready_s": zygote.ready_s if zygote else None,
             "zygote_warm_s": zygote.warm_s if zygote else None})  # fmt: skip

    def _memory_room(self) -> MemoryRoom:
        """The device's free memory as a group of waiting workers grows (every process's, the driver's)."""
        return MemoryRoom(lambda: torch.cuda.mem_get_info()[0], torch.cuda.mem_get_info()[1])

    def _check_while_timing(self, jobs: list[dict], parallel: int, rid: Any, say: Any) -> None:
        """Each candidate timed as soon as it passed, one at a time with the GPU to itself (the gate), while
        the others are still checked. At most ``parallel + 1`` candidates are alive at once, fewer when the
        device's free memory would not hold another: a passed one keeps its worker (a CUDA context, its
        inputs and outputs) until it is timed, and checks that outran the timing filled an H200 with waiting
        workers by the end of a 24-candidate softmax batch."""
        passed: queue.Queue = queue.Queue()
        alive = AliveLimit(parallel + 1, self._memory_room() if self.device == "cuda" else None)

        def check(job: dict) -> None:
            alive.enter()
            try:
                result, session = self.evaluate_one(job, True)
            except BaseException:
                alive.leave()
                raise
            if session is None:
                alive.leave()
                say({"id": rid, "key": job["key"], "result": result})
            else:
                passed.put((job, session, result))

        def time_each() -> None:
            while (item := passed.get()) is not None:
                job, session, result = item
                try:
                    timed = self.time_one(session, result)
                except Exception as exc:  # the judge's own fault: said, and the next candidate still timed
                    session.kill()
                    timed = {**result, **_internal(exc)}
                finally:
                    alive.leave()
                say({"id": rid, "key": job["key"], "result": timed})

        timer = threading.Thread(target=time_each, name="timing", daemon=True)
        timer.start()
        try:
            with ThreadPoolExecutor(max_workers=parallel) as pool:
                list(pool.map(check, jobs))
        finally:
            passed.put(None)
            timer.join()


def _drain(waiting: queue.Queue, wait_s: float) -> list:
    """Everything in the queue now, waiting up to ``wait_s`` for a first item (none: an empty list)."""
    try:
        items = [waiting.get(timeout=wait_s)]
    except queue.Empty:
        return []
    while True:
        try:
            items.append(waiting.get_nowait())
        except queue.Empty:
            return items


def _end(judge: Judge) -> None:
    """The client is gone (killed mid-batch, its Dask worker lost): the workers end with the judge."""
    try:
        judge.close()
    finally:
        os._exit(3)


def _flush_us() -> float:
    """The L2 flush's own time in this process (the same kernel every worker runs before a timed call)."""
    flush_l2()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(50):
        start.record()
        flush_l2()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return sorted(times)[len(times) // 2]


def _internal(exc: BaseException) -> dict[str, Any]:
    log = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    oom = {"judge_out_of_memory": True} if isinstance(exc, torch.OutOfMemoryError) else {}
    return Verdict("correctness", "runtime_error", f"the judge failed on this candidate: {type(exc).__name__}: {exc}",
                   log, details=oom).fields  # fmt: skip


def _free_judge_memory() -> None:
    """What the judge's allocator caches (freed blocks of references and comparisons) back to the device."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


# Each of the judge's threads blocks many times per check (the worker's reply, each read back from the GPU)
# and must then take the GIL back from a thread that is comparing; CPython's 5 ms switch interval makes it
# wait up to that long each time. At 0.5 ms the judge's own seconds per add_rmsnorm candidate in a batch of
# 15 at once fell by 13-16% on the H200 (bench/results/judge_h200, section 8).
SWITCH_INTERVAL_S = 0.0005


def serve(protocol: int, start: dict[str, Any], zygote: Zygote | None, started: float) -> None:
    """Answer requests on stdin in ``protocol`` (a duplicate of stdout: stdout itself goes to the log),
    after the start request ``start`` read by tools/judge_boot.py at ``started`` (perf_counter)."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    lock = threading.Lock()

    def say(message: dict[str, Any]) -> None:
        data = (json.dumps(message, default=str) + "\n").encode()
        with lock:
            os.write(protocol, data)

    judge = Judge(start, zygote)
    if judge.device in process_seal.SEALED_DEVICES:
        process_seal.seal()  # before the first reference is computed: the expected outputs live in this heap
    lifeline.end_with_parent(os.getppid(), lambda: _end(judge))
    judge.prepare()
    judge.setup_s["total"] = round(time.perf_counter() - started, 3)
    say({"ready": True, "device": judge.info, "copy_gbps": judge.copy_gbps, "limits": judge.limits,
         "sealed": process_seal.sealed(), "setup_s": judge.setup_s})  # fmt: skip
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            request = json.loads(line)
            if request.get("op") == "evaluate":
                judge.evaluate(request, say)
            elif request.get("op") == "retime" and judge.device == "cuda":
                judge.retime(request, say)
            elif request.get("op") == "anchors" and judge.device == "cuda":
                judge.anchors(request, say)
            else:
                say({"id": request.get("id"), "error": f"unknown request {request.get('op')!r}"})
    finally:
        judge.close()

