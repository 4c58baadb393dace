# ruff: noqa: B023  (the closures are timed inside the iteration that defines them)
"""split_kv's split kernel at B=8 S=8192 with a %globaltimer stamp per program (start, first tile
done, end, SM id), after a do_bench-style L2 flush (zero_ of 256 MB) or a read-only flush; and the
event-timed split kernel and same-size copy under both flushes.
Usage (repo root, GPU): python3 bench/results/probe_h200/gqa_parts/timeline.py OUT.json"""

import json
import math
import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import globaltimer, smid

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from tasks.gqa_decode.reference import make_inputs  # noqa: E402
from tasks.gqa_decode.split_kv import launch  # noqa: E402

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def timed_split_kernel(
    q_ptr, k_ptr, v_ptr, max_ptr, sum_ptr, acc_ptr, stamp_ptr, S, CHUNK, scale,
    HQ: tl.constexpr, HKV: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr,
    SPLITS: tl.constexpr, BLOCK_S: tl.constexpr,
):  # fmt: skip
    t0 = globaltimer()
    G: tl.constexpr = HQ // HKV
    pid = tl.program_id(0)
    split = tl.program_id(1)
    g = tl.arange(0, G_PAD)
    d = tl.arange(0, D)
    q_rows = pid * G + g
    g_mask = g < G
    q = tl.load(q_ptr + q_rows[:, None] * D + d[None, :], mask=g_mask[:, None], other=0.0)
    kv_base = pid.to(tl.int64) * S * D
    qk_scale = scale * LOG2E
    m = tl.full([G_PAD], float("-inf"), tl.float32)
    denom = tl.full([G_PAD], 0.0, tl.float32)
    acc = tl.full([G_PAD, D], 0.0, tl.float32)
    lo = split * CHUNK
    hi = tl.minimum(lo + CHUNK, S)
    t1 = t0
    for start in range(lo, hi, BLOCK_S):
        s_idx = start + tl.arange(0, BLOCK_S)
        s_mask = s_idx < hi
        offs = kv_base + s_idx[:, None] * D + d[None, :]
        k = tl.load(k_ptr + offs, mask=s_mask[:, None], other=0.0)
        scores = tl.dot(q, tl.trans(k)) * qk_scale
        scores = tl.where(s_mask[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(scores - m_new[:, None])
        v = tl.load(v_ptr + offs, mask=s_mask[:, None], other=0.0)
        denom = denom * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.bfloat16), v)
        m = m_new
        if start == lo:
            t1 = globaltimer()
    part = q_rows * SPLITS + split
    tl.store(max_ptr + part, m, mask=g_mask)
    tl.store(sum_ptr + part, denom, mask=g_mask)
    tl.store(acc_ptr + part[:, None].to(tl.int64) * D + d[None, :], acc, mask=g_mask[:, None])
    t2 = globaltimer()
    slot = (pid * SPLITS + split) * 4
    tl.store(stamp_ptr + slot, t0)
    tl.store(stamp_ptr + slot + 1, t1)
    tl.store(stamp_ptr + slot + 2, t2)
    tl.store(stamp_ptr + slot + 3, smid().to(tl.int64))


def main(out: str) -> None:
    B, S, SPLITS, BS = 8, 8192, 2, 128
    q, k, v = make_inputs({"B": B, "S": S}, torch.bfloat16, "cuda", 0)
    HQ, D, HKV = q.shape[1], q.shape[2], k.shape[1]
    pm = torch.empty((B * HQ, SPLITS), dtype=torch.float32, device="cuda")
    ps = torch.empty_like(pm)
    pa = torch.empty((B * HQ, SPLITS, D), dtype=torch.float32, device="cuda")
    stamps = torch.zeros((B * HKV * SPLITS, 4), dtype=torch.int64, device="cuda")
    chunk = triton.cdiv(triton.cdiv(S, SPLITS), BS) * BS
    flush_buf = torch.ones(64 << 20, dtype=torch.float32, device="cuda")  # 256 MB
    sink = torch.empty(1, dtype=torch.float32, device="cuda")
    nbytes = 2 * k.numel() * 2
    src = torch.randint(0, 255, (nbytes // 2,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)

    def split():
        timed_split_kernel[(B * HKV, SPLITS)](
            q,
            k,
            v,
            pm,
            ps,
            pa,
            stamps,
            S,
            chunk,
            1.0 / math.sqrt(D),
            HQ=HQ,
            HKV=HKV,
            G_PAD=16,
            D=D,
            SPLITS=SPLITS,
            BLOCK_S=BS,
            num_warps=4,
            num_stages=3,
        )

    flushes = {
        "zero": lambda: flush_buf.zero_(),
        "read": lambda: torch.sum(flush_buf, dim=0, out=sink[0]),
    }
    result = {}
    for name, flush in flushes.items():
        for what, fn in (
            ("split", split),
            ("full", lambda: launch(q, k, v, SPLITS=SPLITS, BLOCK_S=BS, num_warps=4, num_stages=3)),
            ("copy", lambda: dst.copy_(src)),
        ):
            times = []
            for i in range(60):
                flush()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                torch.cuda.synchronize()
                if i >= 10:
                    times.append(a.elapsed_time(b) * 1000)
            result[f"{what}_{name}_flush_us"] = statistics.median(times)
        flush()
        split()
        torch.cuda.synchronize()
        st = stamps.cpu().tolist()
        t0 = min(r[0] for r in st)
        starts = sorted((r[0] - t0) / 1000 for r in st)
        firsts = sorted((r[1] - r[0]) / 1000 for r in st)
        ends = sorted((r[2] - t0) / 1000 for r in st)
        q_ = lambda xs, p: xs[min(len(xs) - 1, int(p * len(xs)))]  # noqa: E731
        result[f"timeline_{name}_flush"] = {
            "start_us_p0_p50_p100": [starts[0], q_(starts, 0.5), starts[-1]],
            "first_tile_us_p0_p50_p100": [firsts[0], q_(firsts, 0.5), firsts[-1]],
            "end_us_p0_p10_p50_p90_p100": [ends[0], q_(ends, 0.1), q_(ends, 0.5), q_(ends, 0.9), ends[-1]],
            "distinct_sms": len({r[3] for r in st}),
            "programs": len(st),
        }
    result["bytes"] = nbytes
    print(json.dumps(result, indent=1))
    Path(out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
