"""GQA decode, flash-decoding: the grouped kernel with S split across SPLITS programs.

Kernel 1, grid (B * Hkv, SPLITS): each program runs the grouped online softmax over its chunk of S
and writes a partial (max, sum, unnormalized output) per q head. Kernel 2, grid (B * Hq): combines
a head's SPLITS partials. At B = 1 the grouped kernel alone has only 8 programs for 132 SMs; the
split gives 8 * SPLITS.
"""

import math

import torch
import triton
import triton.language as tl

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


def launch(q, k, v, *, SPLITS: int, BLOCK_S: int, num_warps: int, num_stages: int):
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
