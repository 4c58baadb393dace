"""gqa_decode: One decode step of grouped-query attention.

Exported by kernel-agent (python -m tools.export). Per-shape table over B, S: 436.27 us geomean
against 447.50 us for one config (+2.6%), measured on NVIDIA H200; run gqa_decode.

    from gqa_decode_kernel import launch   # or whatever this file is named
    outputs = launch(*inputs)              # the config the table picks for these shapes
    outputs = launch(*inputs, **config)    # any config of the search space, on baseline.py

Needs only torch and triton.
"""

import functools
import math
import torch
import triton
import triton.language as tl


# --------------------------------------------------------------------------------------------------
# from baseline.py (candidate 753dcd2b90da8889)
# GQA decode, the plain kernel: one program per (batch, q head), online softmax over S in tiles.
#
# Each of the G = Hq / Hkv q heads that share a KV head re-reads that head's K and V.

LOG2E = tl.constexpr(1.4426950408889634)  # kernels may only read constexpr globals


@triton.jit
def gqa_decode_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, S, scale,
    HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, BLOCK_S: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)  # b * HQ + q head
    b = pid // HQ
    kv_head = (pid % HQ) // (HQ // HKV)
    d = tl.arange(0, D)
    q = tl.load(q_ptr + pid * D + d).to(tl.float32)
    kv_base = (b * HKV + kv_head).to(tl.int64) * S * D
    qk_scale = scale * LOG2E  # scores go to exp2
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.full([], 0.0, tl.float32)
    acc = tl.full([D], 0.0, tl.float32)
    for start in range(0, S, BLOCK_S):
        s_idx = start + tl.arange(0, BLOCK_S)
        s_mask = s_idx < S
        offs = kv_base + s_idx[:, None] * D + d[None, :]
        k = tl.load(k_ptr + offs, mask=s_mask[:, None], other=0.0).to(tl.float32)
        scores = tl.sum(k * q[None, :], axis=1) * qk_scale
        scores = tl.where(s_mask, scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=0))  # finite: every tile has a real position
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(scores - m_new)
        v = tl.load(v_ptr + offs, mask=s_mask[:, None], other=0.0).to(tl.float32)
        l = l * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m = m_new
    tl.store(o_ptr + pid * D + d, (acc / l).to(o_ptr.dtype.element_ty))


def _launch_baseline(q, k, v, *, BLOCK_S: int, num_warps: int):
    assert q.is_contiguous() and k.is_contiguous() and v.is_contiguous(), "q, k and v must be contiguous"
    B, HQ, D = q.shape
    _, HKV, S, _ = k.shape
    assert k.shape == v.shape == (B, HKV, S, D) and HQ % HKV == 0, "expected q[B,Hq,D], k/v[B,Hkv,S,D]"
    o = torch.empty_like(q)
    gqa_decode_kernel[(B * HQ,)](
        q, k, v, o, S, 1.0 / math.sqrt(D),
        HQ=HQ, HKV=HKV, D=D, BLOCK_S=BLOCK_S, num_warps=num_warps,
    )  # fmt: skip
    return o


# --------------------------------------------------------------------------------------------------
# Dispatch table, chosen offline from per-shape timings: a call takes the row nearest to its
# shape (log2 distance over B, S).
SHAPE_DIMS = {"B": (0, 0), "S": (1, 2)}  # dim -> (input index, axis)
DTYPE_INPUT = None  # the input whose dtype selects the rows (None: one dtype)
DEFAULT = ("baseline", {"BLOCK_S": 128, "num_warps": 2})  # the best single config
DISPATCH = [
    {"when": {"B": 1, "S": 32768}, "dtype": "bfloat16", "source": "baseline", "config": {"BLOCK_S": 128, "num_warps": 8}},
    {"when": {"B": 8, "S": 8192}, "dtype": "bfloat16", "source": "baseline", "config": {"BLOCK_S": 128, "num_warps": 2}},
    {"when": {"B": 32, "S": 4096}, "dtype": "bfloat16", "source": "baseline", "config": {"BLOCK_S": 128, "num_warps": 2}},
    {"when": {"B": 128, "S": 1024}, "dtype": "bfloat16", "source": "baseline", "config": {"BLOCK_S": 128, "num_warps": 2}},
]


def _dims(*inputs):
    return tuple((dim, inputs[i].shape[axis]) for dim, (i, axis) in SHAPE_DIMS.items())


@functools.lru_cache(maxsize=4096)
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


def launch(*inputs, **config):
    """Run the kernel with the config the table picks, or with ``config`` (every key) on the
    single config's source when given."""
    source, chosen = (DEFAULT[0], config) if config else choose(*inputs)
    return _launch_baseline(*inputs, **chosen)
