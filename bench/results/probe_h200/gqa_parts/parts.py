# ruff: noqa: B023  (the closures are timed inside the iteration that defines them)
"""Where split_kv's time goes at B=8: the split kernel and the combine timed alone and together over S
(same program count), beside a same-size copy and a read-only kernel of the same bytes.
Usage (repo root, GPU): python3 bench/results/probe_h200/gqa_parts/parts.py OUT.json"""

import json
import math
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from tasks.gqa_decode.reference import make_inputs, reference  # noqa: E402
from tasks.gqa_decode.split_kv import gqa_combine_kernel, gqa_split_kernel, launch  # noqa: E402
from tools.timing import TimingSettings, copy_bandwidth_gbps, copy_time_us, time_fn  # noqa: E402


@triton.jit
def read_kernel(x_ptr, out_ptr, n_per_prog, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    base = pid.to(tl.int64) * n_per_prog
    acc = tl.zeros([BLOCK], tl.float32)
    for start in tl.range(0, n_per_prog, BLOCK, num_stages=3):
        acc += tl.load(x_ptr + base + start + tl.arange(0, BLOCK)).to(tl.float32)
    tl.store(out_ptr + pid, tl.sum(acc))


def main(out: str) -> None:
    s = TimingSettings()
    gbps = copy_bandwidth_gbps(s)
    rows = []
    cfg = dict(SPLITS=2, BLOCK_S=128, num_warps=4, num_stages=3)
    for S in (2048, 4096, 8192, 16384):
        q, k, v = make_inputs({"B": 8, "S": S}, torch.bfloat16, "cuda", 0)
        o = launch(q, k, v, **cfg)
        err = (o.float() - reference(q, k, v).float()).abs().max().item()
        B, HQ, D = q.shape
        HKV = k.shape[1]
        SPLITS, BS = cfg["SPLITS"], cfg["BLOCK_S"]
        pm = torch.empty((B * HQ, SPLITS), dtype=torch.float32, device="cuda")
        ps = torch.empty_like(pm)
        pa = torch.empty((B * HQ, SPLITS, D), dtype=torch.float32, device="cuda")
        chunk = triton.cdiv(triton.cdiv(S, SPLITS), BS) * BS

        def split_only():
            gqa_split_kernel[(B * HKV, SPLITS)](
                q,
                k,
                v,
                pm,
                ps,
                pa,
                S,
                chunk,
                1.0 / math.sqrt(D),
                HQ=HQ,
                HKV=HKV,
                G_PAD=16,
                D=D,
                DOT_DTYPE=tl.bfloat16,
                SPLITS=SPLITS,
                BLOCK_S=BS,
                num_warps=4,
                num_stages=3,
            )

        def combine_only():
            gqa_combine_kernel[(B * HQ,)](pm, ps, pa, o, D=D, SPLITS=SPLITS, num_warps=4)

        kv = torch.cat([k.reshape(-1), v.reshape(-1)])
        red = torch.empty(128, dtype=torch.float32, device="cuda")
        n_per = kv.numel() // 128

        def read_only():
            read_kernel[(128,)](kv, red, n_per, BLOCK=4096, num_warps=8)

        nbytes = 2 * k.numel() * 2
        row = {
            "S": S,
            "bytes": nbytes,
            "max_abs_err": err,
            "full_us": time_fn(lambda: launch(q, k, v, **cfg), s).median_us,
            "split_us": time_fn(split_only, s).median_us,
            "combine_us": time_fn(combine_only, s).median_us,
            "read128_us": time_fn(read_only, s).median_us,
            "copy_us": copy_time_us(nbytes, s),
        }
        row["full_pct_copy"] = 100 * nbytes / (row["full_us"] * 1e-6) / 1e9 / gbps
        print(json.dumps(row), flush=True)
        rows.append(row)
    Path(out).write_text(json.dumps({"copy_gbps": gbps, "config": cfg, "rows": rows}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
