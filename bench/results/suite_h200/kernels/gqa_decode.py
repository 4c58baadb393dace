"""gqa_decode: One decode step of grouped-query attention.

Exported by kernel-agent (python -m tools.export). Per-shape table over B, S: 81.32 us geomean
against 91.98 us for one config (+13.1%), measured on NVIDIA H200; run gqa_decode.

    from gqa_decode_kernel import launch   # or whatever this file is named
    outputs = launch(*inputs)              # the config the table picks for these shapes
    outputs = launch(*inputs, **config)    # any config of the search space, on split_kv.py

Needs only torch and triton. Host cost: the config for a shape and dtype is chosen on the first call
there and bound to its launcher; every later call at that shape and dtype is one dict lookup away
from the kernel's own launcher. ``launcher_for(*inputs)`` returns that bound launcher, to call it
directly.

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
# from split_kv.py (candidate 951c82e24cbf0849)
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
# from grouped.py (candidate dac0db6127ee7ff8)
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
DEFAULT = ("split_kv", {"SPLITS": 16, "BLOCK_S": 64, "num_warps": 2, "num_stages": 3})  # the best single config
DISPATCH = [
    {"when": {"B": 1, "S": 32768}, "dtype": "bfloat16", "source": "split_kv", "config": {"SPLITS": 32, "BLOCK_S": 64, "num_warps": 4, "num_stages": 3}},
    {"when": {"B": 8, "S": 8192}, "dtype": "bfloat16", "source": "split_kv", "config": {"SPLITS": 4, "BLOCK_S": 64, "num_warps": 2, "num_stages": 3}},
    {"when": {"B": 32, "S": 4096}, "dtype": "bfloat16", "source": "grouped", "config": {"BLOCK_S": 64, "num_warps": 2, "num_stages": 3}},
    {"when": {"B": 128, "S": 1024}, "dtype": "bfloat16", "source": "grouped", "config": {"BLOCK_S": 64, "num_warps": 4, "num_stages": 3}},
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


# --------------------------------------------------------------------------------------------------
# The hot path: one dict lookup by shape and dtype, once the launcher is bound for them.
def launch(*inputs, **config):
    """Run the kernel with the config the table picks, or with ``config`` (every key) on the
    single config's source when given."""
    if config:
        return _launch_split_kv(*inputs, **config)
    bound = _BOUND.get((inputs[0].shape, inputs[1].shape))
    if bound is None:
        bound = launcher_for(*inputs)
    return bound(*inputs)
