"""GQA decode with the q heads of a group together: one program per (batch, KV head).

The G = Hq / Hkv q heads sharing a KV head are one [G_PAD, D] tile (zero rows pad G up to 16, the
smallest tl.dot tile), so K and V are read once per group instead of G times and the two products
run on tensor cores (bf16 operands, fp32 accumulation).
"""

import math

import torch
import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)  # kernels may only read constexpr globals


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
    qk_scale = scale * LOG2E  # applied to the fp32 scores: q stays exact in DOT_DTYPE
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


def launch(q, k, v, *, BLOCK_S: int, num_warps: int, num_stages: int):
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
