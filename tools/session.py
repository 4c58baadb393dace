"""One candidate's worker, from the judge's side: started through the zygote, spoken to over its channel,
handed inputs in its arena and read back from it; whatever it says about itself is a claim."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from tools import sandbox, staging
from tools.channel import ChannelError, JudgeEnd
from tools.compare import check_described
from tools.judge_settings import Verdict, _died
from tools.references import Entry
from tools.zygote import Zygote

if TYPE_CHECKING:
    from tools.judge import Judge


MIN_CHECK_S = 30.0  # the least a candidate's checks get when the run's budget is (nearly) spent


def check_limit(timeout_s: float, deadline_unix: float | None) -> tuple[float, bool]:
    """(the seconds a candidate's checks may take, whether the run's budget set them): the check timeout,
    or what is left of the run's budget when that is less (at least MIN_CHECK_S, so that a round that
    starts checks something)."""
    if deadline_unix is None:
        return timeout_s, False
    left = max(MIN_CHECK_S, float(deadline_unix) - time.time())
    return (left, True) if left < timeout_s else (timeout_s, False)


class Session:
    def __init__(self, judge: Judge, job: dict[str, Any]):
        self.judge, self.job = judge, job
        self.scratch = Path(job["scratch"])
        self.arena: staging.Arena | None = None
        self.channel: JudgeEnd | None = None
        self.pid: int | None = None
        self.deadline = 0.0
        # cut_by_run: the run's budget, not the check timeout, set check_limit_s
        self.check_limit_s, self.cut_by_run = check_limit(judge.settings.check_timeout_s, job.get("deadline_unix"))
        self.stage = "compile"
        self.resources: dict[str, Any] = {}
        self.seconds: dict[str, float] = {}
        self.phase_now: str | None = None  # the phase whose waits ask() adds up (see phase())
        self.inputs_intact = True  # the last call's inputs and guard bands as they were handed over
        self.launchers_copied: set[str] = set()  # the judge's prebuilt Triton launchers already in its cache

    # -- the worker -----------------------------------------------------------------------------
    def open(self, budget_s: float) -> None:
        self.deadline = time.monotonic() + budget_s
        judge = self.judge
        env = {"TRITON_CACHE_DIR": self.job["triton_cache"], "TMPDIR": str(self.scratch / "tmp")}
        (self.scratch / "tmp").mkdir(parents=True, exist_ok=True)
        self.channel = JudgeEnd(self.scratch / "channel")
        argv = ["session", str(self.scratch / "channel")]
        failed: Zygote | None = None
        lap = time.perf_counter()
        for attempt in range(2):  # a zygote that died is replaced once: the candidate is not lost with it
            zygote = judge.zygote(replacing=failed)
            try:
                self.pid = zygote.spawn(argv, self.scratch, env, judge.worker_limits())
                break
            except RuntimeError as exc:
                failed = zygote
                if attempt:
                    raise Verdict("compile", "crash", f"the worker could not be started: {exc}") from None
        lap = self._lap("spawn", lap)  # the zygote's start (first workers only) and its fork
        try:
            self.channel.connect(self._left(), alive=lambda: judge.zygote().running(self.pid))
        except ChannelError as exc:
            raise self._channel_failure(exc) from None
        lap = self._lap("connect", lap)
        self.arena = judge.arenas().acquire()
        self._lap("arena", lap)  # waits for the run's first input sets (the arena's size needs them)
        hello = {"arena": self.arena.descriptor(), "device": judge.device, "candidate": self.job["candidate"],
                 "module_name": f"candidate_{self.job['identity']}", "config": self.job["config"],
                 "private": str(judge.root), "name_launchers": judge.launchers.enabled}  # fmt: skip
        with self.on_gpu():  # the candidate's import may run GPU work; its fork and connect run none
            self.ask("hello", **hello)

    def _left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def ask(self, op: str, **fields: Any) -> dict[str, Any]:
        assert self.channel is not None
        lap = time.perf_counter()
        if self.judge.device == "cuda":
            # What this process wrote into the arena (inputs, guard bands) must have landed before the worker,
            # another CUDA context, reads it: nothing orders our stream with its.
            torch.cuda.current_stream().synchronize()
        self.judge.launchers.seed(self.job["triton_cache"], self.launchers_copied)  # those built since
        synced = time.perf_counter()
        try:
            reply = self.channel.ask(op, self._left(), **fields)
        except ChannelError as exc:
            raise self._channel_failure(exc) from None
        finally:
            waited = time.perf_counter() - synced
            self._spent("sync", synced - lap)
            self._spent("worker", waited)
            self._spent(op, waited)
        self.judge.launchers.learn(reply.get("launchers"))
        # the worker's word on where its time went (never a verdict): Triton compiling, and launch() itself
        self._spent("jit", _seconds(reply.get("jit_s")))
        self._spent("launch", _seconds(reply.get("wall_us")) / 1e6)
        if "failure" in reply:
            f = reply["failure"]
            raise Verdict(f.get("stage", self.stage), f.get("error_type", "runtime_error"), f.get("message", ""),
                          f.get("log", ""), f.get("details") or {})  # fmt: skip
        return reply

    @contextlib.contextmanager
    def on_gpu(self) -> Iterator[None]:
        """The judge's GPU gate held shared around commands that may run GPU work (tools/gpu_gate.py); the
        wait for it (another candidate's timed run) goes to ``PHASE_gate``, apart from the phase's work."""
        lap = time.perf_counter()
        with self.judge.gate.shared():
            self._spent("gate", time.perf_counter() - lap)
            yield

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase of the judging into ``seconds[name]``, failed or not; the waits of the commands asked
        inside it go to ``NAME_sync`` and ``NAME_worker``, those asked between phases to none."""
        self.phase_now, started = name, time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = time.perf_counter() - started
            self.phase_now = None

    def _lap(self, where: str, since: float) -> float:
        now = time.perf_counter()
        self._spent(where, now - since)
        return now

    def _spent(self, where: str, seconds: float) -> None:
        """Where a stage's seconds went: waiting for the GPU gate (``gate``: another candidate's timed run),
        for the judge's stream (``sync``), for the worker's reply (``worker``, and per command: ``call``,
        ``bench``, ...; ``jit``: Triton compiling inside them, as the worker reports it); the rest of the stage
        is the judge's own work (copies, guard bands, comparisons)."""
        if self.phase_now is not None and seconds:
            key = f"{self.phase_now}_{where}"
            self.seconds[key] = self.seconds.get(key, 0.0) + seconds

    def _channel_failure(self, exc: ChannelError) -> Verdict:
        zygote = self.judge.zygote()
        if exc.kind == "timeout":
            self.kill()
            timing = self.stage == "timing"
            if not timing and self.cut_by_run:
                return Verdict("correctness", "timeout",
                               f"the candidate's checks were not done within {self.check_limit_s:.0f} s, when the "
                               f"run's budget ran out (the check timeout is {self.judge.settings.check_timeout_s:.0f} s); "
                               "its worker was killed")  # fmt: skip
            limit = self.judge.settings.timing_timeout_s if timing else self.check_limit_s
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
        if self.pid is not None:
            self.seconds["worker_cpu"] = sandbox.cpu_seconds(self.pid)
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
    def load(self, entry: Entry) -> list[staging.Spec]:
        """``entry``'s inputs and their guard bands into the arena, in one copy of its input image."""
        assert self.arena is not None
        specs = self.judge.layout().input_specs(entry.inputs)
        self.arena.buffer[: entry.image.numel()].copy_(entry.image)
        return specs

    def compile_only(self, entry: Entry, shape: dict) -> dict:
        """launch() on the layout of ``entry``'s inputs, its kernels compiled and none launched: nothing is
        copied into the arena (the values are not read), so the command runs no GPU work on either side."""
        specs = self.judge.layout().input_specs(entry.inputs)
        return self.ask("compile", inputs=[s.to_json() for s in specs], shape=shape, stage="compile")

    def places(self, expected: tuple[torch.Tensor, ...]) -> list[dict] | None:
        places = self.judge.layout().output_specs([(tuple(e.shape), staging.dtype_name(e.dtype)) for e in expected])
        return None if places is None else [p.to_json() for p in places]

    def call(self, entry: Entry, stage: str, shape: dict, poison: Any = "nan") -> tuple[tuple[torch.Tensor, ...], dict]:
        """Hand ``entry``'s inputs over, call launch() once, read the outputs back: (outputs, reply). The
        compile call only compiles: its outputs are not read (the checks that follow judge them)."""
        assert self.arena is not None
        specs = self.load(entry)
        places = self.places(entry.expected)
        reply = self.ask("call", inputs=[s.to_json() for s in specs], places=places, poison=poison, stage=stage,
                         shape=shape)  # fmt: skip
        if stage == "compile":
            return (), reply
        self.inputs_intact = self.region_intact(entry)
        if not self.inputs_intact:  # a guard band written is this call's verdict; an input, the checks'
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

    def region_intact(self, entry: Entry) -> bool:
        """Inputs and guard bands exactly as ``load`` wrote them: one comparison, one read-back."""
        assert self.arena is not None
        region = self.arena.buffer[: entry.image.numel()]
        if region.device != entry.image.device:  # an entry kept on the host (the device is short of memory)
            region = region.cpu()  # compared there: no device memory taken
        return torch.equal(region, entry.image)

    def inputs_now(self, entry: Entry) -> tuple[torch.Tensor, ...]:
        assert self.arena is not None
        specs = self.judge.layout().input_specs(entry.inputs)
        return tuple(staging.view(self.arena.buffer, s) for s in specs)


def _seconds(value: Any) -> float:
    """A worker's figure of seconds, or 0.0 for anything that is not a finite non-negative number."""
    return float(value) if isinstance(value, int | float) and 0 <= value < float("inf") else 0.0
