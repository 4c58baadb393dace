"""gqa_decode: One decode step of grouped-query attention.

Exported by kernel-agent (python -m tools.export). Per-shape table over B, S: 110.05 us geomean
against 123.66 us for one config (+12.4%), measured on NVIDIA H100 80GB HBM3; run gqa_decode.

    from gqa_decode_kernel import launch   # or whatever this file is named
    outputs = launch(*inputs)              # the config the table picks for these shapes
    outputs = launch(*inputs, **config)    # any config of the search space, on split_kv.py

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
# from split_kv.py (candidate 2c99bb1e71e77c4a)
# GQA decode, flash-decoding: the grouped kernel with S split across SPLITS programs.
#
# Kernel 1, grid (B * Hkv, SPLITS): each program runs the grouped online softmax over its chunk of S
# and writes a partial (max, sum, unnormalized output) per q head. Kernel 2, grid (B * Hq): combines
# a head's SPLITS partials. At B = 1 the grouped kernel alone has only 8 programs for 132 SMs; the
# split gives 8 * SPLITS.

LOG2E = tl.constexpr(1.4426950408889634)  # kernels may only read constexpr globals


@triton.jit
def gqa_split_kernel(
    q_ptr, k_ptr, v_ptr, max_ptr, sum_ptr, acc_ptr, S, CHUNK, scale,
    HQ: tl.constexpr, HKV: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr, DOT_DTYPE: tl.constexpr,
    SPLITS: tl.constexpr, BLOCK_S: tl.constexpr,
):  # fmt: skip
    G: tl.constexpr = HQ // HKV
    pid = tl.program_id(0)  # b * HKV + kv head
    split = tl.program_id(1)
    g = tl.arange(0, G_PAD)
    d = tl.arange(0, D)
    q_rows = pid * G + g  # == b * HQ + kv_head * G + g
    g_mask = g < G
    q = tl.load(q_ptr + q_rows[:, None] * D + d[None, :], mask=g_mask[:, None], other=0.0).to(DOT_DTYPE)
    kv_base = pid.to(tl.int64) * S * D
    qk_scale = scale * LOG2E  # applied to the fp32 scores: q stays exact in DOT_DTYPE
    m = tl.full([G_PAD], float("-inf"), tl.float32)
    l = tl.full([G_PAD], 0.0, tl.float32)
    acc = tl.full([G_PAD, D], 0.0, tl.float32)
    lo = split * CHUNK
    hi = tl.minimum(lo + CHUNK, S)
    # A split past the end of a short cache runs no iteration and reports (max=-inf, sum=0, acc=0).
    for start in range(lo, hi, BLOCK_S):
        s_idx = start + tl.arange(0, BLOCK_S)
        s_mask = s_idx < hi
        offs = kv_base + s_idx[:, None] * D + d[None, :]
        k = tl.load(k_ptr + offs, mask=s_mask[:, None], other=0.0).to(DOT_DTYPE)
        scores = tl.dot(q, tl.trans(k)) * qk_scale
        scores = tl.where(s_mask[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))  # finite: every tile has a real position
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(scores - m_new[:, None])
        v = tl.load(v_ptr + offs, mask=s_mask[:, None], other=0.0).to(DOT_DTYPE)
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(DOT_DTYPE), v)
        m = m_new
    part = q_rows * SPLITS + split  # partials laid out [B * HQ, SPLITS]
    tl.store(max_ptr + part, m, mask=g_mask)
    tl.store(sum_ptr + part, l, mask=g_mask)
    tl.store(acc_ptr + part[:, None].to(tl.int64) * D + d[None, :], acc, mask=g_mask[:, None])


@triton.jit
def gqa_combine_kernel(max_ptr, sum_ptr, acc_ptr, o_ptr, D: tl.constexpr, SPLITS: tl.constexpr):
    row = tl.program_id(0)  # b * HQ + q head
    parts = row * SPLITS + tl.arange(0, SPLITS)
    d = tl.arange(0, D)
    part_max = tl.load(max_ptr + parts)
    m = tl.max(part_max, axis=0)  # finite: split 0 always holds position 0
    weight = tl.exp2(part_max - m)  # 0 for empty splits
    total = tl.sum(tl.load(sum_ptr + parts) * weight, axis=0)
    acc = tl.load(acc_ptr + parts[:, None].to(tl.int64) * D + d[None, :])
    o = tl.sum(acc * weight[:, None], axis=0) / total
    tl.store(o_ptr + row * D + d, o.to(o_ptr.dtype.element_ty))


def _launch_split_kv(q, k, v, *, SPLITS: int, BLOCK_S: int, num_warps: int, num_stages: int):
    assert q.is_contiguous() and k.is_contiguous() and v.is_contiguous(), "q, k and v must be contiguous"
    B, HQ, D = q.shape
    _, HKV, S, _ = k.shape
    assert k.shape == v.shape == (B, HKV, S, D) and HQ % HKV == 0, "expected q[B,Hq,D], k/v[B,Hkv,S,D]"
    o = torch.empty_like(q)
    # tl.dot on bf16 operands is wrong in the Triton interpreter (it multiplies the raw bits), so on
    # CPU, which only the interpreter runs, the dot operands go up to fp32; on the GPU they stay bf16.
    dot_dtype = tl.bfloat16 if q.dtype == torch.bfloat16 and q.device.type != "cpu" else tl.float32
    part_max = torch.empty((B * HQ, SPLITS), dtype=torch.float32, device=q.device)
    part_sum = torch.empty((B * HQ, SPLITS), dtype=torch.float32, device=q.device)
    part_acc = torch.empty((B * HQ, SPLITS, D), dtype=torch.float32, device=q.device)
    # Each split covers a whole number of tiles; trailing splits of a short cache may be empty.
    chunk = triton.cdiv(triton.cdiv(S, SPLITS), BLOCK_S) * BLOCK_S
    gqa_split_kernel[(B * HKV, SPLITS)](
        q, k, v, part_max, part_sum, part_acc, S, chunk, 1.0 / math.sqrt(D),
        HQ=HQ, HKV=HKV, G_PAD=max(16, triton.next_power_of_2(HQ // HKV)), D=D, DOT_DTYPE=dot_dtype,
        SPLITS=SPLITS, BLOCK_S=BLOCK_S, num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    gqa_combine_kernel[(B * HQ,)](part_max, part_sum, part_acc, o, D=D, SPLITS=SPLITS, num_warps=4)
    return o


# --------------------------------------------------------------------------------------------------
# from grouped.py (candidate b734815bd5af2b4a)
# GQA decode with the q heads of a group together: one program per (batch, KV head).
#
# The G = Hq / Hkv q heads sharing a KV head are one [G_PAD, D] tile (zero rows pad G up to 16, the
# smallest tl.dot tile), so K and V are read once per group instead of G times and the two products
# run on tensor cores (bf16 operands, fp32 accumulation).

LOG2E_grouped = tl.constexpr(1.4426950408889634)  # kernels may only read constexpr globals


@triton.jit
def gqa_grouped_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, S, scale,
    HQ: tl.constexpr, HKV: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr, DOT_DTYPE: tl.constexpr,
    BLOCK_S: tl.constexpr,
):  # fmt: skip
    G: tl.constexpr = HQ // HKV
    pid = tl.program_id(0)  # b * HKV + kv head
    g = tl.arange(0, G_PAD)
    d = tl.arange(0, D)
    q_rows = pid * G + g  # == b * HQ + kv_head * G + g
    g_mask = g < G
    q = tl.load(q_ptr + q_rows[:, None] * D + d[None, :], mask=g_mask[:, None], other=0.0).to(DOT_DTYPE)
    kv_base = pid.to(tl.int64) * S * D
    qk_scale = scale * LOG2E_grouped  # applied to the fp32 scores: q stays exact in DOT_DTYPE
    m = tl.full([G_PAD], float("-inf"), tl.float32)
    l = tl.full([G_PAD], 0.0, tl.float32)
    acc = tl.full([G_PAD, D], 0.0, tl.float32)
    for start in range(0, S, BLOCK_S):
        s_idx = start + tl.arange(0, BLOCK_S)
        s_mask = s_idx < S
        offs = kv_base + s_idx[:, None] * D + d[None, :]
        k = tl.load(k_ptr + offs, mask=s_mask[:, None], other=0.0).to(DOT_DTYPE)
        scores = tl.dot(q, tl.trans(k)) * qk_scale
        scores = tl.where(s_mask[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))  # finite: every tile has a real position
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(scores - m_new[:, None])
        v = tl.load(v_ptr + offs, mask=s_mask[:, None], other=0.0).to(DOT_DTYPE)
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(DOT_DTYPE), v)
        m = m_new
    o = acc / l[:, None]
    tl.store(o_ptr + q_rows[:, None] * D + d[None, :], o.to(o_ptr.dtype.element_ty), mask=g_mask[:, None])


def _launch_grouped(q, k, v, *, BLOCK_S: int, num_warps: int, num_stages: int):
    assert q.is_contiguous() and k.is_contiguous() and v.is_contiguous(), "q, k and v must be contiguous"
    B, HQ, D = q.shape
    _, HKV, S, _ = k.shape
    assert k.shape == v.shape == (B, HKV, S, D) and HQ % HKV == 0, "expected q[B,Hq,D], k/v[B,Hkv,S,D]"
    o = torch.empty_like(q)
    # tl.dot on bf16 operands is wrong in the Triton interpreter (it multiplies the raw bits), so on
    # CPU, which only the interpreter runs, the dot operands go up to fp32; on the GPU they stay bf16.
    dot_dtype = tl.bfloat16 if q.dtype == torch.bfloat16 and q.device.type != "cpu" else tl.float32
    gqa_grouped_kernel[(B * HKV,)](
        q, k, v, o, S, 1.0 / math.sqrt(D),
        HQ=HQ, HKV=HKV, G_PAD=max(16, triton.next_power_of_2(HQ // HKV)), D=D, DOT_DTYPE=dot_dtype,
        BLOCK_S=BLOCK_S, num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return o


# --------------------------------------------------------------------------------------------------
# Dispatch table, chosen offline from per-shape timings: a call takes the row nearest to its
# shape (log2 distance over B, S).
SHAPE_DIMS = {"B": (0, 0), "S": (1, 2)}  # dim -> (input index, axis)
DTYPE_INPUT = None  # the input whose dtype selects the rows (None: one dtype)
DEFAULT = ("split_kv", {"SPLITS": 8, "BLOCK_S": 128, "num_warps": 4, "num_stages": 4})  # the best single config
DISPATCH = [
    {"when": {"B": 1, "S": 32768}, "dtype": "bfloat16", "source": "split_kv", "config": {"SPLITS": 16, "BLOCK_S": 64, "num_warps": 2, "num_stages": 4}},
    {"when": {"B": 8, "S": 8192}, "dtype": "bfloat16", "source": "grouped", "config": {"BLOCK_S": 128, "num_warps": 4, "num_stages": 3}},
    {"when": {"B": 32, "S": 4096}, "dtype": "bfloat16", "source": "grouped", "config": {"BLOCK_S": 64, "num_warps": 2, "num_stages": 3}},
    {"when": {"B": 128, "S": 1024}, "dtype": "bfloat16", "source": "grouped", "config": {"BLOCK_S": 64, "num_warps": 2, "num_stages": 2}},
]
_LAUNCHERS = {
    "split_kv": _launch_split_kv,
    "grouped": _launch_grouped,
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
    key = (inputs[0].shape, inputs[1].shape)
    bound = _BOUND.get(key)
    if bound is None:
        source, config = choose(*inputs)
        bound = _BOUND[key] = functools.partial(_LAUNCHERS[source], **config)
    return bound


def _dispatch(*inputs):
    bound = _BOUND.get((inputs[0].shape, inputs[1].shape))
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
        return _launch_split_kv(*inputs, **config)
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
