"""The candidate worker: one process per candidate, driven by the judge over a channel.

    python -m tools.worker session CHANNEL_DIR      (forked by the judge's zygote)

The worker holds the candidate and the inputs the judge hands it, never a reference or an expected
value: it calls ``launch()`` and copies what comes back into the arena for the judge to compare. It
never decides a verdict about correctness or speed; what it reports about itself (its own failure,
its compiled resources, event times) the judge treats as claims.

Commands (one reply each): ``call`` (inputs in the arena -> outputs copied into the arena),
``capture`` (copy an input set into own buffers and capture one ``launch()`` in a CUDA graph),
``alternate`` (a second input set for the captured buffers), ``bench`` (timed replays, each one
poisoned before and sampled after), ``verify`` (fresh values into the captured buffers, one replay,
its outputs into the arena), ``replay_k`` (K flushed replays for the judge's wall clock), ``release``
and ``bye``.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from tools import launcher_cache, lockdown, process_seal, replay_log, staging
from tools.channel import WorkerEnd
from tools.guard import (
    REDZONE_BYTES,
    ForbiddenOperation,
    ImportGuard,
    LaunchRecorder,
    TorchOpGuard,
    kernel_resources,
    tamper_snapshot,
    tampered,
    watched_threads,
)
from tools.sandbox import install_audit_hook
from tools.timing import checked_bench_ms, flush_l2, poison_value


class StageFailure(Exception):
    def __init__(self, stage: str, error_type: str, message: str, log: str = "", details: dict | None = None):
        super().__init__(message)
        self.stage, self.error_type, self.message = stage, error_type, message
        self.log, self.details = log, details or {}

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "error_type": self.error_type, "message": self.message,
                "log": self.log[-20000:], "details": self.details}  # fmt: skip


def _tb(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def _first_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[0][:300] if lines else ""


def classify_exception(exc: BaseException, stage: str) -> StageFailure:
    """Map an exception raised by the candidate to a verdict, keeping the full text as the log."""
    if isinstance(exc, StageFailure):
        return exc
    chain, seen = [], exc
    while seen is not None and len(chain) < 8:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    names = {type(e).__name__ for e in chain}
    text = " ".join(str(e) for e in chain)
    log = _tb(exc)
    if any(isinstance(e, ForbiddenOperation) for e in chain):
        forbidden = next(e for e in chain if isinstance(e, ForbiddenOperation))
        return StageFailure(stage, "forbidden_construct", str(forbidden), log)
    if "OutOfResources" in names or "out of resource" in text.lower():
        return StageFailure("compile", "resource_limit", _first_line(text), log)
    if names & {"CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct"}:
        return StageFailure("compile", "compile_error", _first_line(text), log)
    if any(isinstance(e, OSError) and e.errno == errno.EFBIG for e in chain):
        return StageFailure(stage, "crash", "the candidate flooded its output: a file grew past the worker's "
                            "size limit (SIGXFSZ)", log)  # fmt: skip
    if any(isinstance(e, MemoryError) for e in chain):
        return StageFailure(stage, "runtime_error", "host " + _first_line(text), log)
    if isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in text.lower():
        return StageFailure(stage, "runtime_error", "CUDA out of memory: " + _first_line(text), log)
    return StageFailure(stage, "runtime_error", f"{type(exc).__name__}: {_first_line(text)}", log)


# --------------------------------------------------------------------------------------------
# the candidate


def load_candidate(path: Path, module_name: str) -> tuple[Any, LaunchRecorder]:
    guard = ImportGuard(module_name)
    try:
        with watched_threads() as started, guard:
            module = lockdown.import_candidate(path, module_name)
    except SyntaxError as exc:
        raise StageFailure("static", "syntax_error", f"the candidate does not compile: {exc}", _tb(exc)) from None
    except Exception as exc:
        cause = exc.__cause__ or exc
        if isinstance(cause, ForbiddenOperation):
            raise StageFailure("static", "forbidden_construct", str(cause), _tb(cause)) from None
        raise StageFailure("compile", "runtime_error", f"importing the candidate failed: {cause}", _tb(cause)) from None
    if started:
        raise StageFailure("static", "forbidden_construct", f"importing the candidate started a thread ({started[0]})")
    if not callable(getattr(module, "launch", None)):
        raise StageFailure("static", "no_kernel_launched", "the candidate defines no launch() function")
    held = [name for name, value in vars(module).items() if isinstance(value, torch.Tensor)]
    if held:
        raise StageFailure(
            "static", "forbidden_construct",
            f"the candidate holds a tensor at module level ({held[0]}): state kept across calls is not allowed",
        )  # fmt: skip
    recorder = LaunchRecorder()
    if not recorder.wrap_module(module):
        raise StageFailure("static", "no_kernel_launched", "the candidate defines no @triton.jit kernel")
    return module, recorder


class Candidate:
    """The loaded candidate and the fences around each of its calls."""

    def __init__(self, module: Any, recorder: LaunchRecorder, config: dict[str, Any]):
        self.module, self.recorder, self.config = module, recorder, config
        self.tamper = tamper_snapshot()

    def call(
        self, inputs: tuple, poison: float | None, stage: str, redzone: int = REDZONE_BYTES, fills: bool = True
    ) -> tuple:
        """One launch() under the op guard, poisoned and banded allocations, the thread watch, the
        lockdown and the launch count (``fills`` False: constant fills write nothing, see guard.py).
        Returns (outputs, the guard) for the checks after the call."""
        before = self.recorder.count()
        guard = TorchOpGuard(poison=poison, redzone=redzone, fills=fills)
        try:
            with watched_threads() as started, guard, self.recorder.on_caller_stream():
                out = self.module.launch(*inputs, **self.config)
        except Exception as exc:
            raise classify_exception(exc, stage) from None
        self.after_candidate_code(stage)
        if self.recorder.stream_escapes:
            raise StageFailure(
                stage, "forbidden_construct",
                f"launch() ran {self.recorder.stream_escapes[0]} on another CUDA stream than its caller's: "
                "work on a side stream escapes the caller's events and graph capture, so it escapes timing",
            )  # fmt: skip
        if started:
            raise StageFailure(stage, "forbidden_construct", f"launch() started a background thread ({started[0]})")
        if self.recorder.count() == before:
            raise StageFailure(stage, "no_kernel_launched", "launch() returned without launching a Triton kernel")
        _sync()
        out = tuple(out) if isinstance(out, tuple | list) else (out,)
        broken = guard.broken_redzone()
        if broken:
            raise StageFailure(stage, "out_of_bounds_write", f"launch() wrote {broken}")
        return out, guard

    def after_candidate_code(self, stage: str) -> None:
        refused = lockdown.LOCKDOWN.refusal()
        if refused:
            raise StageFailure(stage, "forbidden_construct", refused)
        changed = tampered(self.tamper)
        if changed:
            raise StageFailure(stage, "forbidden_construct", f"the candidate patched {', '.join(changed)}")


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def describe_outputs(out: tuple, arena: torch.Tensor) -> list[dict[str, Any]]:
    """What the judge needs to check the outputs' structure before reading their values."""
    arena_ptr = arena.untyped_storage().data_ptr()
    described = []
    for t in out:
        if not isinstance(t, torch.Tensor):
            described.append({"type": type(t).__name__})
            continue
        described.append({
            "type": "Tensor" if type(t) is torch.Tensor or isinstance(t, torch.nn.Parameter) else type(t).__name__,
            "shape": list(t.shape), "dtype": staging.dtype_name(t.dtype), "device": t.device.type,
            "aliases_input": bool(t.numel()) and t.untyped_storage().data_ptr() == arena_ptr,
        })  # fmt: skip
    return described


def copy_outputs(out: tuple, arena: torch.Tensor, specs: list[dict] | None) -> bool:
    """Copy each output into its place in the arena when every one matches its place's shape and dtype."""
    if specs is None or len(specs) != len(out):
        return False
    places = [staging.Spec.from_json(s) for s in specs]
    for t, place in zip(out, places, strict=True):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != place.shape or staging.dtype_name(t.dtype) != place.dtype:
            return False
    for t, place in zip(out, places, strict=True):
        staging.view(arena, place).copy_(t)
    _sync()
    return True


def compiled_kernels(recorder: LaunchRecorder, since: int, shape: Any, config: dict) -> list[dict[str, Any]]:
    """Grid and compiled resources of each kernel launched since ``since`` (Triton specializes per shape);
    without a compiled kernel (the interpreter) the warps are the config's."""
    kernels = []
    for launch in recorder.launches[since:]:
        entry = {"name": launch["name"], "grid": launch["grid"], "shape": shape, "num_warps": config.get("num_warps")}
        compiled = recorder.compiled.get(launch["name"])
        if compiled is not None:
            entry.update({k: v for k, v in kernel_resources(compiled).items() if v is not None})
        kernels.append(entry)
    return kernels


# --------------------------------------------------------------------------------------------
# the session


class Session:
    """Serves the judge's commands for one candidate until ``bye``."""

    def __init__(self, channel: WorkerEnd, arena: torch.Tensor, candidate: Candidate, device: str):
        self.channel, self.arena, self.cand, self.device = channel, arena, candidate, device
        self.graph: dict[str, Any] = {}

    def inputs(self, specs: list[dict]) -> tuple[torch.Tensor, ...]:
        return tuple(staging.view(self.arena, staging.Spec.from_json(s)) for s in specs)

    def serve(self) -> None:
        while True:
            msg = self.channel.receive()
            if msg is None or msg.get("op") == "bye":
                if msg is not None:
                    self.channel.reply(msg.get("id"), ok=True)
                return
            handler = getattr(self, "op_" + str(msg.get("op")), None)
            try:
                if handler is None:
                    raise StageFailure("timing", "runtime_error", f"unknown command {msg.get('op')!r}")
                reply = handler(msg)
            except StageFailure as failure:
                reply = {"failure": failure.to_json()}
            except Exception as exc:  # a sticky CUDA error and the like: the candidate's failure
                reply = {"failure": classify_exception(exc, msg.get("stage") or "timing").to_json()}
            with contextlib.suppress(Exception):  # the GPU idle before the judge hears back (tools/gpu_gate.py)
                _sync()
            launchers = LAUNCHERS.take()  # a hint: the judge builds these once for later workers
            self.channel.reply(msg.get("id"), jit_s=JIT.take(), **({"launchers": launchers} if launchers else {}),
                               **reply)

    # -- checks ---------------------------------------------------------------------------------
    def op_compile(self, msg: dict) -> dict:
        """launch() on inputs of the shape's layout (their values unread), each Triton kernel it asks for
        compiled and loaded and none launched: the seconds of compiling spent where no GPU work runs."""
        mark = self.cand.recorder.count()
        self.cand.recorder.compile_only = True
        try:
            out, _ = self.cand.call(self.inputs(msg["inputs"]), None, "compile", redzone=0, fills=False)
        finally:
            self.cand.recorder.compile_only = False
        replay_log.warm(out)
        del out
        return {"kernels": compiled_kernels(self.cand.recorder, mark, msg.get("shape"), self.cand.config)}

    def op_call(self, msg: dict) -> dict:
        stage = msg.get("stage", "correctness")
        poison = msg.get("poison", "nan")
        value = math.nan if poison == "nan" else (None if poison is None else float(poison))
        mark = self.cand.recorder.count()
        started = time.perf_counter()
        out, guard = self.cand.call(self.inputs(msg["inputs"]), value, stage)
        wall_us = (time.perf_counter() - started) * 1e6
        reply = {
            "outputs": describe_outputs(out, self.arena),
            "copied": copy_outputs(out, self.arena, msg.get("places")),
            "wall_us": wall_us,
            "kernels": compiled_kernels(self.cand.recorder, mark, msg.get("shape"), self.cand.config),
        }
        replay_log.warm(out)  # the timing log's kernels, compiled while checks run in parallel
        del out
        kept = guard.kept_alive()
        if kept:  # a cache: whatever it serves later is a result of other inputs
            raise StageFailure(
                "correctness", "stale_output",
                f"launch() kept {kept} tensor(s) it allocated alive after it returned: results or inputs "
                "cached across calls are not allowed (a later call could serve them stale)",
            )  # fmt: skip
        return reply

    # -- timing (GPU) ---------------------------------------------------------------------------
    def op_capture(self, msg: dict) -> dict:
        """Own copies of the inputs, one warm call, then one launch() captured in a CUDA graph (or called
        directly each time where capture is impossible)."""
        self.op_release({})
        own = tuple(t.clone() for t in self.inputs(msg["inputs"]))
        calls = [0]

        def launch() -> tuple:
            calls[0] += 1
            guard = TorchOpGuard(poison=None)  # allocation only, no torch compute, nothing captured but the kernels
            with guard, self.cand.recorder.on_caller_stream():
                out = self.cand.module.launch(*own, **self.cand.config)
            self.cand.after_candidate_code("timing")
            return tuple(out) if isinstance(out, tuple | list) else (out,)

        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                launch()  # warm: compile, allocate
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            mark = self.cand.recorder.count()
            graph = torch.cuda.CUDAGraph()
            method = "cuda_graph"
            try:
                with torch.cuda.graph(graph):
                    outs = launch()
            except Exception:
                torch.cuda.synchronize()
                graph, method, outs = None, "direct", launch()
            torch.cuda.synchronize()
        except Exception as exc:
            raise classify_exception(exc, "timing") from None
        self.cand.after_candidate_code("timing")
        self.graph = {"graph": graph, "call": launch, "inputs": own, "outputs": outs, "method": method,
                      "alternate": None}
        return {"method": method, "kernels": compiled_kernels(self.cand.recorder, mark, msg.get("shape"), self.cand.config),
                "outputs": describe_outputs(outs, self.arena)}  # fmt: skip

    def _run(self) -> None:
        """One timed unit: the graph's replay, or (where capture was impossible) a guarded direct call."""
        g = self.graph
        if g["graph"] is not None:
            g["graph"].replay()
        else:
            g["outputs"] = g["call"]()

    def op_alternate(self, msg: dict) -> dict:
        self.graph["alternate"] = (
            tuple(t.clone() for t in self.graph["inputs"]),  # the first set, kept
            tuple(t.clone() for t in self.inputs(msg["inputs"])),
        )
        return {"ok": True}

    def op_bench(self, msg: dict) -> dict:
        """``repeats`` checked bench runs; with ``rotate`` the captured buffers get the two input sets in
        turn before each timed run. The log of every timed run goes into the arena's log region."""
        g = self.graph
        samples = []  # a flat index tensor for a contiguous output (a view), one per dimension otherwise
        for out, wanted in zip(g["outputs"], msg["samples"], strict=True):
            if out.is_contiguous():
                samples.append(torch.tensor(wanted["flat"], device="cuda", dtype=torch.long))
            else:
                samples.append(tuple(torch.tensor(ix, device="cuda", dtype=torch.long) for ix in wanted["index"]))
        before = None
        if msg.get("rotate"):
            first, second = g["alternate"]

            def before(i: int) -> None:
                for buf, src in zip(g["inputs"], first if i % 2 == 0 else second, strict=True):
                    buf.copy_(src)

        medians, runs, logs = [], [], []
        for _ in range(int(msg.get("repeats", 1))):
            median, times, log = checked_bench_ms(
                self._run, lambda: g["outputs"], samples, msg["warmup_ms"], msg["rep_ms"], before,
                max_reps=int(msg.get("max_reps", 1000)),
            )  # fmt: skip
            medians.append(median * 1000.0)
            runs.append(len(times))
            logs.append(log)
        if msg.get("rotate"):
            for buf, src in zip(g["inputs"], g["alternate"][0], strict=True):
                buf.copy_(src)  # the captured buffers hold the first set again
        self.cand.after_candidate_code("timing")
        flat = torch.cat([log.reshape(-1) for log in logs])
        place = staging.Spec(int(msg["log_at"]), (flat.numel(),), (1,), "float64")
        if place.offset + place.nbytes > self.arena.numel():
            raise StageFailure("timing", "runtime_error", "the timing log does not fit the arena")
        staging.view(self.arena, place).copy_(flat)
        _sync()
        width = logs[0].shape[-1]
        return {"medians_us": medians, "runs": runs, "log": place.to_json(), "width": int(width)}

    def op_verify(self, msg: dict) -> dict:
        """Fresh values into the captured buffers, the outputs poisoned, one replay, outputs to the judge."""
        g = self.graph
        for buf, src in zip(g["inputs"], self.inputs(msg["inputs"]), strict=True):
            buf.copy_(src)
        for out in g["outputs"]:
            value = poison_value(out.dtype)
            if value is not None:
                out.fill_(value)
        torch.cuda.synchronize()
        self._run()
        torch.cuda.synchronize()
        return {"outputs": describe_outputs(g["outputs"], self.arena),
                "copied": copy_outputs(g["outputs"], self.arena, msg.get("places"))}  # fmt: skip

    def op_replay_k(self, msg: dict) -> dict:
        torch.cuda.synchronize()
        for _ in range(int(msg["k"])):
            flush_l2()
            self._run()
        torch.cuda.synchronize()
        return {"ok": True}

    def op_unmap(self, msg: dict) -> dict:
        self.arena = torch.empty(0, dtype=torch.uint8)
        _sync()
        if self.device == "cuda":  # a parked worker keeps no cached memory while it waits to be timed
            torch.cuda.empty_cache()
        return {"ok": True}

    def op_map(self, msg: dict) -> dict:
        self.arena = staging.open_arena(msg["arena"])
        return {"ok": True}

    def op_release(self, msg: dict) -> dict:
        self.graph = {}
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        return {"ok": True}


class JitClock:
    """Seconds Triton spent compiling since the last reply, heard from its compilation listener (where this
    Triton has one): the judge's account of where a stage's time went, never part of a verdict."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def install(self) -> None:
        try:
            from triton import knobs

            knobs.compilation.listener = self.heard
        except (ImportError, AttributeError):
            pass

    def heard(self, *, times: Any = None, **_: Any) -> None:
        with contextlib.suppress(Exception):
            self.seconds += (times.ir_initialization + times.total_lowering + times.store_results) / 1e6

    def take(self) -> float:
        seconds, self.seconds = self.seconds, 0.0
        return seconds


JIT = JitClock()
LAUNCHERS = launcher_cache.SignatureLog()


# --------------------------------------------------------------------------------------------
# entry point


def _set_triton_cache(path: str) -> None:
    """Point Triton's cache at ``path`` (the environment variable alone is read only at import)."""
    try:
        import triton

        triton.knobs.cache.dir = path
    except Exception:
        pass


def _enter_sandbox(deny: tuple[str, ...] = (), private: tuple[str, ...] = ()) -> None:
    """From here on, writes outside the scratch folder, sockets, foreign programs, other processes'
    files and other candidates' files (under ``private``) are refused."""
    import triton  # noqa: F401  (imported before the hook: it sets up its own folders)

    writable = [Path.cwd()]
    for var in ("TRITON_CACHE_DIR", "TMPDIR"):
        if os.environ.get(var):
            writable.append(Path(os.environ[var]))
    install_audit_hook(writable, deny=deny, private=private)


def run_session(channel_dir: Path) -> int:
    channel = WorkerEnd(channel_dir)
    hello = channel.receive()
    if hello is None:
        return 1
    device = hello["device"]
    try:
        arena = staging.open_arena(hello["arena"])
    except Exception as exc:
        channel.reply(hello.get("id"), failure=StageFailure("compile", "runtime_error",
                      f"the worker could not map its inputs: {exc}", _tb(exc)).to_json())  # fmt: skip
        return 1
    process_seal.seal_worker(device)
    _enter_sandbox(deny=channel.paths, private=tuple(filter(None, [hello.get("private")])))
    JIT.install()
    if device == "cuda" and hello.get("name_launchers"):  # the judge builds them (prebuilt_launchers)
        LAUNCHERS.install()
    name = hello["module_name"]
    lockdown.LOCKDOWN.install(name)
    modules_before = lockdown.module_snapshot()
    try:
        module, recorder = load_candidate(Path(hello["candidate"]), name)
        cand = Candidate(module, recorder, hello["config"])
        cand.after_candidate_code("compile")
        _no_module_patches(modules_before, "compile")
    except StageFailure as failure:
        channel.reply(hello.get("id"), failure=failure.to_json())
        return 0
    channel.reply(hello.get("id"), ok=True, pid=os.getpid())
    Session(channel, arena, cand, device).serve()
    return 0


def _no_module_patches(before: dict, stage: str) -> None:
    changed = lockdown.changed_modules(before)
    if changed:
        raise StageFailure(stage, "forbidden_construct", f"the candidate replaced {', '.join(changed[:3])}")


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "session":
        return run_session(Path(argv[1]))
    print("usage: python -m tools.worker session CHANNEL_DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
