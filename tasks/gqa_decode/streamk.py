"""GQA decode, stream-K split: PROGRAMS programs each take an equal run of KV tiles, across heads.

split_kv.py splits every (batch, KV head) pair into SPLITS equal chunks, so the grid is B * Hkv *
SPLITS programs: at B = 8 that is 64 * SPLITS, which never divides evenly over 132 SMs, and the last
wave leaves SMs idle. Here all B * Hkv * ceil(S / BLOCK_S) tiles form one sequence, cut into PROGRAMS
equal runs (PROGRAMS = 132 is one run per SM). A run may start in one pair and end in the next: it
writes one partial (max, sum, unnormalized output) per pair it touches, and the combine kernel merges
each q head's partials, however many programs shared its pair.
"""

import math

import torch
import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)  # kernels may only read constexpr globals


@triton.jit
def gqa_streamk_kernel(
    q_ptr, k_ptr, v_ptr, max_ptr, sum_ptr, acc_ptr, S, PAIR_TILES, RUN_TILES, TOTAL_TILES, scale,
    HQ: tl.constexpr, HKV: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr, DOT_DTYPE: tl.constexpr,
    SLOTS: tl.constexpr, BLOCK_S: tl.constexpr,
):  # fmt: skip
    G: tl.constexpr = HQ // HKV
    pid = tl.program_id(0)
    g = tl.arange(0, G_PAD)
    d = tl.arange(0, D)
    g_mask = g < G
    qk_scale = scale * LOG2E  # applied to the fp32 scores: q stays exact in DOT_DTYPE
    t = pid * RUN_TILES  # this program's tiles: [pid * RUN_TILES, (pid + 1) * RUN_TILES), global
    t_end = tl.minimum(t + RUN_TILES, TOTAL_TILES)
    while t < t_end:
        pair = t // PAIR_TILES  # b * HKV + kv head
        seg_end = tl.minimum((pair + 1) * PAIR_TILES, t_end)
        q_rows = pair * G + g  # == b * HQ + kv_head * G + g
        q = tl.load(q_ptr + q_rows[:, None] * D + d[None, :], mask=g_mask[:, None], other=0.0).to(DOT_DTYPE)
        kv_base = tl.cast(pair, tl.int64) * S * D
        m = tl.full([G_PAD], float("-inf"), tl.float32)
        l = tl.full([G_PAD], 0.0, tl.float32)
        acc = tl.full([G_PAD, D], 0.0, tl.float32)
        for tile in range(t - pair * PAIR_TILES, seg_end - pair * PAIR_TILES):
            s_idx = tile * BLOCK_S + tl.arange(0, BLOCK_S)
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
        # Slot of this partial among the pair's: programs are numbered in tile order, so the pair's
        # first program (the one holding its first tile) writes slot 0.
        slot = pid - (pair * PAIR_TILES) // RUN_TILES
        part = q_rows * SLOTS + slot  # partials laid out [B * HQ, SLOTS]
        tl.store(max_ptr + part, m, mask=g_mask)
        tl.store(sum_ptr + part, l, mask=g_mask)
        tl.store(acc_ptr + tl.cast(part, tl.int64)[:, None] * D + d[None, :], acc, mask=g_mask[:, None])
        t = seg_end


@triton.jit
def gqa_streamk_combine_kernel(
    max_ptr, sum_ptr, acc_ptr, o_ptr, PAIR_TILES, RUN_TILES,
    G: tl.constexpr, D: tl.constexpr, SLOTS: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)  # b * HQ + q head
    pair = row // G
    first = (pair * PAIR_TILES) // RUN_TILES
    count = ((pair + 1) * PAIR_TILES - 1) // RUN_TILES - first + 1  # programs that wrote a partial
    slots = tl.arange(0, SLOTS)
    written = slots < count  # slots past count hold garbage from no one: never read
    parts = row * SLOTS + slots
    d = tl.arange(0, D)
    part_max = tl.load(max_ptr + parts, mask=written, other=float("-inf"))
    m = tl.max(part_max, axis=0)  # finite: slot 0 holds the pair's first tile, a real position
    weight = tl.exp2(part_max - m)  # 0 for unwritten slots
    total = tl.sum(tl.load(sum_ptr + parts, mask=written, other=0.0) * weight, axis=0)
    acc = tl.load(acc_ptr + tl.cast(parts, tl.int64)[:, None] * D + d[None, :], mask=written[:, None], other=0.0)
    o = tl.sum(acc * weight[:, None], axis=0) / total
    tl.store(o_ptr + row * D + d, o.to(o_ptr.dtype.element_ty))


def launch(q, k, v, *, PROGRAMS: int, BLOCK_S: int, num_warps: int, num_stages: int):
    assert q.is_contiguous() and k.is_contiguous() and v.is_contiguous(), "q, k and v must be contiguous"
    B, HQ, D = q.shape
    _, HKV, S, _ = k.shape
    assert k.shape == v.shape == (B, HKV, S, D) and HQ % HKV == 0, "expected q[B,Hq,D], k/v[B,Hkv,S,D]"
    assert S >= 1, "an empty KV cache has no softmax"
    o = torch.empty_like(q)
    # tl.dot on bf16 operands is wrong in the Triton interpreter (it multiplies the raw bits), so on
    # CPU, which only the interpreter runs, the dot operands go up to fp32; on the GPU they stay bf16.
    dot_dtype = tl.bfloat16 if q.dtype == torch.bfloat16 and q.device.type != "cpu" else tl.float32
    pair_tiles = triton.cdiv(S, BLOCK_S)
    total_tiles = B * HKV * pair_tiles
    run_tiles = triton.cdiv(total_tiles, min(PROGRAMS, total_tiles))
    programs = triton.cdiv(total_tiles, run_tiles)  # every program gets at least one tile
    # A pair's tiles meet at most cdiv(pair_tiles, run_tiles) + 1 runs (its first run may start mid-way).
    slots = triton.next_power_of_2(triton.cdiv(pair_tiles, run_tiles) + 1)
    part_max = torch.empty((B * HQ, slots), dtype=torch.float32, device=q.device)
    part_sum = torch.empty((B * HQ, slots), dtype=torch.float32, device=q.device)
    part_acc = torch.empty((B * HQ, slots, D), dtype=torch.float32, device=q.device)
    gqa_streamk_kernel[(programs,)](
        q, k, v, part_max, part_sum, part_acc, S, pair_tiles, run_tiles, total_tiles, 1.0 / math.sqrt(D),
        HQ=HQ, HKV=HKV, G_PAD=max(16, triton.next_power_of_2(HQ // HKV)), D=D, DOT_DTYPE=dot_dtype,
        SLOTS=slots, BLOCK_S=BLOCK_S, num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    gqa_streamk_combine_kernel[(B * HQ,)](
        part_max, part_sum, part_acc, o, pair_tiles, run_tiles, G=HQ // HKV, D=D, SLOTS=slots, num_warps=4
    )
    return o
