"""softmax: Row softmax over the last dimension: y[i, :] = exp(x[i, :] - max(x[i, :])) / sum(exp(x[i, :] - max(x[i, :]))), computed in fp32 and stored in the input dtype (float32 or bfloat16).

Exported by kernel-agent (python -m tools.export). Per-shape table over M, N: 63.75 us geomean
against 126.18 us for one config (+97.9%), measured on NVIDIA H100 80GB HBM3; run softmax.

    from softmax_kernel import launch   # or whatever this file is named
    outputs = launch(*inputs)              # the config the table picks for these shapes
    outputs = launch(*inputs, **config)    # any config of the search space, on baseline.py

Needs only torch and triton. Host cost: the config for a shape and dtype is chosen on the first call
there and bound to its launcher; once two calls at a signature (the inputs' shapes, strides, dtypes
and alignment, the other arguments' values) have done the same, later calls there allocate the same
outputs and launch the same compiled kernels directly, without Triton's per-call dispatch
(``Replayed`` below says when a call stays on the launcher). ``launcher_for(*inputs)`` returns that
bound launcher, to call it directly.

Without a GPU: set TRITON_INTERPRET=1 in the environment before triton is first imported
(``TRITON_INTERPRET=1 python app.py``: Triton reads it when kernels are defined) and pass CPU
tensors; the kernels then run in Triton's interpreter, correct but slow (small shapes only).

In a CUDA graph: call ``launch(*inputs)`` once outside the capture (Triton compiles the kernels),
then capture one call per shape. The config is chosen at capture time; a replay reruns the captured
kernels on the same input and output buffers:

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = launch(*inputs)
    graph.replay()   # after refilling the inputs in place; outputs holds the results

Under torch.compile: ``torch.compiler.disable(launch)`` keeps the call out of the graph (a graph
break; it then runs eagerly, as here). Dynamo also traces Python code that launches Triton kernels
(PyTorch >= 2.3), so ``launch`` can be called inside a compiled function as it is. To give the op a
schema other PyTorch subsystems understand, wrap it in ``torch.library.custom_op`` (opaque to the
compiler; it needs a fake implementation giving the outputs' shapes). In Triton's interpreter only
the disabled form works: Dynamo cannot trace interpreted kernels.
"""

import functools
import math

import torch
import triton
import triton.language as tl

# --------------------------------------------------------------------------------------------------
# from baseline.py (candidate 48974053d93a9f0f)
# Row softmax, the tutorial kernel: one row per program, the whole row in one block.

@triton.jit
def softmax_kernel(x_ptr, y_ptr, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=float("-inf")).to(tl.float32)
    num = tl.exp(x - tl.max(x, axis=0))
    y = num / tl.sum(num, axis=0)
    tl.store(y_ptr + row * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch_baseline(x, *, num_warps: int):
    assert x.is_contiguous(), "x must be contiguous"
    M, N = x.shape
    y = torch.empty_like(x)
    softmax_kernel[(M,)](x, y, N, BLOCK_N=triton.next_power_of_2(N), num_warps=num_warps)
    return y


# --------------------------------------------------------------------------------------------------
# from split_row.py (candidate 8b50cca26beb7325)
# Row softmax split across programs: for few long rows (M = 1), SPLITS programs share each row.
#
# Kernel 1: each (row, split) program reduces its CHUNK of the row to a partial (max, sum).
# Kernel 2: each (row, split) program combines the row's SPLITS partials into the row's max and sum
# and writes its chunk of exp(x - max) / sum, re-reading x (mostly from L2). With M rows the grid is
# M x SPLITS, so even one row keeps the SMs busy.

LOG2E = tl.constexpr(1.4426950408889634)  # kernels may only read constexpr globals


@triton.jit
def softmax_partial_kernel(x_ptr, max_ptr, sum_ptr, N, CHUNK, SPLITS: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    split = tl.program_id(1)
    x_row = x_ptr + row.to(tl.int64) * N
    lo = split * CHUNK
    hi = tl.minimum(lo + CHUNK, N)
    cols = tl.arange(0, BLOCK_N)
    m = tl.full([], float("-inf"), tl.float32)
    s = tl.full([BLOCK_N], 0.0, tl.float32)
    # A split past the end of a short row runs no iteration and reports (max=-inf, sum=0).
    for start in range(lo, hi, BLOCK_N):
        idx = start + cols
        x = tl.load(x_row + idx, mask=idx < hi, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp2((m - m_new) * LOG2E) + tl.exp2((x - m_new) * LOG2E)
        m = m_new
    tl.store(max_ptr + row * SPLITS + split, m)
    tl.store(sum_ptr + row * SPLITS + split, tl.sum(s, axis=0))


@triton.jit
def softmax_normalize_kernel(
    x_ptr, y_ptr, max_ptr, sum_ptr, N, CHUNK, SPLITS: tl.constexpr, BLOCK_N: tl.constexpr
):
    row = tl.program_id(0)
    split = tl.program_id(1)
    parts = row * SPLITS + tl.arange(0, SPLITS)
    part_max = tl.load(max_ptr + parts)
    part_sum = tl.load(sum_ptr + parts)
    m = tl.max(part_max, axis=0)  # finite: split 0 always holds the row's first element
    inv_sum = 1.0 / tl.sum(part_sum * tl.exp2((part_max - m) * LOG2E), axis=0)
    x_row = x_ptr + row.to(tl.int64) * N
    y_row = y_ptr + row.to(tl.int64) * N
    lo = split * CHUNK
    hi = tl.minimum(lo + CHUNK, N)
    cols = tl.arange(0, BLOCK_N)
    for start in range(lo, hi, BLOCK_N):
        idx = start + cols
        mask = idx < hi
        x = tl.load(x_row + idx, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + idx, (tl.exp2((x - m) * LOG2E) * inv_sum).to(y_ptr.dtype.element_ty), mask=mask)


def _launch_split_row(x, *, SPLITS: int, BLOCK_N: int, num_warps: int):
    assert x.is_contiguous(), "x must be contiguous"
    M, N = x.shape
    y = torch.empty_like(x)
    part_max = torch.empty((M, SPLITS), dtype=torch.float32, device=x.device)
    part_sum = torch.empty((M, SPLITS), dtype=torch.float32, device=x.device)
    # Each split covers a whole number of tiles; trailing splits of a short row may be empty.
    chunk = triton.cdiv(triton.cdiv(N, SPLITS), BLOCK_N) * BLOCK_N
    grid = (M, SPLITS)
    softmax_partial_kernel[grid](
        x, part_max, part_sum, N, chunk, SPLITS=SPLITS, BLOCK_N=BLOCK_N, num_warps=num_warps
    )
    softmax_normalize_kernel[grid](
        x, y, part_max, part_sum, N, chunk, SPLITS=SPLITS, BLOCK_N=BLOCK_N, num_warps=num_warps
    )
    return y


# --------------------------------------------------------------------------------------------------
# from online.py (candidate 3c830a6ec931ee05)
# Row softmax with a looped online softmax: rows of any length in BLOCK_N tiles, nothing spills.
#
# Pass 1 keeps a running max (a scalar; the sum is rescaled when it grows) and per-lane running sums;
# pass 2 re-reads the row, last tile first, and writes exp(x - max) / sum. One exp per element per pass;
# in both passes the next tile's loads are issued before the current tile's math.
# The re-read is cheap only while the row is still in L2, so at most PROGRAMS programs run, each
# looping over rows: fewer rows in flight, a smaller working set (132 is the H200's SM count; a value
# above M gives one row per program).

LOG2E_online = tl.constexpr(1.4426950408889634)  # kernels may only read constexpr globals


@triton.jit
def softmax_online_kernel(x_ptr, y_ptr, M, N, BLOCK_N: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    for row in range(tl.program_id(0), M, tl.num_programs(0)):
        offset = tl.cast(row, tl.int64) * N  # row is a plain int under the interpreter: no .to()
        x_row = x_ptr + offset
        y_row = y_ptr + offset
        m = tl.full([], float("-inf"), tl.float32)  # running max
        s = tl.full([BLOCK_N], 0.0, tl.float32)  # per-lane sums, all relative to m
        # Each tile's loads are issued one step ahead, before the wait for the current tile, so the
        # memory system always has the next tile requested while this one is reduced.
        x_next = tl.load(x_row + cols, mask=cols < N, other=float("-inf"))
        for start in range(0, N, BLOCK_N):
            x_raw = x_next
            idx = start + BLOCK_N + cols  # past the row's end the mask is all false: nothing is read
            x_next = tl.load(x_row + idx, mask=idx < N, other=float("-inf"))
            x = x_raw.to(tl.float32)
            # Every tile holds at least one real element, so m_new is finite from the first tile on.
            # Subtract before scaling by log2(e): x - m is exact for close values, x * log2(e) is not.
            m_new = tl.maximum(m, tl.max(x, axis=0))
            s = s * tl.exp2((m - m_new) * LOG2E_online) + tl.exp2((x - m_new) * LOG2E_online)
            m = m_new
        inv_sum = 1.0 / tl.sum(s, axis=0)
        # Pass 2 walks the row backwards: the tiles pass 1 read last are the likeliest still in L2.
        tiles = tl.cdiv(N, BLOCK_N)
        idx = (tiles - 1) * BLOCK_N + cols
        x_next = tl.load(x_row + idx, mask=idx < N, other=0.0)
        for back in range(0, tiles):
            x_raw = x_next
            idx = (tiles - 2 - back) * BLOCK_N + cols  # before the row's start: masked, nothing read
            x_next = tl.load(x_row + idx, mask=(idx >= 0) & (idx < N), other=0.0)
            idx = (tiles - 1 - back) * BLOCK_N + cols
            x = x_raw.to(tl.float32)
            tl.store(
                y_row + idx, (tl.exp2((x - m) * LOG2E_online) * inv_sum).to(y_ptr.dtype.element_ty), mask=idx < N
            )


def _launch_online(x, *, BLOCK_N: int, PROGRAMS: int, num_warps: int):
    assert x.is_contiguous(), "x must be contiguous"
    M, N = x.shape
    y = torch.empty_like(x)
    softmax_online_kernel[(min(M, PROGRAMS),)](x, y, M, N, BLOCK_N=BLOCK_N, num_warps=num_warps)
    return y


# --------------------------------------------------------------------------------------------------
# from multirow.py (candidate 9923e531193c8446)
# Row softmax, ROWS short rows per program as one 2-D [ROWS, BLOCK_N] block.
#
# For rows of a few thousand elements one row per program leaves each program with little to load; ROWS
# rows at once put ROWS times more independent loads in flight per program (the row stays in registers,
# so keep ROWS * BLOCK_N modest: long rows belong to the baseline or online.py).

LOG2E_multirow = tl.constexpr(1.4426950408889634)  # kernels may only read constexpr globals


@triton.jit
def softmax_multirow_kernel(x_ptr, y_ptr, M, N, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    row_mask = rows < M
    mask = row_mask[:, None] & (cols < N)[None, :]
    offs = rows.to(tl.int64)[:, None] * N + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
    # Rows past M are all -inf (never stored): a 0 max and a unit sum keep their lanes finite.
    m = tl.where(row_mask, tl.max(x, axis=1), 0.0)
    num = tl.exp2((x - m[:, None]) * LOG2E_multirow)
    y = num / tl.where(row_mask, tl.sum(num, axis=1), 1.0)[:, None]
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch_multirow(x, *, ROWS: int, num_warps: int):
    assert x.is_contiguous(), "x must be contiguous"
    M, N = x.shape
    y = torch.empty_like(x)
    softmax_multirow_kernel[(triton.cdiv(M, ROWS),)](
        x, y, M, N, ROWS=ROWS, BLOCK_N=triton.next_power_of_2(N), num_warps=num_warps
    )
    return y


# --------------------------------------------------------------------------------------------------
# Dispatch table, chosen offline from per-shape timings: a call takes the row nearest to its
# shape (log2 distance over M, N) among the rows of its dtype.
SHAPE_DIMS = {"M": (0, 0), "N": (0, 1)}  # dim -> (input index, axis)
DTYPE_INPUT = 0  # the input whose dtype selects the rows (None: one dtype)
DEFAULT = ("baseline", {"num_warps": 16})  # the best single config
DISPATCH = [
    {"when": {"M": 1, "N": 131072}, "dtype": "bfloat16", "source": "split_row", "config": {"SPLITS": 16, "BLOCK_N": 4096, "num_warps": 16}},
    {"when": {"M": 32, "N": 32768}, "dtype": "bfloat16", "source": "baseline", "config": {"num_warps": 16}},
    {"when": {"M": 2048, "N": 131072}, "dtype": "bfloat16", "source": "online", "config": {"BLOCK_N": 4096, "PROGRAMS": 65536, "num_warps": 16}},
    {"when": {"M": 4096, "N": 4096}, "dtype": "bfloat16", "source": "multirow", "config": {"ROWS": 2, "num_warps": 8}},
    {"when": {"M": 8192, "N": 32768}, "dtype": "bfloat16", "source": "baseline", "config": {"num_warps": 32}},
    {"when": {"M": 1, "N": 131072}, "dtype": "float32", "source": "split_row", "config": {"SPLITS": 16, "BLOCK_N": 4096, "num_warps": 16}},
    {"when": {"M": 32, "N": 32768}, "dtype": "float32", "source": "split_row", "config": {"SPLITS": 16, "BLOCK_N": 4096, "num_warps": 16}},
    {"when": {"M": 2048, "N": 131072}, "dtype": "float32", "source": "online", "config": {"BLOCK_N": 8192, "PROGRAMS": 132, "num_warps": 32}},
    {"when": {"M": 4096, "N": 4096}, "dtype": "float32", "source": "baseline", "config": {"num_warps": 16}},
    {"when": {"M": 8192, "N": 32768}, "dtype": "float32", "source": "baseline", "config": {"num_warps": 32}},
]
_LAUNCHERS = {
    "baseline": _launch_baseline,
    "split_row": _launch_split_row,
    "online": _launch_online,
    "multirow": _launch_multirow,
}
_BOUND = {}  # (input shapes, dtype) -> the chosen launcher with its config bound in


def _dims(*inputs):
    return tuple((dim, inputs[i].shape[axis]) for dim, (i, axis) in SHAPE_DIMS.items())


def _pick(dims, dtype):
    best, best_distance = -1, math.inf
    for n, row in enumerate(DISPATCH):
        if DTYPE_INPUT is not None and row["dtype"] != dtype:
            continue
        distance = sum((math.log2(max(size, 1)) - math.log2(row["when"][dim])) ** 2 for dim, size in dims)
        if distance < best_distance:
            best, best_distance = n, distance
    return best


def choose(*inputs):
    """(source tag, config) the table picks for these inputs."""
    dtype = str(inputs[DTYPE_INPUT].dtype).removeprefix("torch.") if DTYPE_INPUT is not None else ""
    n = _pick(_dims(*inputs), dtype)
    if n < 0:
        return DEFAULT[0], dict(DEFAULT[1])
    return DISPATCH[n]["source"], dict(DISPATCH[n]["config"])


def launcher_for(*inputs):
    """The launcher ``launch(*inputs)`` calls for these inputs, with the chosen config bound in
    (chosen on the first call at their shapes and dtype, then cached)."""
    key = (inputs[0].shape, inputs[0].dtype)
    bound = _BOUND.get(key)
    if bound is None:
        source, config = choose(*inputs)
        bound = _BOUND[key] = functools.partial(_LAUNCHERS[source], **config)
    return bound


def _dispatch(*inputs):
    bound = _BOUND.get((inputs[0].shape, inputs[0].dtype))
    if bound is None:
        bound = launcher_for(*inputs)
    return bound(*inputs)


_HOT = _dispatch  # what launch(*inputs) runs; the host side below wraps it


# --------------------------------------------------------------------------------------------------
# The hot path: the launcher the table picks, its launches replayed once two calls at a signature agree.
def launch(*inputs, **config):
    """Run the kernel with the config the table picks, or with ``config`` (every key) on the
    single config's source when given."""
    if config:
        return _launch_baseline(*inputs, **config)
    return _HOT(*inputs)


# === host side: an exported module given as a candidate ends above this line ===
# The replay of launch(*inputs)'s launches (kernel-agent's tools/fast_launch.py); see the docstring's host
# cost. Given as a candidate, the module ends at the line above.
import sys
import threading
import types

from torch.utils._python_dispatch import TorchDispatchMode

AGREEING_RECORDINGS = 2  # identical recordings before a signature is replayed
MAX_RECORDINGS = 4  # after this many without agreement a signature stays on its launcher
_ALLOCATING = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
_FILLING = {"zeros": 0, "zeros_like": 0, "new_zeros": 0, "ones": 1, "ones_like": 1, "new_ones": 1}
_PRIMITIVE = (int, float, bool, str, bytes, type(None))
_HEAD = 9  # gridX, gridY, gridZ, stream, function, kernel metadata, launch metadata, enter hook, exit hook
MAX_SIGNATURES = 256  # signatures a launcher learns; calls at any other go to the launcher as they are
# One state for every copy of this file in the process (each exported module holds one): a recording
# patches Triton's classes, so only one runs at a time, and a replay inside a recording (one exported
# module's launch called by another's launcher) must run its launcher, so that the recording sees it.
_SHARED = sys.modules.setdefault("_kernel_agent_fast_launch", types.ModuleType("_kernel_agent_fast_launch"))
_SHARED.__dict__.setdefault("recording_lock", threading.Lock())
_SHARED.__dict__.setdefault("recording_here", threading.local())


class _Pointer:
    """An address where Triton's launcher expects a tensor (it reads only ``data_ptr()``): a view at an
    offset into an input or an allocation."""

    __slots__ = ("address",)

    def __init__(self, address):
        self.address = address

    def data_ptr(self):
        return self.address


class TritonBackend:
    """What a replay needs from Triton: the launcher class of compiled kernels, its JIT class, the current
    device and stream as Triton reads them, and where the launch hooks live."""

    device_type = "cuda"

    def __init__(self):
        from triton.runtime import driver
        from triton.runtime.jit import JITFunction

        active = driver.active
        self.launcher_class = active.launcher_cls
        self.jit_class = JITFunction
        self.current_device = active.get_current_device
        self.current_stream = active.get_current_stream
        try:
            from triton import knobs

            self.hooks = knobs.runtime
        except ImportError:  # Triton before 3.4 keeps the hooks on CompiledKernel
            from triton.compiler.compiler import CompiledKernel

            self.hooks = CompiledKernel


def signature(inputs):
    """What a launcher's behaviour may depend on: per tensor its shape, strides, dtype, device and
    16-byte alignment (Triton specializes on it); every other argument by type and value. TypeError for
    an argument that is neither a tensor nor a plain value (a key must not hold it alive)."""
    return tuple(
        [(t.shape, t.stride(), t.dtype, t.get_device(), t.data_ptr() & 15) if isinstance(t, torch.Tensor)
         else (type(t), t) if _plain(t) else _not_a_key(t) for t in inputs]
    )  # fmt: skip


def _not_a_key(value):
    raise TypeError(f"no replay keyed on a {type(value).__name__}")


class _Recording(TorchDispatchMode):
    """One call of a launcher: the tensors it allocated and the launches it made (torch ops seen here)."""

    def __init__(self):
        super().__init__()
        self.made = []  # (tensor, fill value or None), in allocation order
        self.launches = []  # (launcher object, its arguments, the calls to its native launch, that launch)
        self.jit_runs = 0
        self.refused = ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func._overloadpacket.__name__
        if name in _ALLOCATING or name in _FILLING:
            self.made.append((out, _FILLING.get(name)))
        elif not func.is_view and not self.refused:
            self.refused = f"the launcher runs aten.{name}"
        return out


def _record(launcher, inputs, backend, device):
    """(the launcher's outputs, the recording of that call) with Triton's JIT and launcher classes patched
    for this thread only. Each launch keeps its native ``launch`` and the calls the launcher made to it."""
    recording, me = _Recording(), threading.get_ident()
    jit, launcher_class = backend.jit_class, backend.launcher_class
    original_run, original_call = jit.run, launcher_class.__call__

    def run(self, *args, **kwargs):
        if threading.get_ident() == me and not kwargs.get("warmup"):
            recording.jit_runs += 1
        return original_run(self, *args, **kwargs)

    def call(self, *args, **kwargs):
        if threading.get_ident() != me:
            return original_call(self, *args, **kwargs)
        native, seen = getattr(self, "launch", None), []
        if kwargs:
            recording.refused = "Triton's launcher called with keywords"
        if backend.current_device() != device:  # the launcher switched device: the replay would not
            recording.refused = "a launch on another device than the caller's"
        if kwargs or native is None:
            recording.launches.append((self, args, seen, native))
            return original_call(self, *args, **kwargs)
        self.launch = lambda *a, **k: (seen.append((a, k)), native(*a, **k))[1]
        try:
            return original_call(self, *args)
        finally:
            self.launch = native
            recording.launches.append((self, args, seen, native))

    jit.run, launcher_class.__call__ = run, call
    try:
        with recording:
            outputs = launcher(*inputs)
    finally:
        jit.run, launcher_class.__call__ = original_run, original_call
    return outputs, recording


class _Sources:
    """Where each tensor of a recording comes from: kind 0 an input, 1 an allocation of the call,
    2 a tensor the launcher keeps (a module-level buffer); by storage."""

    def __init__(self, inputs, made):
        self.by_storage = {}
        self.ranges = []
        for kind, tensors in ((0, inputs), (1, [t for t, _ in made])):
            for i, t in enumerate(tensors):
                if not isinstance(t, torch.Tensor):
                    continue
                storage = t.untyped_storage()
                base = storage.data_ptr()
                if base in self.by_storage:
                    raise _Unreplayable("two inputs or allocations share memory")
                self.by_storage[base] = (kind, i, t)
                self.ranges.append((base, base + storage.nbytes()))

    def role(self, t):
        """(kind, index or the kept tensor, byte offset from the source's data_ptr)."""
        found = self.by_storage.get(t.untyped_storage().data_ptr())
        if found is None:
            return 2, t, 0
        kind, i, source = found
        offset = t.data_ptr() - source.data_ptr()
        if offset < 0:
            raise _Unreplayable("a view before its input's first element")
        return kind, i, offset

    def inside(self, value):
        return any(low <= value < high for low, high in self.ranges)


class _Unreplayable(Exception):
    pass


_MISS = object()  # a replay that must not run this call (a hook was set, another device is current)


class _Plan:
    """A signature's launches as one generated function: the allocations, each launch with the new
    tensors' addresses in place of the recorded ones, the outputs rebuilt. Where a launcher's own Python
    only forwards to its native launch (no scratch memory to allocate), the native launch is called."""

    def __init__(self, recording, inputs, outputs, backend, device, stream):
        if recording.refused:
            raise _Unreplayable(recording.refused)
        if not recording.launches or recording.jit_runs != len(recording.launches):
            raise _Unreplayable("a launch outside Triton's JIT path, or none")
        sources = _Sources(inputs, recording.made)
        self.env = {"empty_strided": torch.empty_strided, "empty_like": torch.empty_like, "Pointer": _Pointer,
                    "MISS": _MISS, "DEVICE": device, "hooks": backend.hooks, "current_device": backend.current_device,
                    "current_stream": backend.current_stream}  # fmt: skip
        self.described = []  # what two recordings must share besides the source
        lines = ["def replay(inputs):", *self._hook_check(backend.hooks)]
        lines += ["    device = current_device()", "    if device != DEVICE:", "        return MISS"]
        for k, (t, fill) in enumerate(recording.made):
            twin = next((i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.is_contiguous()
                         and _same_layout(x, t)), None)  # fmt: skip
            if twin is not None:  # empty_like of a contiguous input: the same layout, and cheaper
                lines.append(f"    a{k} = empty_like(inputs[{twin}])")
                self.described.append(f"like input {twin}")
            else:
                spec = self.constant((tuple(t.shape), t.stride(), t.dtype, t.device))
                lines.append(f"    a{k} = empty_strided(*{spec}[:2], dtype={spec}[2], device={spec}[3])")
            if fill is not None:
                lines.append(f"    a{k}.fill_({fill!r})")
        lines.append("    stream = current_stream(device)")
        for obj, args, seen, native in recording.launches:
            lines.append("    " + self._launch(obj, args, seen, native, sources, stream))
        lines.append(f"    return {self._output(outputs, sources)}")
        self.source = "\n".join(lines) + "\n"
        exec(compile(self.source, "<fast_launch replay>", "exec"), self.env)
        self.run = self.env["replay"]

    def constant(self, value, described=None):
        """The generated code's name for ``value``; ``described``: how two recordings compare it (repr)."""
        name = f"c{len(self.described)}"
        self.env[name] = value
        self.described.append(repr(value) if described is None else described)
        return name

    def _hook_check(self, hooks):
        enter, exit = hooks.launch_enter_hook, hooks.launch_exit_hook
        self.env.update(ENTER=enter, EXIT=exit)
        head = ["    enter, exit = hooks.launch_enter_hook, hooks.launch_exit_hook"]
        if enter is None and exit is None:
            return head + ["    if enter is not None or exit is not None:", "        return MISS"]
        if not all(isinstance(getattr(h, "calls", None), list) and not h.calls for h in (enter, exit)):
            raise _Unreplayable("a launch hook is set")
        return head + [  # Triton's chains of hooks: the same two, still empty
            "    if enter is not ENTER or exit is not EXIT or ENTER.calls or EXIT.calls:", "        return MISS"]

    def _launch(self, obj, args, seen, native, sources, stream):
        """One launch's line: the native launch where that is all the launcher's Python does, else the
        launcher object itself."""
        if len(args) < _HEAD or args[3] != stream or args[7] is not self.env["ENTER"] or args[8] is not self.env["EXIT"]:
            raise _Unreplayable("Triton's launcher takes arguments this replay does not know")
        exprs = []
        for pos, value in enumerate(args):
            if pos == 3:
                exprs.append("stream")
            elif pos in (7, 8):
                exprs.append(("enter", "exit")[pos - 7])
            elif pos == 6:  # launch metadata: read only by launch hooks, and none is set when this runs
                exprs.append(self.constant(value, "launch metadata"))
            else:
                exprs.append(self._argument(value, sources, pos >= _HEAD))
        try:
            native_exprs = self._native(obj, args, seen, exprs)
            name = self.constant(native, f"native of launcher {id(obj)}")
            return f"{name}({', '.join(native_exprs)})"
        except _Unreplayable:
            name = self.constant(obj, f"launcher {id(obj)}")
            return f"{name}({', '.join(exprs)})"

    def _argument(self, value, sources, kernel_argument):
        if isinstance(value, torch.Tensor):
            kind, index, offset = sources.role(value)
            base = (f"inputs[{index}]", f"a{index}", None)[kind] or self.constant(value, f"kept {value.data_ptr()}")
            return f"Pointer({base}.data_ptr() + {offset})" if offset else base
        if isinstance(value, int) and sources.inside(value):
            raise _Unreplayable("an address passed as an integer")
        if _plain(value) or (kernel_argument and type(value).__module__.startswith("triton.language")):
            return self.constant(value)  # a constexpr such as a tl.dtype is part of the compiled kernel
        raise _Unreplayable(f"an argument of type {type(value).__name__} cannot be re-created")

    def _native(self, obj, args, seen, exprs):
        """The native launch's arguments as expressions: the stream at its position, each tensor the
        launcher object was given as that tensor's expression, every other value a constant of itself
        (no scratch memory is allocated per call, so none of them changes between calls)."""
        sizes = (getattr(obj, "global_scratch_size", None), getattr(obj, "profile_scratch_size", 0))
        if len(seen) != 1 or seen[0][1] or sizes != (0, 0) or getattr(obj, "gsan_enabled", False):
            raise _Unreplayable("the launcher's Python does more than forward")
        native_args = seen[0][0]
        if len(native_args) < 4 or native_args[3] is not args[3]:
            raise _Unreplayable("the native launch takes its stream elsewhere")
        tensors = {id(v): e for v, e in zip(args, exprs, strict=True) if isinstance(v, torch.Tensor)}
        given = {id(v) for v in args}

        def expression(value):
            if isinstance(value, torch.Tensor):
                if id(value) not in tensors:
                    raise _Unreplayable("the native launch takes a tensor the launcher was not given")
                return tensors[id(value)]
            if type(value) is tuple:
                return "(" + "".join(f"{expression(v)}, " for v in value) + ")"
            if _plain(value) or id(value) in given:  # e.g. launch metadata, Triton's chains of hooks
                return self.constant(value, repr(value) if _plain(value) else f"given {type(value).__name__}")
            raise _Unreplayable("the native launch takes a value the launcher was not given")

        return ["stream" if pos == 3 else expression(v) for pos, v in enumerate(native_args)]

    def _output(self, value, sources):
        """The generated expression that rebuilds an output of the launcher."""
        if isinstance(value, torch.Tensor):
            kind, index, _ = sources.role(value)
            if kind == 2:
                raise _Unreplayable("an output the call did not allocate")
            source = sources.by_storage[value.untyped_storage().data_ptr()][2]
            base = f"inputs[{index}]" if kind == 0 else f"a{index}"
            if _same_view(value, source):
                return base
            if value.dtype != source.dtype:
                raise _Unreplayable("an output viewed as another dtype")
            view = self.constant((tuple(value.shape), value.stride(), value.storage_offset() - source.storage_offset()))
            return f"{base}.as_strided({view}[0], {view}[1], {base}.storage_offset() + {view}[2])"
        if type(value) is tuple:
            return "(" + "".join(f"{self._output(v, sources)}, " for v in value) + ")"
        if type(value) is list:
            return "[" + ", ".join(self._output(v, sources) for v in value) + "]"
        if _plain(value):
            return self.constant(value)
        raise _Unreplayable(f"an output of type {type(value).__name__}")

    def describe(self):
        """What two recordings must share to be replayed."""
        return self.source, self.described


def _same_layout(a, b):
    return (a.dtype, a.shape, a.stride(), a.device) == (b.dtype, b.shape, b.stride(), b.device)


def _same_view(a, b):
    return (a.dtype, a.shape, a.stride(), a.storage_offset()) == (b.dtype, b.shape, b.stride(), b.storage_offset())


def _plain(value):
    if isinstance(value, tuple):
        return all(_plain(v) for v in value)
    return isinstance(value, _PRIMITIVE)


class Replayed:
    """``launcher`` with its launches replayed once two recordings at a signature agree (see the module's
    docstring); ``replaying()`` says how many signatures replay. ``backend`` is Triton's by default."""

    def __init__(self, launcher, backend=None):
        self.launcher = launcher
        self._backend = backend
        self._off = False
        self._plans = {}  # signature -> _Plan (replayed), a list of recordings' plans, or False (never)
        self._lock = threading.Lock()

    def __call__(self, *inputs):
        if self._off or torch.compiler.is_compiling() or getattr(_SHARED.recording_here, "on", False):
            return self.launcher(*inputs)  # inside another launcher's recording: it must see these launches
        try:
            key = signature(inputs)
            plan = self._plans.get(key)
        except (TypeError, RuntimeError):  # an argument a replay cannot be keyed on (or hashed)
            return self.launcher(*inputs)
        if plan.__class__ is _Plan:
            outputs = plan.run(inputs)
            return self.launcher(*inputs) if outputs is _MISS else outputs
        if plan is False or (plan is None and len(self._plans) >= MAX_SIGNATURES):
            return self.launcher(*inputs)
        return self._learn(key, inputs)

    def replaying(self):
        return sum(1 for p in self._plans.values() if p.__class__ is _Plan)

    def _backend_or_none(self):
        if self._backend is None:
            try:
                self._backend = TritonBackend()
            except Exception:  # no GPU driver (CPU, Triton's interpreter): the launcher runs as it is
                self._off = True
        return self._backend

    def _learn(self, key, inputs):
        backend = self._backend_or_none()
        device_type = getattr(backend, "device_type", None)
        tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
        if backend is None or not tensors or any(t.device.type != device_type for t in tensors):
            return self.launcher(*inputs)
        if not _SHARED.recording_lock.acquire(blocking=False):
            return self.launcher(*inputs)
        _SHARED.recording_here.on = True
        try:
            device = backend.current_device()
            stream = backend.current_stream(device)
            outputs, recording = _record(self.launcher, inputs, backend, device)
        finally:
            _SHARED.recording_here.on = False
            _SHARED.recording_lock.release()
        try:
            plan = _Plan(recording, inputs, outputs, backend, device, stream)
        except Exception:  # _Unreplayable, or anything else it cannot read: the call itself has run
            plan = None
        self._remember(key, plan)
        return outputs

    def _remember(self, key, plan):
        with self._lock:
            seen = self._plans.get(key)
            if seen.__class__ is _Plan or seen is False:  # decided meanwhile by another thread's call
                return
            seen = seen if isinstance(seen, list) else []
            seen.append(plan)
            recent = seen[-AGREEING_RECORDINGS:]
            if len(recent) == AGREEING_RECORDINGS and None not in recent:
                described = {repr(p.describe()) for p in recent}
                if len(described) == 1:
                    self._plans[key] = plan
                    return
            self._plans[key] = False if len(seen) >= MAX_RECORDINGS else seen


_HOT = Replayed(_HOT)
