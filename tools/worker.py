"""The worker: runs one candidate's stages inside its own process (spawned by tools.evaluate).

``python -m tools.worker check JOB.json OUT.json``  compile + correctness (+ interpreter timing on CPU)
``python -m tools.worker serve``                     a timing server: one JSON job per stdin line

Everything the candidate does happens here, so a hang, a segfault or a sticky CUDA error kills this
process only; the parent turns that into a verdict. Results are written as JSON (EvalResult fields).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from tools.compare import as_tuple, changed_inputs, check_structure, compare, same_bits
from tools.guard import (
    ForbiddenOperation,
    ImportGuard,
    LaunchRecorder,
    TorchOpGuard,
    kernel_resources,
    tamper_snapshot,
    tampered,
    watched_threads,
)
from tools.results import merge_launch_resources
from tools.sandbox import install_audit_hook
from tools.task import Task, import_file, load_task, torch_dtype
from tools.timing import TimingSettings, copy_bandwidth_gbps, time_fn

# Hopper/Ampere-class per-SM limits; the device's own values are read when a GPU is present.
REGISTERS_PER_SM = 65536
MAX_REGISTERS_PER_THREAD = 255
# A check worker hands its cached GPU memory back after a shape that left more than this reserved.
RELEASE_ABOVE_BYTES = 2 << 30


# Marks a failure of the task's own code (reference, make_inputs), not of the candidate.
TASK_ERROR = {"task_error": True}


class StageFailure(Exception):
    def __init__(self, stage: str, error_type: str, message: str, log: str = "", details: dict | None = None):
        super().__init__(message)
        self.stage, self.error_type, self.message = stage, error_type, message
        self.log, self.details = log, details or {}


# --------------------------------------------------------------------------------------------
# loading


def load_candidate(path: Path, module_name: str) -> tuple[Any, LaunchRecorder]:
    guard = ImportGuard(module_name)
    try:
        with guard:
            module = import_file(path, module_name)
    except Exception as exc:
        cause = exc.__cause__ or exc
        if isinstance(cause, ForbiddenOperation):
            raise StageFailure("static", "forbidden_construct", str(cause), _tb(cause)) from None
        raise StageFailure(
            "compile", "runtime_error", f"importing the candidate failed: {cause}", _tb(cause)
        ) from None
    if not callable(getattr(module, "launch", None)):
        raise StageFailure("static", "no_kernel_launched", "the candidate defines no launch() function")
    recorder = LaunchRecorder()
    if not recorder.wrap_module(module):
        raise StageFailure("static", "no_kernel_launched", "the candidate defines no @triton.jit kernel")
    return module, recorder


def _tb(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def _classify_exception(exc: BaseException, stage: str) -> StageFailure:
    """Map an exception raised by launch() to a verdict, keeping the full text as the log."""
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
    if any(isinstance(e, MemoryError) for e in chain):
        return StageFailure(stage, "runtime_error", "host " + _first_line(text), log)
    if isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in text.lower():
        return StageFailure(stage, "runtime_error", "CUDA out of memory: " + _first_line(text), log)
    return StageFailure(stage, "runtime_error", f"{type(exc).__name__}: {_first_line(text)}", log)


def _first_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[0][:300] if lines else ""


# --------------------------------------------------------------------------------------------
# calling the candidate under the fences


def _inputs(task: Task, shape: dict, dtype: str, device: str, seed: int) -> tuple:
    try:
        made = task.make_inputs(dict(shape), torch_dtype(dtype), device, seed)
    except Exception as exc:
        raise StageFailure(
            "correctness",
            "runtime_error",
            f"the task's make_inputs failed for {shape}: {exc}",
            _tb(exc),
            details=TASK_ERROR,
        ) from None
    made = as_tuple(made)
    if not made or not all(isinstance(t, torch.Tensor) for t in made):
        raise StageFailure(
            "correctness",
            "runtime_error",
            f"the task's make_inputs({shape}) must return a tuple of tensors",
            details=TASK_ERROR,
        )
    return made


def _reference(task: Task, inputs: tuple, shape: dict) -> tuple:
    try:
        with torch.no_grad():
            out = task.reference(*[t.clone() for t in inputs])
    except Exception as exc:
        raise StageFailure(
            "correctness",
            "runtime_error",
            f"the task's reference raised at {shape}: {exc}",
            _tb(exc),
            details=TASK_ERROR,
        ) from None
    return tuple(t.detach() for t in as_tuple(out))


def guarded_call(
    module: Any, recorder: LaunchRecorder, inputs: tuple, config: dict, poison: float | None, stage: str
) -> tuple:
    """One launch() call with the op guard, poisoned allocations, thread watch and launch count."""
    before = recorder.count()
    guard = TorchOpGuard(poison=poison)
    try:
        with watched_threads() as started, guard, recorder.on_caller_stream():
            out = module.launch(*inputs, **config)
    except Exception as exc:
        raise _classify_exception(exc, stage) from None
    _no_side_stream(recorder, stage)
    if started:
        raise StageFailure(
            stage, "forbidden_construct", f"launch() started a background thread ({started[0]})"
        )
    if recorder.count() == before:
        raise StageFailure(stage, "no_kernel_launched", "launch() returned without launching a Triton kernel")
    _sync()
    return as_tuple(out)


def _no_side_stream(recorder: LaunchRecorder, stage: str) -> None:
    if recorder.stream_escapes:
        raise StageFailure(
            stage,
            "forbidden_construct",
            f"launch() ran {recorder.stream_escapes[0]} on another CUDA stream than its caller's: "
            "work on a side stream escapes the caller's events and graph capture, so it escapes timing",
        )


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _poison_value(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).max) if dtype.is_floating_point else 0.0


# --------------------------------------------------------------------------------------------
# stages


def compile_stage(
    task: Task, module: Any, recorder: LaunchRecorder, config: dict, device: str, limits: dict
) -> dict:
    """First launch at the smallest shape: compiles every kernel; checks resources against limits."""
    workload = task.workload(device) + task.check_workload(device)
    shape, dtype = min(workload, key=lambda sd: math.prod(sd[0].values()))
    inputs = _inputs(task, shape, dtype, device, seed=0)
    guarded_call(module, recorder, inputs, config, poison=math.nan, stage="compile")
    kernels = []
    for launch in recorder.launches:
        if any(k["name"] == launch["name"] for k in kernels):
            continue
        entry = {"name": launch["name"], "grid": launch["grid"], "shape": shape}
        if launch["name"] in recorder.compiled:
            entry.update(kernel_resources(recorder.compiled[launch["name"]]))
        kernels.append(entry)
    for k in kernels:
        regs, warps, shared = k.get("n_regs"), k.get("num_warps"), k.get("shared_bytes")
        if regs is not None and warps is not None and regs * 32 * warps > limits["registers_per_sm"]:
            raise StageFailure(
                "compile",
                "resource_limit",
                f"{k['name']}: {regs} registers x {32 * warps} threads exceeds "
                f"{limits['registers_per_sm']} per SM",
                details={"kernel": k},
            )
        if shared is not None and shared > limits["shared_bytes_per_block"]:
            raise StageFailure(
                "compile",
                "resource_limit",
                f"{k['name']}: {shared} bytes of shared memory exceeds {limits['shared_bytes_per_block']}",
                details={"kernel": k},
            )
    return _resources(kernels)


def _resources(kernels: list[dict]) -> dict:
    def worst(key: str) -> Any:
        values = [k.get(key) for k in kernels if k.get(key) is not None]
        return max(values) if values else None

    return {
        "n_regs": worst("n_regs"),
        "n_spills": worst("n_spills"),
        "shared_bytes": worst("shared_bytes"),
        "num_warps": worst("num_warps"),
        "kernels": kernels,
    }


def correctness_stage(
    task: Task,
    module: Any,
    recorder: LaunchRecorder,
    config: dict,
    device: str,
    seeds: int,
    hidden: list[dict] | None = None,
) -> int:
    """Every shape, check shape and hidden shape, several seeds: poisoned outputs, inputs unchanged, a
    second call identical to the first, fresh values in the same buffers re-checked. Returns checks run."""
    checks = 0
    extra = [(shape, dtype) for shape in hidden or [] for dtype in task.dtypes]
    for shape, dtype in task.workload(device) + task.check_workload(device) + extra:
        for seed in range(seeds):
            _check_one(task, module, recorder, config, device, shape, dtype, seed)
            checks += 1
        if device == "cuda" and torch.cuda.memory_reserved() > RELEASE_ABOVE_BYTES:
            torch.cuda.empty_cache()  # parallel check workers share the GPU's memory
    return checks


def _check_one(
    task: Task,
    module: Any,
    recorder: LaunchRecorder,
    config: dict,
    device: str,
    shape: dict,
    dtype: str,
    seed: int,
) -> None:
    """One shape, dtype and seed through every correctness fence (its tensors die on return)."""
    where = {"shape": shape, "dtype": dtype, "seed": seed}
    inputs = _inputs(task, shape, dtype, device, seed)
    saved = tuple(t.clone() for t in inputs)
    expected = _reference(task, inputs, shape)
    out = guarded_call(module, recorder, inputs, config, poison=math.nan, stage="correctness")
    _check(task, module, recorder, inputs, config, out, expected, where)
    for i in changed_inputs(inputs, saved):
        now, before = inputs[i], saved[i]
        if now.shape == before.shape:
            diff = (now != before).reshape(-1).nonzero()
            index = [int(v) for v in torch.unravel_index(diff[0, 0].cpu(), now.shape)] if len(diff) else []
        else:  # resized in place
            index = []
        raise StageFailure(
            "correctness",
            "input_modified",
            f"launch() modified input {i} (first changed element at {index})",
            details={**where, "input": i, "index": index},
        )
    if seed == 0:
        again = guarded_call(module, recorder, inputs, config, poison=math.nan, stage="correctness")
        if not same_bits(out, again):
            raise StageFailure(
                "correctness",
                "nondeterministic",
                "two calls on the same inputs returned different bits",
                details=where,
            )
    # Fresh values written into the same buffers: a result cached by address goes stale here.
    fresh = _inputs(task, shape, dtype, device, seed + 1000)
    for buf, new in zip(inputs, fresh, strict=True):
        buf.copy_(new)
    expected_new = _reference(task, inputs, shape)
    out_new = guarded_call(module, recorder, inputs, config, poison=math.nan, stage="correctness")
    problem = _first_problem(out_new, expected_new, inputs, task, dtype)
    if problem is not None:
        stale = _first_problem(out_new, expected, inputs, task, dtype) is None
        if stale:
            raise StageFailure(
                "correctness",
                "stale_output",
                "after new values were written into the same input buffers, launch() "
                "returned the old result (cached by address?)",
                details=where,
            )
        _check(
            task,
            module,
            recorder,
            inputs,
            config,
            out_new,
            expected_new,
            {**where, "fresh_values": True},
        )


def _first_problem(got: tuple, expected: tuple, inputs: tuple, task: Task, dtype: str) -> tuple | None:
    """The first structural problem or out-of-tolerance output, by the task's tolerance for dtype."""
    structural = check_structure(got, expected, inputs)
    if structural is not None:
        return (structural.error_type, structural.message, structural.details)
    rtol, atol = task.tolerance(dtype)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        found = compare(g, e, rtol, atol, task.row_scaled)
        if found is not None:
            return (found[0], i, found[1])
    return None


def _check(
    task: Task,
    module: Any,
    recorder: LaunchRecorder,
    inputs: tuple,
    config: dict,
    out: tuple,
    expected: tuple,
    where: dict,
) -> None:
    problem = _first_problem(out, expected, inputs, task, where["dtype"])
    if problem is None:
        return
    kind, second, details = problem
    if isinstance(second, str):  # structural
        raise StageFailure("correctness", kind, second, details={**where, **details})
    output = second
    if kind == "nan":
        # NaN where the reference is finite: unwritten (our poison) or computed? Re-run with another poison.
        marker = _poison_value(out[output].dtype)
        again = guarded_call(module, recorder, inputs, config, poison=marker, stage="correctness")
        flat = again[output].reshape(-1)
        pos = 0
        for d, size in zip(details["index"], out[output].shape, strict=True):
            pos = pos * size + d
        if float(flat[pos]) == marker:
            unwritten = int((again[output] == marker).sum())
            raise StageFailure(
                "correctness",
                "unwritten_output",
                f"output {output} element {details['index']} was never written "
                f"({unwritten} of {out[output].numel()} elements unwritten) at {where['shape']}",
                details={**where, "output": output, **details, "count": unwritten},
            )
    raise StageFailure(
        "correctness",
        kind,
        f"output {output} differs at {details['index']}: got {details['got']}, expected {details['expected']} "
        f"({details['count']} of {details['numel']} elements {details['what']}) at {where['shape']} {where['dtype']}",
        details={**where, "output": output, **details},
    )


def interpreter_timing(task: Task, module: Any, recorder: LaunchRecorder, config: dict) -> tuple[list, list]:
    """Wall time of one interpreted call per CPU shape: ranks candidates, never a speed claim."""
    rows: list[dict] = []
    grids: list[dict] = []
    for shape, dtype in task.workload("cpu"):
        inputs = _inputs(task, shape, dtype, "cpu", seed=0)
        samples = []
        for _ in range(3):
            mark = recorder.count()
            start = time.perf_counter()
            module.launch(*inputs, **config)
            samples.append((time.perf_counter() - start) * 1e6)
        grids.extend(_grids(recorder, mark, shape, config))
        samples.sort()
        rows.append(
            {
                "shape": shape,
                "dtype": dtype,
                "median_us": samples[1],
                "min_us": samples[0],
                "spread": samples[1] / samples[0],
                "method": "interpreter",
            }
        )
    return rows, grids


def bytes_moved(task: Task, inputs: tuple, outputs: tuple) -> int:
    if task.spec.bytes_moved:
        return task.spec.bytes_moved
    return sum(t.numel() * t.element_size() for t in (*inputs, *outputs) if isinstance(t, torch.Tensor))


def timing_stage(
    task: Task,
    module: Any,
    recorder: LaunchRecorder,
    config: dict,
    settings: TimingSettings,
    snapshot: dict | None = None,
) -> dict:
    copy_gbps = copy_bandwidth_gbps(settings)
    rows: list[dict] = []
    grids: list[dict] = []
    for shape, dtype in task.workload("cuda"):
        inputs = _inputs(task, shape, dtype, "cuda", seed=0)
        expected = _reference(task, inputs, shape)
        calls = [0]

        def fn(inputs: tuple = inputs, calls: list = calls) -> Any:
            calls[0] += 1
            with recorder.on_caller_stream():
                return module.launch(*inputs, **config)

        before = recorder.count()
        try:
            timed = time_fn(fn, settings)
        except Exception as exc:
            raise _classify_exception(exc, "timing") from None
        _no_side_stream(recorder, "timing")
        if snapshot is not None:
            _untampered(snapshot, "timing")  # patched while being timed, restored before the next call?
        if recorder.count() - before < calls[0]:
            raise StageFailure(
                "timing",
                "no_kernel_launched",
                "launch() skipped kernel launches while being timed",
                details={"shape": shape},
            )
        # The call after timing must still be right: no result cached during the timed runs.
        mark = recorder.count()
        out = guarded_call(module, recorder, inputs, config, poison=math.nan, stage="timing")
        grids.extend(_grids(recorder, mark, shape, config))
        problem = _first_problem(out, expected, inputs, task, dtype)
        if problem is not None:
            raise StageFailure(
                "timing",
                "stale_output" if problem[0] == "mismatch" else problem[0],
                f"the result after timing is wrong at {shape}",
                details={"shape": shape},
            )
        moved = bytes_moved(task, inputs, out)
        gbps = moved / (timed.median_us * 1e-6) / 1e9
        row = {
            "shape": shape,
            "dtype": dtype,
            "median_us": timed.median_us,
            "min_us": timed.min_us,
            "spread": timed.spread,
            "gbps": gbps,
            "roofline_pct": 100 * gbps / copy_gbps,
            "method": timed.method,
            "bytes": moved,
        }
        if task.spec.flops:
            row["tflops"] = task.spec.flops / (timed.median_us * 1e-6) / 1e12
        rows.append(row)
        del inputs, expected, out
    return {"per_shape": rows, "copy_gbps": copy_gbps, "runs": settings.repeats}, grids


def _grids(recorder: LaunchRecorder, since: int, shape: dict, config: dict) -> list[dict]:
    """Grid and compiled resources of each kernel in one launch() call at one shape: registers and
    spills differ per shape, since Triton specializes each kernel on its constexprs."""
    entries = []
    for launch in recorder.launches[since:]:
        entry = {
            "name": launch["name"],
            "grid": launch["grid"],
            "shape": shape,
            "num_warps": config.get("num_warps"),
        }
        compiled = recorder.compiled.get(launch["name"])
        if compiled is not None:
            entry.update({k: v for k, v in kernel_resources(compiled).items() if v is not None})
        entries.append(entry)
    return entries


# --------------------------------------------------------------------------------------------
# entry points


def device_info(device: str) -> dict:
    import triton

    name = torch.cuda.get_device_name() if device == "cuda" else "cpu (Triton interpreter)"
    return {
        "name": name,
        "triton": triton.__version__,
        "torch": torch.__version__.split("+")[0],
        "interpreted": device != "cuda",
    }


def device_limits(device: str) -> dict:
    limits = {"registers_per_sm": REGISTERS_PER_SM, "shared_bytes_per_block": 232448, "sm_count": 132}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        limits["sm_count"] = props.multi_processor_count
        limits["registers_per_sm"] = getattr(props, "regs_per_multiprocessor", REGISTERS_PER_SM)
        limits["shared_bytes_per_block"] = getattr(props, "shared_memory_per_block_optin", 232448)
    return limits


def run_check(job: dict) -> dict:
    """Compile + correctness (+ interpreter timing on CPU) for one candidate."""
    device = job["device"]
    result: dict[str, Any] = {"device": device_info(device)}
    snapshot = tamper_snapshot()
    # Where a check's time goes: process start + imports, compile (first launch), correctness.
    seconds: dict[str, float] = result.setdefault("stage_seconds", {})
    if job.get("spawned_at"):
        seconds["startup"] = max(0.0, time.time() - job["spawned_at"])
    mark = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        seconds[stage] = now - mark
        mark = now

    try:
        task = load_task(job["task"])
        module, recorder = load_candidate(Path(job["candidate"]), f"candidate_{job['identity']}")
        _untampered(snapshot, "compile")
        limits = device_limits(device)
        lap("load")
        result["resources"] = compile_stage(task, module, recorder, job["config"], device, limits)
        lap("compile")
        checks = correctness_stage(
            task, module, recorder, job["config"], device, job.get("seeds", 3), job.get("hidden_shapes")
        )
        lap("correctness")
        result["details"] = {
            "checks": checks,
            "launches": recorder.count(),
            "hidden_shapes": job.get("hidden_shapes", []),
        }
        if device != "cuda":
            rows, grids = interpreter_timing(task, module, recorder, job["config"])
            result["metrics"] = {"per_shape": rows, "runs": 3}
            result["resources"]["kernels"] = merge_launch_resources(grids, result["resources"]["kernels"])
            lap("interpreter_timing")
        _untampered(snapshot, "correctness")
        result.update(verdict="pass", stage="correctness")
    except StageFailure as failure:
        result.update(_failure(failure))
    except Exception as exc:  # anything else the candidate did, e.g. a sticky CUDA error
        result.update(_failure(_classify_exception(exc, "correctness")))
    return result


def run_timing(job: dict, settings: TimingSettings, snapshot: dict) -> dict:
    result: dict[str, Any] = {}
    try:
        task = load_task(job["task"])
        module, recorder = load_candidate(Path(job["candidate"]), f"timed_{job['identity']}_{time.time_ns()}")
        _untampered(snapshot, "timing")  # before timing: a patched timer can also stall it
        result["metrics"], result["grids"] = timing_stage(
            task, module, recorder, job["config"], settings, snapshot
        )
        result.update(verdict="pass", stage="timing")
    except StageFailure as failure:
        result.update(_failure(failure))
    except Exception as exc:
        result.update(_failure(_classify_exception(exc, "timing")))
    changed = tampered(snapshot)
    if changed:
        result.update(
            _failure(
                StageFailure("timing", "forbidden_construct", f"the candidate patched {', '.join(changed)}")
            )
        )
        result["tampered"] = True
    return result


def _untampered(snapshot: dict, stage: str) -> None:
    changed = tampered(snapshot)
    if changed:
        raise StageFailure(stage, "forbidden_construct", f"the candidate patched {', '.join(changed)}")


def _failure(failure: StageFailure) -> dict:
    return {
        "verdict": "fail",
        "stage": failure.stage,
        "error_type": failure.error_type,
        "message": failure.message,
        "log": failure.log,
        "details": failure.details,
    }


def run_compare(job: dict, settings: TimingSettings, snapshot: dict) -> dict:
    """Several already-checked candidates timed back to back in this process (job kind "compare").

    Per shape every candidate is captured once, then the repeats alternate between them (the order
    reversed every other repeat), so clock and thermal drift fall on all alike. Each entry of
    ``results`` has the fields of a timing job's result; a candidate that fails fails alone."""
    from tools.timing import _captured, bench_ms

    entries = job["candidates"]
    results: list[dict[str, Any]] = [{} for _ in entries]
    loaded: dict[int, tuple[Any, LaunchRecorder]] = {}
    rows: dict[int, list[dict]] = {i: [] for i in range(len(entries))}
    grids: dict[int, list[dict]] = {i: [] for i in range(len(entries))}

    def fail(i: int, exc: BaseException) -> None:
        failure = exc if isinstance(exc, StageFailure) else _classify_exception(exc, "timing")
        results[i] = _failure(failure)
        loaded.pop(i, None)

    try:
        task = load_task(job["task"])
        for i, entry in enumerate(entries):
            try:
                loaded[i] = load_candidate(Path(entry["candidate"]), f"compared_{i}_{time.time_ns()}")
            except Exception as exc:
                fail(i, exc)
        copy_gbps = copy_bandwidth_gbps(settings)
        for shape, dtype in task.workload("cuda"):
            inputs = _inputs(task, shape, dtype, "cuda", seed=0)
            expected = _reference(task, inputs, shape)
            targets: dict[int, tuple[Any, str, int, list[int]]] = {}
            for i, (module, recorder) in list(loaded.items()):
                calls = [0]

                def fn(
                    module: Any = module,
                    args: tuple = inputs,
                    config: dict = entries[i]["config"],
                    calls: list = calls,
                    recorder: LaunchRecorder = recorder,
                ) -> Any:
                    calls[0] += 1
                    with recorder.on_caller_stream():
                        return module.launch(*args, **config)

                before = recorder.count()  # the capture's own calls count as launches too
                try:
                    target, method = _captured(fn)
                except Exception as exc:
                    fail(i, exc)
                    continue
                targets[i] = (target, method, before, calls)
            samples: dict[int, list[float]] = {i: [] for i in targets}
            for r in range(max(settings.repeats, 3)):
                for i in targets if r % 2 == 0 else list(targets)[::-1]:
                    if i not in loaded:
                        continue
                    try:
                        ms = bench_ms(targets[i][0], settings.warmup_ms, settings.rep_ms)
                    except Exception as exc:
                        fail(i, exc)
                        continue
                    samples[i].append(ms * 1000.0)
            for i, (_, method, count_before, calls) in targets.items():
                if i not in loaded:
                    continue
                module, recorder = loaded[i]
                config = entries[i]["config"]
                try:
                    _no_side_stream(recorder, "timing")
                    _untampered(snapshot, "timing")
                    if recorder.count() - count_before < calls[0]:
                        raise StageFailure(
                            "timing",
                            "no_kernel_launched",
                            "launch() skipped kernel launches while being timed",
                        )
                    mark = recorder.count()
                    out = guarded_call(module, recorder, inputs, config, poison=math.nan, stage="timing")
                    grids[i].extend(_grids(recorder, mark, shape, config))
                    if _first_problem(out, expected, inputs, task, dtype) is not None:
                        raise StageFailure(
                            "timing", "stale_output", f"the result after timing is wrong at {shape}"
                        )
                except Exception as exc:
                    fail(i, exc)
                    continue
                median, low = sorted(samples[i])[len(samples[i]) // 2], min(samples[i])
                gbps = bytes_moved(task, inputs, out) / (median * 1e-6) / 1e9
                rows[i].append(
                    {
                        "shape": shape,
                        "dtype": dtype,
                        "median_us": median,
                        "min_us": low,
                        "spread": median / low if low > 0 else float("inf"),
                        "gbps": gbps,
                        "roofline_pct": 100 * gbps / copy_gbps,
                        "method": method,
                    }
                )
            del inputs, expected
        for i in loaded:
            metrics = {"per_shape": rows[i], "copy_gbps": copy_gbps, "runs": max(settings.repeats, 3)}
            results[i] = {"verdict": "pass", "stage": "timing", "metrics": metrics, "grids": grids[i]}
    except Exception as exc:  # the task itself or the device: every candidate still open fails with it
        for i in list(loaded):
            fail(i, exc)
    result: dict[str, Any] = {
        "verdict": "pass" if all(r.get("verdict") == "pass" for r in results) else "fail",
        "stage": "timing",
        "results": results,
        "device": device_info("cuda"),
    }
    if any(r.get("error_type") == "runtime_error" for r in results):
        result["error_type"] = "runtime_error"  # the server restarts: CUDA may be sticky
    changed = tampered(snapshot)
    if changed:
        broken = _failure(
            StageFailure("timing", "forbidden_construct", f"a candidate patched {', '.join(changed)}")
        )
        result.update(broken, results=[broken for _ in entries], tampered=True)
    return result


def serve() -> None:
    """Timing server: one JSON job per stdin line; answers 'done <out path>' on stdout."""
    snapshot = tamper_snapshot()
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        os.environ["TRITON_CACHE_DIR"] = job["triton_cache"]
        _set_triton_cache(job["triton_cache"])
        settings = TimingSettings(**job.get("timing", {}))
        compare = job.get("kind") == "compare"
        result = (run_compare if compare else run_timing)(job, settings, snapshot)
        Path(job["out"]).write_text(json.dumps(result, default=str))
        print(f"done {job['out']}", flush=True)
        if result.get("tampered") or result.get("error_type") in {"runtime_error"}:
            return  # a fresh server for the next candidate: state may be poisoned or CUDA sticky


def _set_triton_cache(path: str) -> None:
    try:
        import triton

        triton.knobs.cache.dir = path
    except Exception:
        pass


def _enter_sandbox() -> None:
    """From here on, writes outside the scratch folder, sockets and foreign programs are refused."""
    import triton  # noqa: F401  (imported before the hook: it sets up its own folders)

    writable = [Path.cwd()]
    for var in ("TRITON_CACHE_DIR", "TMPDIR"):
        if os.environ.get(var):
            writable.append(Path(os.environ[var]))
    install_audit_hook(writable)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "check" and len(argv) == 3:
        _enter_sandbox()
        job = json.loads(Path(argv[1]).read_text())
        result = run_check(job)
        Path(argv[2]).write_text(json.dumps(result, default=str))
        return 0
    if argv == ["serve"]:
        _enter_sandbox()
        serve()
        return 0
    print("usage: python -m tools.worker check JOB.json OUT.json | serve", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
