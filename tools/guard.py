"""Runtime fences around a candidate's ``launch``: what it may do while we watch.

- ``LaunchRecorder`` wraps every ``@triton.jit`` kernel of the candidate module and records each launch
  (kernel name, grid, compiled-kernel resources). A launch() that launched nothing is rejected.
- ``TorchOpGuard`` is a TorchDispatchMode that lets launch() allocate and reshape tensors but not
  compute with torch (which would let a "kernel" hand back a torch or cuBLAS result). Fresh
  allocations are poisoned (NaN, or a sentinel) so elements the kernel never writes are visible.
- ``ImportGuard`` enforces the import allow-list at run time for code executed from the candidate.
- ``tamper_snapshot`` records the identity of timing-critical functions so a candidate that patches
  timers or the evaluator is caught.
"""

from __future__ import annotations

import builtins
import math
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from tools.sandbox import ForbiddenOperation
from tools.static_check import ALLOWED_IMPORTS

__all__ = ["ForbiddenOperation"]  # raised here, defined where the zygote can import it without torch


_ALLOC_OPS = {
    "empty.memory_format",
    "empty_like.default",
    "empty_strided.default",
    "new_empty.default",
    "new_empty_strided.default",
}
# Ops that allocate, fill with a constant, or change a tensor's view of existing memory.
_ALLOWED_OPS = _ALLOC_OPS | {
    "zeros.default",
    "zeros_like.default",
    "zero_.default",
    "fill_.Scalar",
    "full.default",
    "full_like.default",
    "ones.default",
    "ones_like.default",
    "view.default",
    "_unsafe_view.default",
    "reshape.default",
    "as_strided.default",
    "expand.default",
    "select.int",
    "slice.Tensor",
    "unsqueeze.default",
    "squeeze.dim",
    "squeeze.default",
    "permute.default",
    "transpose.int",
    "t.default",
    "detach.default",
    "alias.default",
    "lift_fresh.default",
    "resize_.default",
    "unbind.int",
    "split.Tensor",
    "chunk.default",
    "flatten.using_ints",
    "is_contiguous.default",
    "is_contiguous.memory_format",
    "sym_size.int",
    "sym_stride.int",
    "sym_numel.default",
    "sym_storage_offset.default",
    "size.default",
    "stride.default",
    "numel.default",
    "dim.default",
}


# Ops that write a constant: in a compile-only call (tools/worker.py op_compile, values never read) they
# allocate and write nothing, so that the command runs no GPU work beside another candidate's timed run.
_FILL_IN_PLACE = {"zero_.default", "fill_.Scalar"}
_FILLED_NEW = {"zeros.default", "ones.default", "full.default"}
_FILLED_LIKE = {"zeros_like.default", "ones_like.default", "full_like.default"}


def _unfilled(name: str, func: Any, args: tuple, kwargs: dict) -> Any:
    """What a fill op returns without its fill: the tensor as it was, or a fresh allocation of the shape
    and dtype the op would have made (``full`` takes its dtype from the fill value)."""
    if name in _FILL_IN_PLACE:
        return args[0]
    if name in _FILLED_LIKE:
        return torch.ops.aten.empty_like.default(args[0], **kwargs)
    meta = func(*args, **{**kwargs, "device": torch.device("meta")})
    return torch.ops.aten.empty.memory_format(meta.shape, **{**kwargs, "dtype": meta.dtype})


def _op_name(func: Any) -> str:
    name = str(getattr(func, "__name__", func))
    schema = getattr(func, "_schema", None)
    base = schema.name.split("::")[-1] if schema is not None else name
    overload = getattr(func, "_overloadname", "default") or "default"
    return f"{base}.{overload}"


# Host memory launch() may allocate in one call. GPU workers run without an address-space limit (CUDA
# reserves terabytes of virtual memory), so without this cap a host tensor of terabytes would be
# filled page by page until the machine ran out of memory. Checked before the allocation happens.
HOST_ALLOCATION_LIMIT = 16 << 30
# Ops that create a tensor: their size is known (on the meta device) before any memory is taken.
_CREATION_OPS = {
    "empty.memory_format",
    "empty_like.default",
    "empty_strided.default",
    "new_empty.default",
    "new_empty_strided.default",
    "zeros.default",
    "zeros_like.default",
    "full.default",
    "full_like.default",
    "ones.default",
    "ones_like.default",
}


def _host_bytes_requested(name: str, func: Any, args: tuple, kwargs: dict) -> int:
    """Bytes of host memory this op would allocate (0 for device tensors and views)."""
    first = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if name == "resize_.default" and first is not None and first.device.type == "cpu":
        return math.prod(args[1]) * first.element_size()
    if name not in _CREATION_OPS:
        return 0
    device = kwargs.get("device") or (first.device if first is not None else torch.get_default_device())
    if torch.device(device).type != "cpu":
        return 0
    meta = func(*args, **{**kwargs, "device": torch.device("meta")})
    return meta.untyped_storage().nbytes()  # what the strides need, not just numel


REDZONE_BYTES = 64 << 10  # canary bytes before and after each tensor launch() allocates
REDZONE_CANARY = 0x5A


def _target_device(args: tuple, kwargs: dict) -> torch.device:
    if kwargs.get("device") is not None:
        return torch.device(kwargs["device"])
    first = args[0] if args and isinstance(args[0], torch.Tensor) else None
    return first.device if first is not None else torch.get_default_device()


class TorchOpGuard(TorchDispatchMode):
    """Allow-list torch ops inside launch(); poison fresh floating-point allocations.

    With ``redzone`` each fresh allocation sits between two bands of canary bytes: ``broken_redzone``
    then names a store before or past a tensor's ends, and ``kept_alive`` names the allocations still
    alive after launch() returned other than its outputs (state kept across calls: a cache)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # False: torch leaves __torch_dispatch__ unwrapped, so the first dispatch does not import
        # torch._dynamo (about 840 modules, seconds of each zygote's start). The wrapper only matters
        # inside a torch.compile'd region, which a candidate may not enter (tools/static_check.py).
        return False

    def __init__(self, poison: float | None = math.nan, redzone: int = 0, fills: bool = True):
        super().__init__()
        self.poison = poison
        self.redzone = redzone
        self.fills = fills  # False: constant fills allocate and write nothing (a compile-only call)
        self.violations: list[str] = []
        self.allocations: list[torch.Tensor] = []
        # (buffer with both bands, bytes between them, its storage's use count with no view alive)
        self._raw: list[tuple[torch.Tensor, int, int]] = []
        self.host_bytes = 0  # host memory requested so far in this call

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _op_name(func)
        if name not in _ALLOWED_OPS:
            self.violations.append(f"aten.{name}")
            raise ForbiddenOperation(
                f"launch() computed with torch (aten.{name}); a candidate may only allocate and reshape "
                "tensors and launch Triton kernels"
            )
        self.host_bytes += _host_bytes_requested(name, func, args, kwargs)
        if self.host_bytes > HOST_ALLOCATION_LIMIT:
            raise MemoryError(
                f"out of memory: launch() asked for {self.host_bytes / 2**30:.0f} GiB of host memory; a "
                f"candidate may take at most {HOST_ALLOCATION_LIMIT / 2**30:.0f} GiB"
            )
        if not self.fills and (name in _FILL_IN_PLACE or name in _FILLED_NEW or name in _FILLED_LIKE):
            out = _unfilled(name, func, args, kwargs)
        elif name in _ALLOC_OPS and self.redzone:
            out = self._guarded_allocation(func, args, kwargs)
        elif name == "as_strided.default" and self.redzone:
            out = func(*self._from_allocation_start(args), **kwargs)
        else:
            out = func(*args, **kwargs)
        if name in _ALLOC_OPS and isinstance(out, torch.Tensor):
            if self.poison is not None and out.is_floating_point() and out.numel():
                out.fill_(self.poison)
            self.allocations.append(out)
        return out

    def _guarded_allocation(self, func: Any, args: tuple, kwargs: dict) -> torch.Tensor:
        meta = func(*args, **{**kwargs, "device": torch.device("meta")})
        nbytes = meta.untyped_storage().nbytes()
        band = self.redzone
        with _disable_current_modes():
            raw = torch.empty(nbytes + 2 * band, dtype=torch.uint8, device=_target_device(args, kwargs))
            alone = _use_count(raw)
            raw[:band].fill_(REDZONE_CANARY)
            raw[band + nbytes :].fill_(REDZONE_CANARY)
            typed = raw.view(meta.dtype)
            out = typed.as_strided(meta.shape, meta.stride(), band // meta.element_size())
        self._raw.append((raw, nbytes, alone))
        return out

    def _from_allocation_start(self, args: tuple) -> tuple:
        """``as_strided(t, size, stride, offset)`` counts ``offset`` from the start of t's storage, which for
        a guarded allocation is the band before it: counted from the allocation's start instead, as it
        would be without the bands (Inductor's reinterpret_tensor(buf, (), (), 0) views a buffer's start)."""
        if len(args) < 4 or args[3] is None:
            return args
        base = args[0].untyped_storage().data_ptr()
        if not any(raw.data_ptr() == base for raw, _, _ in self._raw):
            return args
        return (*args[:3], args[3] + self.redzone // args[0].element_size(), *args[4:])

    def broken_redzone(self) -> str:
        """Which allocation's band was written (and where), or ""."""
        band = self.redzone
        if not self._raw or not band:
            return ""
        flags = [((raw[:band] != REDZONE_CANARY).any() | (raw[band + n :] != REDZONE_CANARY).any())
                 for raw, n, _ in self._raw]  # fmt: skip
        hits = torch.stack([f.to(flags[0].device) for f in flags]).tolist()
        for i, hit in enumerate(hits):
            if hit:
                raw, n, _ = self._raw[i]
                before = (raw[:band] != REDZONE_CANARY).nonzero()
                if len(before):
                    return f"{band - int(before[0, 0])} bytes before the start of the tensor it allocated #{i}"
                after = int((raw[band + n :] != REDZONE_CANARY).nonzero()[0, 0])
                return f"byte {after} past the end of the tensor it allocated #{i} ({n} bytes)"
        return ""

    def kept_alive(self) -> int:
        """How many of this call's allocations are still referenced by anyone but this guard: call it once
        the caller has dropped the outputs, so what is left is state kept across calls (a cache)."""
        self.allocations.clear()
        kept = sum(1 for raw, _, alone in self._raw if _use_count(raw) > alone)
        self._raw.clear()
        return kept


def warm() -> None:
    """The guard's first dispatch, on the CPU: what it imports is loaded once in the zygote, so that every
    worker forked from it starts with it (torch._dynamo, seconds, on a torch that wraps the dispatch anyway)."""
    with TorchOpGuard(poison=math.nan, redzone=64):
        torch.empty_like(torch.empty(4)).view(2, 2)


def _use_count(tensor: torch.Tensor) -> int:
    return torch._C._storage_Use_Count(tensor.untyped_storage()._cdata)


class LaunchRecorder:
    """Record each launch of the candidate's kernels; suspend the op guard while a kernel runs
    (the Triton interpreter itself uses torch ops to move arguments)."""

    def __init__(self) -> None:
        self.launches: list[dict[str, Any]] = []
        self.compiled: dict[str, Any] = {}
        self._wrapped: list[tuple[Any, Any]] = []
        self.expected_stream: int | None = None
        self.stream_escapes: list[str] = []  # kernels launched on another stream than launch()'s caller
        self.compile_only = False  # compile and load each kernel launch() asks for, launch none

    @contextmanager
    def on_caller_stream(self) -> Any:
        """Within the block, every launch must go to the stream current at entry: work queued on a
        side stream is not ordered with the caller's events or graph capture, so it escapes timing."""
        previous = self.expected_stream
        self.expected_stream = _current_stream()
        try:
            yield
        finally:
            self.expected_stream = previous

    def wrap_module(self, module: Any) -> list[str]:
        from triton.runtime.jit import KernelInterface

        names = []
        for attr, obj in vars(module).items():
            if isinstance(obj, KernelInterface) and "run" not in vars(obj):
                self._wrap(attr, obj)
                names.append(attr)
        return names

    def _wrap(self, attr: str, kernel: Any) -> None:
        original_run = kernel.run
        recorder = self

        def run(*args, grid, warmup, **kwargs):
            held = recorder.compile_only and not warmup
            with _disable_current_modes():
                compiled = original_run(*args, grid=grid, warmup=warmup or held, **kwargs)
                if held and compiled is not None:
                    getattr(compiled, "run", None)  # loads the binary (its registers and spills), launches nothing
            if not warmup:
                if recorder.expected_stream is not None and _current_stream() != recorder.expected_stream:
                    recorder.stream_escapes.append(attr)
                recorder.launches.append({"name": attr, "grid": _grid_tuple(grid, args, kwargs, kernel)})
                if compiled is not None and hasattr(compiled, "n_regs"):
                    recorder.compiled[attr] = compiled  # the specialization this launch used
            return compiled

        kernel.run = run
        self._wrapped.append((kernel, original_run))

    def count(self) -> int:
        return len(self.launches)


def _current_stream() -> int | None:
    """The CUDA stream Triton launches on now (None without an initialized GPU)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.current_stream().cuda_stream
    return None


def _grid_tuple(grid: Any, args: tuple, kwargs: dict, kernel: Any) -> list[int] | None:
    if callable(grid):
        try:
            names = list(getattr(kernel, "arg_names", []))
            meta = dict(zip(names, args, strict=False)) | kwargs
            grid = grid(meta)
        except Exception:
            return None
    try:
        dims = [int(g) for g in grid]
    except Exception:
        return None
    return dims + [1] * (3 - len(dims))


def kernel_resources(compiled: Any) -> dict[str, Any]:
    """Registers, spills and shared memory of one compiled Triton kernel."""
    meta = getattr(compiled, "metadata", None)
    return {
        "n_regs": getattr(compiled, "n_regs", None),
        "n_spills": getattr(compiled, "n_spills", None),
        "shared_bytes": getattr(meta, "shared", None),
        "num_warps": getattr(meta, "num_warps", None),
        "num_stages": getattr(meta, "num_stages", None),
    }


class ImportGuard:
    """Deny imports outside the allow-list when the importing code is the candidate's."""

    def __init__(self, module_name: str):
        self.module_name = module_name
        self.denied: list[str] = []
        self._original = builtins.__import__

    def __enter__(self) -> ImportGuard:
        original, guard = self._original, self

        def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
            caller = (globals or {}).get("__name__", "")
            if caller == guard.module_name and name.split(".")[0] not in ALLOWED_IMPORTS:
                guard.denied.append(name)
                raise ForbiddenOperation(f"import of {name!r} is not allowed in a candidate")
            return original(name, globals, locals, fromlist, level)

        builtins.__import__ = guarded_import
        return self

    def __exit__(self, *exc: Any) -> None:
        builtins.__import__ = self._original


def tamper_snapshot() -> dict[str, Any]:
    """The functions a cheating candidate would patch to fake its timing (the objects themselves: an
    id() can be reused by a replacement once the original is gone)."""
    import triton.testing

    from tools import timing

    watched: dict[str, Any] = {
        "tools.timing.bench_ms": timing.bench_ms,
        "tools.timing.flush_l2": timing.flush_l2,
        "torch.sum": torch.sum,
        "triton.testing.do_bench": triton.testing.do_bench,
        "triton.testing.do_bench_cudagraph": triton.testing.do_bench_cudagraph,
        "time.perf_counter": time.perf_counter,
        "time.time": time.time,
        "threading.Thread.start": threading.Thread.start,
        "torch.cuda.synchronize": torch.cuda.synchronize,
        "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
        "torch.cuda.Event.record": torch.cuda.Event.record,
        "torch.cuda.current_stream": torch.cuda.current_stream,
        "torch.Tensor.__setattr__": torch.Tensor.__setattr__,
        "builtins.__import__": builtins.__import__,
        "torch.cuda.CUDAGraph.replay": torch.cuda.CUDAGraph.replay,
        "torch.cuda.graph": torch.cuda.graph,
    }
    return watched


def tampered(before: dict[str, Any]) -> list[str]:
    after = tamper_snapshot()
    return [name for name, obj in before.items() if after.get(name) is not obj]


def _python_threads() -> dict[int, str]:
    """Every thread running Python code, by ident: threading's and those started with ``_thread``, which
    threading does not list (the interpreter's frames of each do)."""
    named = {t.ident: t.name for t in threading.enumerate() if t.ident is not None and t.is_alive()}
    return {ident: named.get(ident, f"a thread started with _thread ({ident})") for ident in sys._current_frames()}


@contextmanager
def watched_threads() -> Any:
    """Yield a list that receives the names of threads started while the block runs, still alive."""
    before = set(_python_threads())
    started: list[str] = []
    try:
        yield started
    finally:
        started.extend(name for ident, name in _python_threads().items() if ident not in before)
