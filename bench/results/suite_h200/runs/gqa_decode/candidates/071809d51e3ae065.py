"""GQA decode, the plain kernel: one program per (batch, q head), online softmax over S in tiles.

Each of the G = Hq / Hkv q heads that share a KV head re-reads that head's K and V.
"""

import math

import torch
import triton
import triton.language as tl

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


def launch(q, k, v, *, BLOCK_S: int, num_warps: int):
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
