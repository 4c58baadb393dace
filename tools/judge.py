"""The judge: one long-lived trusted process per device that never imports a candidate.

    python -m tools.judge        (started by tools.evaluate; JSON lines on stdin, replies on stdout)

It loads the task, makes every (shape, dtype, seed) input set and the reference's outputs once per run
(tools/references.py), measures the device's copy bandwidth, and drives candidate workers
(tools/worker.py, forked by its zygote, each in its own process and CUDA context). A worker gets copies
of the inputs in its arena and hands back its outputs there; the judge compares them with the expected
outputs it alone holds, checks the inputs and the guard bands after every call, checks determinism,
and checks the outputs of every timed CUDA-graph replay. Nothing a verdict depends on lives in a process
where candidate code has run.

Requests: ``{"op": "evaluate", "id", "jobs": [...]}`` streams ``{"id", "key", "result"}`` per job, then
``{"id", "done": true}``; ``{"op": "retime", "id", "jobs": [...]}`` answers ``{"id", "results": [...]}``.
The first line on stdin is the start request (task, device, settings, hidden shapes, folder); the
judge answers ``{"ready": true, ...}``.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tools import sandbox, staging
from tools.channel import ChannelError, JudgeEnd
from tools.compare import check_described, compare, same_bits, sample_positions, scale_at, unravel
from tools.references import Entry, ReferenceCache, TaskFailure
from tools.results import merge_launch_resources
from tools.task import bytes_moved, load_task
from tools.timing import TimingSettings, copy_bandwidth_gbps, copy_time_us, flush_l2, poison_value
from tools.zygote import Zygote

REPO_ROOT = Path(__file__).resolve().parent.parent
FRESH_SEED = 1000  # fresh values written into the same buffers: seed + 1000
SAMPLES_PER_OUTPUT = 256  # positions checked in the output of every timed replay
TASK_ERROR = {"task_error": True}


@dataclass
class JudgeSettings:
    seeds: int = 3
    check_timeout_s: float = 240.0
    timing_timeout_s: float = 300.0
    parallel: int = 2
    max_open_files: int = 4096
    cpu_address_space_bytes: int = 12 << 30
    file_bytes: int = 1 << 30
    timing: TimingSettings = field(default_factory=TimingSettings)
    references_share: float = 0.3  # of the device's memory, for the input sets and expected outputs
    # The re-measure of a win: the judge's wall clock over K replays against the worker's own events.
    confirm_wall_ms: float = 100.0
    confirm_band: float = 0.15
    confirm_band_us: float = 3.0
    confirm_content_ratio: float = 1.25  # rotating inputs this much slower than repeated ones: a cache


class Verdict(Exception):
    """A candidate's failure, as the judge states it."""

    def __init__(self, stage: str, error_type: str, message: str, log: str = "", details: dict | None = None):
        super().__init__(message)
        self.fields = {"verdict": "fail", "stage": stage, "error_type": error_type, "message": message,
                       "log": log[-20000:], "details": details or {}}  # fmt: skip


def device_info(device: str) -> dict[str, Any]:
    import triton

    name = torch.cuda.get_device_name() if device == "cuda" else "cpu (Triton interpreter)"
    return {"name": name, "triton": triton.__version__, "torch": torch.__version__.split("+")[0],
            "interpreted": device != "cuda"}  # fmt: skip


def device_limits(device: str) -> dict[str, int]:
    limits = {"registers_per_sm": 65536, "shared_bytes_per_block": 232448, "sm_count": 132}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        limits["sm_count"] = props.multi_processor_count
        limits["registers_per_sm"] = getattr(props, "regs_per_multiprocessor", 65536)
        limits["shared_bytes_per_block"] = getattr(props, "shared_memory_per_block_optin", 232448)
    return limits


def _died(returncode: int | None, stage: str, log: str) -> Verdict:
    if returncode == -signal.SIGXCPU:
        return Verdict(stage, "timeout", "the worker used up its CPU-time limit (SIGXCPU): the candidate computes on the host", log)
    if returncode == -signal.SIGXFSZ:
        return Verdict(stage, "crash", "the worker wrote a file over its size limit (SIGXFSZ): it flooded its output", log)
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name
        return Verdict(stage, "crash", f"the worker died with {name} (e.g. an out-of-bounds access)", log)
    return Verdict(stage, "crash", f"the worker exited with status {returncode} without a result", log)


# --------------------------------------------------------------------------------------------
# one candidate's worker, from the judge's side


class Session:
    def __init__(self, judge: Judge, job: dict[str, Any]):
        self.judge, self.job = judge, job
        self.scratch = Path(job["scratch"])
        self.arena: staging.Arena | None = None
        self.channel: JudgeEnd | None = None
        self.pid: int | None = None
        self.deadline = 0.0
        self.stage = "compile"
        self.resources: dict[str, Any] = {}
        self.seconds: dict[str, float] = {}

    # -- the worker -----------------------------------------------------------------------------
    def open(self, budget_s: float) -> None:
        started = time.perf_counter()
        self.deadline = time.monotonic() + budget_s
        judge = self.judge
        env = {"TRITON_CACHE_DIR": self.job["triton_cache"], "TMPDIR": str(self.scratch / "tmp")}
        (self.scratch / "tmp").mkdir(parents=True, exist_ok=True)
        self.channel = JudgeEnd(self.scratch / "channel")
        argv = ["session", str(self.scratch / "channel")]
        failed: Zygote | None = None
        for attempt in range(2):  # a zygote that died is replaced once: the candidate is not lost with it
            zygote = judge.zygote(replacing=failed)
            try:
                self.pid = zygote.spawn(argv, self.scratch, env, judge.worker_limits())
                break
            except RuntimeError as exc:
                failed = zygote
                if attempt:
                    raise Verdict("compile", "crash", f"the worker could not be started: {exc}") from None
        try:
            self.channel.connect(self._left(), alive=lambda: judge.zygote().running(self.pid))
        except ChannelError as exc:
            raise self._channel_failure(exc) from None
        self.arena = judge.arenas().acquire()
        hello = {"arena": self.arena.descriptor(), "device": judge.device, "candidate": self.job["candidate"],
                 "module_name": f"candidate_{self.job['identity']}", "config": self.job["config"]}  # fmt: skip
        self.ask("hello", **hello)
        self.seconds["startup"] = time.perf_counter() - started

    def _left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def ask(self, op: str, **fields: Any) -> dict[str, Any]:
        assert self.channel is not None
        if self.judge.device == "cuda":
            # What this process wrote into the arena (inputs, guard bands) must have landed before the worker,
            # another CUDA context, reads it: nothing orders our stream with its.
            torch.cuda.current_stream().synchronize()
        try:
            reply = self.channel.ask(op, self._left(), **fields)
        except ChannelError as exc:
            raise self._channel_failure(exc) from None
        if "failure" in reply:
            f = reply["failure"]
            raise Verdict(f.get("stage", self.stage), f.get("error_type", "runtime_error"), f.get("message", ""),
                          f.get("log", ""), f.get("details") or {})  # fmt: skip
        return reply

    def _channel_failure(self, exc: ChannelError) -> Verdict:
        zygote = self.judge.zygote()
        if exc.kind == "timeout":
            self.kill()
            timing = self.stage == "timing"
            limit = self.judge.settings.timing_timeout_s if timing else self.judge.settings.check_timeout_s
            what = "timing did not finish" if timing else "the candidate did not finish"
            return Verdict("timing" if timing else "correctness", "timeout",
                           f"{what} within {limit:.0f} s (hang or runaway loop); its worker was killed")  # fmt: skip
        if exc.kind == "closed" and self.pid is not None:
            code = zygote.wait(self.pid, 30)
            self.pid = None
            return _died(code, self.stage, self._log())
        self.kill()
        if exc.kind == "flood":
            return Verdict(self.stage, "crash", f"the worker flooded the judge's channel: {exc}")
        return Verdict(self.stage, "forbidden_construct", f"the worker wrote into the judge's channel out of turn: {exc}")

    def _log(self) -> str:
        path = self.scratch / "worker.log"
        return path.read_bytes()[-20000:].decode(errors="replace") if path.exists() else ""

    def kill(self) -> None:
        if self.pid is not None:
            sandbox.kill_group(self.pid)
            self.judge.zygote().wait(self.pid, 30)
            self.pid = None

    def close(self) -> str:
        """End the worker; "" when it ended as asked, else why its word cannot be trusted."""
        problem = ""
        if self.pid is not None and self.channel is not None:
            try:
                self.channel.ask("bye", min(10.0, max(self._left(), 5.0)))
                if self.channel.leftover():
                    problem = "the worker wrote more replies than it was asked for (someone else wrote into its channel)"
            except ChannelError as exc:
                problem = f"the worker did not end cleanly: {exc}"
            if not problem:  # its verdict is made; its exit (a CUDA context's teardown) is waited for elsewhere
                pid, zygote = self.pid, self.judge.zygote()
                threading.Thread(target=zygote.wait, args=(pid, 30), daemon=True).start()
                self.pid = None
        self.kill()
        if self.channel is not None:
            self.channel.close()
        self._let_go()
        return problem

    def _let_go(self) -> None:
        if self.arena is not None:
            self.judge.arenas().release(self.arena)
            self.arena = None

    def park(self) -> None:
        """While it waits to be timed the worker maps no arena (it runs nothing meanwhile)."""
        self.ask("unmap")
        self._let_go()

    def unpark(self) -> None:
        self.arena = self.judge.arenas().acquire()
        self.ask("map", arena=self.arena.descriptor())

    # -- one call of launch() -----------------------------------------------------------------
    def load(self, inputs: tuple[torch.Tensor, ...]) -> list[staging.Spec]:
        assert self.arena is not None
        layout = self.judge.layout()
        specs = layout.input_specs(inputs)
        for spec, t in zip(specs, inputs, strict=True):
            staging.view(self.arena.buffer, spec).copy_(t)
        self.arena.fill_guards(layout.guards(specs))
        return specs

    def places(self, expected: tuple[torch.Tensor, ...]) -> list[dict] | None:
        places = self.judge.layout().output_specs([(tuple(e.shape), staging.dtype_name(e.dtype)) for e in expected])
        return None if places is None else [p.to_json() for p in places]

    def call(self, entry: Entry, stage: str, shape: dict, poison: Any = "nan") -> tuple[tuple[torch.Tensor, ...], dict]:
        """Hand ``entry``'s inputs over, call launch() once, read the outputs back: (outputs, reply). The
        compile call only compiles: its outputs are not read (the checks that follow judge them)."""
        assert self.arena is not None
        specs = self.load(entry.inputs)
        places = self.places(entry.expected)
        reply = self.ask("call", inputs=[s.to_json() for s in specs], places=places, poison=poison, stage=stage,
                         shape=shape)  # fmt: skip
        if stage == "compile":
            return (), reply
        self.guards_intact(specs, stage)
        structural = check_described(reply["outputs"], entry.expected, self.judge.device)
        if structural is not None:
            raise Verdict(stage, structural.error_type, structural.message, details=structural.details)
        if not reply["copied"] or places is None:
            raise Verdict(stage, "runtime_error", "the outputs could not be handed back to the judge")
        got = tuple(staging.view(self.arena.buffer, staging.Spec.from_json(p)).clone() for p in places)
        return got, reply

    def guards_intact(self, specs: list[staging.Spec], stage: str) -> None:
        assert self.arena is not None
        broken = self.arena.broken_guard(self.judge.layout().guards(specs))
        if broken is not None:
            i, offset = broken
            raise Verdict(stage, "out_of_bounds_write", f"launch() wrote byte {offset} past the end of input {i}",
                          details={"input": i, "offset": offset})  # fmt: skip

    def inputs_now(self, entry: Entry) -> tuple[torch.Tensor, ...]:
        assert self.arena is not None
        specs = self.judge.layout().input_specs(entry.inputs)
        return tuple(staging.view(self.arena.buffer, s) for s in specs)


# --------------------------------------------------------------------------------------------
# the checks


class Checks:
    """Compile + correctness of one candidate, every comparison made here."""

    def __init__(self, session: Session):
        self.s = session
        self.judge = session.judge
        self.task = session.judge.task
        self.count = 0

    def compile(self) -> None:
        judge, s = self.judge, self.s
        shape, dtype = judge.compile_pair()
        entry = judge.entry(shape, dtype, 0, "compile")
        _, reply = s.call(entry, "compile", shape)
        kernels = []
        for k in reply.get("kernels", []):
            if not any(seen["name"] == k["name"] for seen in kernels):
                kernels.append(k)
        limits = judge.limits
        for k in kernels:
            regs, warps, shared = k.get("n_regs"), k.get("num_warps"), k.get("shared_bytes")
            if regs is not None and warps is not None and regs * 32 * warps > limits["registers_per_sm"]:
                raise Verdict("compile", "resource_limit", f"{k['name']}: {regs} registers x {32 * warps} threads "
                              f"exceeds {limits['registers_per_sm']} per SM", details={"kernel": k})  # fmt: skip
            if shared is not None and shared > limits["shared_bytes_per_block"]:
                raise Verdict("compile", "resource_limit", f"{k['name']}: {shared} bytes of shared memory exceeds "
                              f"{limits['shared_bytes_per_block']}", details={"kernel": k})  # fmt: skip
        s.resources = _resources(kernels)

    def correctness(self) -> None:
        for shape, dtype in self.judge.check_pairs():
            for seed in range(self.judge.settings.seeds):
                self.one(shape, dtype, seed)
                self.count += 1

    def one(self, shape: dict, dtype: str, seed: int) -> None:
        """One shape, dtype and seed through every fence: poisoned outputs, inputs unchanged, a second call
        identical to the first, fresh values in the same buffers."""
        judge, s = self.judge, self.s
        where = {"shape": shape, "dtype": dtype, "seed": seed}
        entry = judge.entry(shape, dtype, seed, "correctness")
        out, _ = s.call(entry, "correctness", shape)
        self.values(out, entry, where)
        self.inputs_unchanged(entry, where)
        if seed == 0:
            again, _ = s.call(entry, "correctness", shape)
            if not same_bits(out, again):
                raise Verdict("correctness", "nondeterministic", "two calls on the same inputs returned different bits",
                              details=where)  # fmt: skip
        fresh = judge.entry(shape, dtype, seed + FRESH_SEED, "correctness")
        out_new, _ = s.call(fresh, "correctness", shape)  # the same buffers: the layout is the shape's
        if self.problem(out_new, fresh) is not None:
            if self.problem(out_new, entry) is None:
                raise Verdict("correctness", "stale_output", "after new values were written into the same input "
                              "buffers, launch() returned the old result (cached by address?)", details=where)  # fmt: skip
            self.values(out_new, fresh, {**where, "fresh_values": True})

    def problem(self, got: tuple, entry: Entry) -> tuple | None:
        rtol, atol = self.task.tolerance(entry.dtype)
        for i, (g, e) in enumerate(zip(got, entry.expected, strict=True)):
            found = compare(g, e, rtol, atol, self.task.row_scaled)
            if found is not None:
                return found[0], i, found[1]
        return None

    def values(self, got: tuple, entry: Entry, where: dict) -> None:
        problem = self.problem(got, entry)
        if problem is None:
            return
        kind, output, details = problem
        if kind == "nan":  # NaN where the reference is finite: our poison, or computed? Again with another poison.
            marker = _marker(got[output].dtype)
            again, _ = self.s.call(entry, "correctness", where["shape"], poison=marker)
            pos = 0
            for d, size in zip(details["index"], got[output].shape, strict=True):
                pos = pos * size + d
            if float(again[output].reshape(-1)[pos]) == marker:
                unwritten = int((again[output] == marker).sum())
                raise Verdict("correctness", "unwritten_output",
                              f"output {output} element {details['index']} was never written "
                              f"({unwritten} of {got[output].numel()} elements unwritten) at {where['shape']}",
                              details={**where, "output": output, **details, "count": unwritten})  # fmt: skip
        raise Verdict("correctness", kind,
                      f"output {output} differs at {details['index']}: got {details['got']}, expected "
                      f"{details['expected']} ({details['count']} of {details['numel']} elements {details['what']}) "
                      f"at {where['shape']} {where['dtype']}", details={**where, "output": output, **details})  # fmt: skip

    def inputs_unchanged(self, entry: Entry, where: dict) -> None:
        now = self.s.inputs_now(entry)
        for i, (after, before) in enumerate(zip(now, entry.inputs, strict=True)):
            before = before.to(after.device)
            if not torch.equal(after, before):
                diff = (after != before).reshape(-1).nonzero()
                index = [int(v) for v in torch.unravel_index(diff[0, 0].cpu(), after.shape)] if len(diff) else []
                raise Verdict("correctness", "input_modified", f"launch() modified input {i} (first changed element at {index})",
                              details={**where, "input": i, "index": index})  # fmt: skip

    def interpreted_times(self) -> list[dict]:
        """Wall time of five interpreted calls per CPU shape (ranks only), each call's outputs checked; the
        kernels launched at those shapes join the resources, as a GPU's timed shapes do. ``spread`` is
        median/min over the calls: the noise of a busy CPU, which loop.ties holds rankings against."""
        rows: list[dict] = []
        timed: list[dict] = []
        for shape, dtype in self.task.workload("cpu"):
            entry = self.judge.entry(shape, dtype, 0, "correctness")
            samples = []
            # Five calls, so load that comes and goes while they run shows in the spread (median/min,
            # which one stray call does not move). Load that lasts a whole candidate does not show here.
            for _ in range(5):
                out, reply = self.s.call(entry, "correctness", shape)
                self.values(out, entry, {"shape": shape, "dtype": dtype, "seed": 0})
                samples.append(reply["wall_us"])
                kernels = reply.get("kernels", [])
            samples.sort()
            rows.append({"shape": shape, "dtype": dtype, "median_us": samples[len(samples) // 2],
                         "min_us": samples[0], "spread": samples[len(samples) // 2] / samples[0],
                         "method": "interpreter"})  # fmt: skip
            timed.extend(kernels)
        self.s.resources["kernels"] = merge_launch_resources(timed, self.s.resources.get("kernels", []))
        return rows


def _marker(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).max) if dtype.is_floating_point else 0.0


def _resources(kernels: list[dict]) -> dict[str, Any]:
    def worst(key: str) -> Any:
        values = [k.get(key) for k in kernels if k.get(key) is not None]
        return max(values) if values else None

    return {"n_regs": worst("n_regs"), "n_spills": worst("n_spills"), "shared_bytes": worst("shared_bytes"),
            "num_warps": worst("num_warps"), "kernels": kernels}  # fmt: skip


# --------------------------------------------------------------------------------------------
# timing: every timed replay checked


class Timing:
    def __init__(self, session: Session):
        self.s = session
        self.judge = session.judge
        self.task = session.judge.task
        self.rng = torch.Generator().manual_seed(int(session.job["identity"][:8], 16))

    def samples(self, expected: tuple[torch.Tensor, ...]) -> tuple[list[torch.Tensor], list[dict]]:
        """Positions checked in every timed replay: per output, flat and per dimension."""
        flats = [sample_positions(e.numel(), SAMPLES_PER_OUTPUT, self.rng) for e in expected]
        return flats, [{"flat": f.tolist(), "index": unravel(f, tuple(e.shape))} for f, e in zip(flats, expected, strict=True)]

    def capture(self, shape: dict, dtype: str) -> tuple[Entry, dict]:
        entry = self.judge.entry(shape, dtype, 0, "timing")
        specs = self.s.load(entry.inputs)
        cap = self.s.ask("capture", inputs=[sp.to_json() for sp in specs], shape=shape, stage="timing")
        structural = check_described(cap["outputs"], entry.expected, self.judge.device)
        if structural is not None:
            raise Verdict("timing", structural.error_type, "under CUDA-graph capture " + structural.message)
        return entry, cap

    def bench(self, entry: Entry, shape: dict, repeats: int, rotate: Entry | None = None) -> list[float]:
        """``repeats`` checked benches; each timed replay's poison count and samples judged here."""
        flats, samples = self.samples(entry.expected)
        t = self.judge.settings.timing
        log_at = self.judge.layout().log_at
        reply = self.s.ask("bench", samples=samples, repeats=repeats, warmup_ms=t.warmup_ms, rep_ms=t.rep_ms,
                           log_at=log_at, rotate=rotate is not None, stage="timing")  # fmt: skip
        self.check_log(reply, flats, [entry, rotate or entry], shape)
        return reply["medians_us"]

    def check_log(self, reply: dict, flats: list[torch.Tensor], sets: list[Entry], shape: dict) -> None:
        """Every timed replay of every bench: its poison count and its sampled values against the expected
        outputs of the input set it was given (``sets`` alternate run by run)."""
        assert self.s.arena is not None
        log = staging.view(self.s.arena.buffer, staging.Spec.from_json(reply["log"])).clone()
        log = log.reshape(-1, len(flats), int(reply["width"]))
        run_in_bench = torch.cat([torch.arange(n) for n in reply["runs"]]).to(log.device)
        which = run_in_bench % 2  # the input set each timed run had
        rtol, atol = self.task.tolerance(sets[0].dtype)
        total = log.shape[0]
        for j, flat in enumerate(flats):
            counts = torch.tensor([_poison_count(entry.expected[j]) for entry in sets], device=log.device)
            bad_count = log[:, j, 0].to(torch.long) != counts[which]
            wanted = torch.stack([entry.expected[j].reshape(-1)[flat.to(entry.expected[j].device)].to(log.device, torch.float64)
                                  for entry in sets])  # fmt: skip
            scale = torch.stack([scale_at(entry.expected[j], flat, self.task.row_scaled).to(log.device) for entry in sets])
            got = log[:, j, 1 : 1 + flat.numel()]
            e, sc = wanted[which], scale[which]
            close = ((got - e).abs() <= atol + rtol * sc) | (torch.isnan(got) & torch.isnan(e)) | (got == e)
            bad_value = ~close.all(dim=1)
            flags = torch.stack([bad_count.any(), bad_value.any()]).tolist()
            if flags[0]:
                run = int(bad_count.nonzero()[0, 0])
                raise Verdict("timing", "unwritten_output",
                              f"timed replay {run + 1} of {total} at {shape} left {int(log[run, j, 0])} elements of output {j} "
                              "unwritten: the kernel skips work in some calls (by call count, warm-up or capture)",
                              details={"shape": shape, "run": run, "output": j})  # fmt: skip
            if flags[1]:
                run = int(bad_value.nonzero()[0, 0])
                k = int((~close[run]).nonzero()[0, 0])
                index = [int(i) for i in torch.unravel_index(flat[k], tuple(sets[0].expected[j].shape))] if sets[0].expected[j].dim() else []
                raise Verdict("timing", "mismatch",
                              f"timed replay {run + 1} of {total} at {shape} returned a wrong output {j} at {index} (got "
                              f"{float(got[run, k])}, expected {float(e[run, k])}): the kernel behaves differently across "
                              "calls or under graph capture", details={"shape": shape, "run": run, "output": j, "index": index})  # fmt: skip

    def verify(self, shape: dict, dtype: str) -> None:
        """Fresh values into the captured buffers, one replay, its own outputs compared in full."""
        fresh = self.judge.entry(shape, dtype, FRESH_SEED, "timing")
        specs = self.s.load(fresh.inputs)
        places = self.s.places(fresh.expected)
        reply = self.s.ask("verify", inputs=[sp.to_json() for sp in specs], places=places, stage="timing")
        assert self.s.arena is not None and places is not None
        if not reply["copied"]:
            raise Verdict("timing", "runtime_error", "the replay's outputs could not be handed back to the judge")
        got = tuple(staging.view(self.s.arena.buffer, staging.Spec.from_json(p)).clone() for p in places)
        rtol, atol = self.task.tolerance(fresh.dtype)
        for i, (g, e) in enumerate(zip(got, fresh.expected, strict=True)):
            found = compare(g, e, rtol, atol, self.task.row_scaled)
            if found is not None:
                kind, details = found
                raise Verdict("timing", "stale_output" if kind == "mismatch" else "unwritten_output",
                              f"the timed CUDA-graph replay, given fresh values in its input buffers, returned a wrong "
                              f"output {i} at {details['index']} at {shape} (got {details['got']}, expected "
                              f"{details['expected']}): what was timed is not what was checked",
                              details={"shape": shape, "output": i, **details})  # fmt: skip

    def run(self) -> tuple[dict[str, Any], list[dict]]:
        """Every workload shape: capture, three checked benches, the replay verified. (metrics, kernels)."""
        judge = self.judge
        rows, kernels = [], []
        for shape, dtype in self.task.workload("cuda"):
            entry, cap = self.capture(shape, dtype)
            medians = self.bench(entry, shape, max(judge.settings.timing.repeats, 3))
            self.verify(shape, dtype)
            self.s.ask("release")
            kernels.extend(cap.get("kernels", []))
            rows.append(judge.row(shape, dtype, entry, medians, cap["method"]))
        return {"per_shape": rows, "copy_gbps": judge.copy_gbps, "runs": max(judge.settings.timing.repeats, 3)}, kernels


def _poison_count(expected: torch.Tensor) -> int:
    value = poison_value(expected.dtype)
    if value is None:
        return 0
    if isinstance(value, float):
        return int(torch.isnan(expected).sum())
    return int((expected == value).sum())


# --------------------------------------------------------------------------------------------
# the judge


class Judge:
    def __init__(self, start: dict[str, Any]):
        self.task = load_task(start["task"])
        self.device = start["device"]
        raw = dict(start.get("settings", {}))
        raw["timing"] = TimingSettings(**raw.get("timing", {}))
        self.settings = JudgeSettings(**raw)
        self.hidden = [dict(s) for s in start.get("hidden_shapes", [])]
        self.root = Path(start["workdir"])
        budget = 0
        if self.device == "cuda":
            torch.cuda.init()
            budget = int(torch.cuda.get_device_properties(0).total_memory * self.settings.references_share)
        self.refs = ReferenceCache(self.task, self.device, budget)
        self.limits = device_limits(self.device)
        self.info = device_info(self.device)
        self.copy_gbps = copy_bandwidth_gbps(self.settings.timing) if self.device == "cuda" else None
        self.flush_us = _flush_us() if self.device == "cuda" else 0.0
        self._zygote: Zygote | None = None
        self._zygote_lock = threading.Lock()
        self._layout: staging.Layout | None = None
        self._layout_lock = threading.Lock()
        self._arenas: staging.ArenaPool | None = None
        self._degenerate: str | None = None
        self._ceilings: dict[int, float] = {}
        self.out_lock = threading.Lock()

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
        """Every input set and reference of the run, made in parallel (slow make_inputs run once)."""
        threads = max(2, (os.cpu_count() or 2) // 2)
        threading.Thread(target=self.refs.prefetch, args=(self.every_entry(), threads), daemon=True).start()

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
                env = worker_env(self.device, self.root / "zygote_triton_cache", self.root)
                env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # is_available() there must not initialize CUDA
                self._zygote = Zygote(sandbox.network_isolation(), self.root, env, self.settings.max_open_files)
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
        """Compile + correctness; (result, the open session when it passed and will be timed)."""
        session = Session(self, job)
        checks = Checks(session)
        try:
            session.open(self.settings.check_timeout_s)
            degenerate = self.degenerate()
            if degenerate:
                raise Verdict("correctness", "runtime_error", degenerate, details=dict(TASK_ERROR))
            lap = time.perf_counter()
            checks.compile()
            session.seconds["compile"] = time.perf_counter() - lap
            session.stage = "correctness"
            lap = time.perf_counter()
            checks.correctness()
            session.seconds["correctness"] = time.perf_counter() - lap
            result: dict[str, Any] = {"verdict": "pass", "stage": "correctness"}
            if self.device != "cuda":
                lap = time.perf_counter()
                result["metrics"] = {"per_shape": checks.interpreted_times(), "runs": 3}
                session.seconds["interpreter_timing"] = time.perf_counter() - lap
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
        started = time.perf_counter()
        try:
            session.unpark()
            metrics, kernels = Timing(session).run()
            result = {**checked, "stage": "timing", "metrics": metrics, "grids": kernels}
        except Verdict as verdict:
            result = {**checked, **verdict.fields}
        except Exception as exc:
            result = {**checked, **_internal(exc)}
        problem = session.close()
        if problem and result.get("verdict") == "pass":
            result = {**checked, **Verdict("timing", "forbidden_construct", problem).fields}
        result.setdefault("stage_seconds", {})["timing"] = time.perf_counter() - started
        return result

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

    def retime(self, request: dict[str, Any], say: Any) -> None:
        results = Retime(self, request["jobs"]).run()
        say({"id": request["id"], "results": {str(k): v for k, v in results.items()}, "done": True})

    def evaluate(self, request: dict[str, Any], say: Any) -> None:
        jobs = request["jobs"]
        parallel = max(1, int(request.get("parallel") or self.settings.parallel))
        timed = self.device == "cuda"
        passed: list[tuple[dict, Session, dict]] = []

        def check(job: dict) -> None:
            result, session = self.evaluate_one(job, timed)
            if session is None:
                say({"id": request["id"], "key": job["key"], "result": result})
            else:
                passed.append((job, session, result))

        with ThreadPoolExecutor(max_workers=parallel) as pool:
            list(pool.map(check, jobs))
        order = {job["key"]: i for i, job in enumerate(jobs)}
        for job, session, result in sorted(passed, key=lambda p: order[p[0]["key"]]):
            say({"id": request["id"], "key": job["key"], "result": self.time_one(session, result)})
        zygote = self._zygote.proc.pid if self._zygote is not None else None
        say({"id": request["id"], "done": True, "zygote_pid": zygote})


class Retime:
    """Candidates that passed, each in a fresh worker (only the candidate and the driver in it), timed
    with their repeats interleaved on this GPU, and every one cross-checked where the worker cannot
    reach: the judge's own wall clock over K replays, and the same replays on inputs that change
    between calls (a cache by content or data kept in the L2 across the flush is faster only on
    repeated inputs)."""

    def __init__(self, judge: Judge, jobs: list[dict[str, Any]]):
        self.judge = judge
        self.sessions = {job["key"]: Session(judge, job) for job in jobs}
        self.results: dict[int, dict[str, Any]] = {}
        self.rows: dict[int, list[dict]] = {key: [] for key in self.sessions}
        self.kernels: dict[int, list[dict]] = {key: [] for key in self.sessions}
        self.confirm: dict[int, list[dict]] = {key: [] for key in self.sessions}
        self.methods: dict[int, str] = {}

    def fail(self, key: int, verdict: Verdict) -> None:
        self.results[key] = {**verdict.fields, "stage": "timing"}
        self.sessions.pop(key).close()

    def live(self) -> list[tuple[int, Session]]:
        return list(self.sessions.items())

    def run(self) -> dict[int, dict[str, Any]]:
        judge = self.judge
        for key, session in self.live():
            try:
                session.stage = "timing"
                session.open(judge.settings.check_timeout_s)
                session.deadline = time.monotonic() + judge.settings.timing_timeout_s
            except Verdict as verdict:
                self.fail(key, verdict)
        for shape, dtype in judge.task.workload("cuda"):
            self.shape(shape, dtype)
        for key, session in self.live():
            problem = session.close()
            if problem:
                self.results[key] = Verdict("timing", "forbidden_construct", problem).fields
                continue
            metrics = {"per_shape": self.rows[key], "copy_gbps": judge.copy_gbps, "runs": judge.settings.timing.repeats}
            self.results[key] = {"verdict": "pass", "stage": "timing", "metrics": metrics, "grids": self.kernels[key],
                                 "device": judge.info, "details": {"confirm": self.confirm[key]}}  # fmt: skip
        return self.results

    def shape(self, shape: dict, dtype: str) -> None:
        judge = self.judge
        timings: dict[int, Timing] = {}
        for key, session in self.live():
            try:
                timing = Timing(session)
                entry, cap = timing.capture(shape, dtype)
                timings[key] = timing
                self.kernels[key].extend(cap.get("kernels", []))
                self.methods[key] = cap["method"]
            except Verdict as verdict:
                self.fail(key, verdict)
        entry = judge.entry(shape, dtype, 0, "timing")
        medians: dict[int, list[float]] = {key: [] for key in timings}
        for r in range(max(judge.settings.timing.repeats, 3)):
            order = list(timings) if r % 2 == 0 else list(timings)[::-1]
            for key in order:
                if key in self.sessions:
                    self.guarded(key, lambda t=timings[key], m=medians[key]: m.extend(t.bench(entry, shape, 1)))
        for key, timing in timings.items():
            if key in self.sessions:
                self.guarded(key, lambda t=timing, k=key: self.cross_check(k, t, shape, dtype, entry, medians[k]))

    def guarded(self, key: int, step: Any) -> None:
        try:
            step()
        except Verdict as verdict:
            self.fail(key, verdict)

    def cross_check(self, key: int, timing: Timing, shape: dict, dtype: str, entry: Entry, medians: list[float]) -> None:
        judge, s = self.judge, timing.s
        settings = judge.settings
        static = sorted(medians)[len(medians) // 2]
        other = judge.entry(shape, dtype, 1, "timing")
        specs = s.load(other.inputs)
        s.ask("alternate", inputs=[sp.to_json() for sp in specs], stage="timing")
        rotating = timing.bench(entry, shape, 1, rotate=other)[0]
        wall = judge.wall_clock_us(s, static)
        problem = confirm_problem(shape, static, rotating, wall, settings, judge.writeback_us(entry))
        if problem is not None:
            raise problem
        timing.verify(shape, dtype)
        s.ask("release")
        self.rows[key].append(judge.row(shape, dtype, entry, medians, self.methods[key]))
        self.confirm[key].append({"shape": shape, "dtype": dtype, "events_us": static, "rotating_us": rotating,
                                  "wall_us": wall})  # fmt: skip


def confirm_problem(
    shape: dict, static: float, rotating: float, wall: float, settings: JudgeSettings, writeback_us: float = 0.0
) -> Verdict | None:
    """What the re-measure of a win found wrong, or None. ``static``: the worker's event median on
    repeated inputs; ``rotating``: on inputs that change between calls; ``wall``: the judge's own clock
    per call over K replays. The wall clock also pays for writing the kernel's dirty outputs back during
    the next flush, which the events leave out by design: up to ``writeback_us`` more is allowed."""
    if rotating > static * settings.confirm_content_ratio and rotating - static > settings.confirm_band_us:
        return Verdict("timing", "stale_output",
                       f"at {shape} the kernel takes {static:.1f} us on the inputs of its previous call and "
                       f"{rotating:.1f} us when they change between calls: a cache by content, or data kept in "
                       "the L2 across the flush", details={"shape": shape, "static_us": static, "rotating_us": rotating})  # fmt: skip
    band = max(settings.confirm_band * static, settings.confirm_band_us)
    if wall - static > band + writeback_us or static - wall > band:
        return Verdict("timing", "suspicious_speedup",
                       f"at {shape} the judge's wall clock over the replays says {wall:.1f} us per call, the "
                       f"worker's own events said {static:.1f} us: the timing was not measured honestly",
                       details={"shape": shape, "wall_us": wall, "events_us": static, "held": "roofline"})  # fmt: skip
    return None


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
    return Verdict("correctness", "runtime_error", f"the judge failed on this candidate: {type(exc).__name__}: {exc}", log).fields


def worker_env(device: str, triton_cache: Path, scratch: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TRITON_CACHE_DIR"] = str(triton_cache)
    (scratch / "tmp").mkdir(parents=True, exist_ok=True)
    env["TMPDIR"] = str(scratch / "tmp")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


def serve() -> None:
    protocol = os.dup(1)
    os.dup2(2, 1)  # prints from imported code land in the log, not in the protocol
    lock = threading.Lock()

    def say(message: dict[str, Any]) -> None:
        data = (json.dumps(message, default=str) + "\n").encode()
        with lock:
            os.write(protocol, data)

    start = json.loads(sys.stdin.readline())
    judge = Judge(start)
    judge.prepare()
    say({"ready": True, "device": judge.info, "copy_gbps": judge.copy_gbps, "limits": judge.limits})
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            request = json.loads(line)
            if request.get("op") == "evaluate":
                judge.evaluate(request, say)
            elif request.get("op") == "retime" and judge.device == "cuda":
                judge.retime(request, say)
            else:
                say({"id": request.get("id"), "error": f"unknown request {request.get('op')!r}"})
    finally:
        judge.close()


if __name__ == "__main__":
    serve()
