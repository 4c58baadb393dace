"""One decode step of grouped-query attention: the PyTorch reference and the input generator."""

from __future__ import annotations

import math

import torch

HQ, HKV, D = 32, 8, 128


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """o[b, h] = softmax(q[b, h] . k[b, h // G]^T / sqrt(D)) @ v[b, h // G], fp32 math, G = Hq / Hkv."""
    b, hq, d = q.shape
    hkv = k.shape[1]
    # q heads h*G .. h*G+G-1 share KV head h (as SDPA's enable_gqa / repeat_interleave do).
    qg = q.float().view(b, hkv, hq // hkv, d)
    scores = torch.einsum("bkgd,bksd->bkgs", qg, k.float()) / math.sqrt(d)
    o = torch.einsum("bkgs,bksd->bkgd", torch.softmax(scores, dim=-1), v.float())
    return o.reshape(b, hq, d).to(q.dtype)


def make_inputs(
    shape: dict[str, int], dtype: torch.dtype | str, device: str | torch.device, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q [B, 32, 128] and the KV cache k, v [B, 8, S, 128], deterministic in (shape, seed).

    q heads 0, 8, 16, 24 are scaled x10 (peaked attention: the running max matters), K of KV head 3
    is scaled x10 (large scores), V of KV head 1 is scaled x100 (large outputs).
    """
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    b, s = shape["B"], shape["S"]
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    q = torch.randn(b, HQ, D, generator=gen, device=device)
    k = torch.randn(b, HKV, s, D, generator=gen, device=device)
    v = torch.randn(b, HKV, s, D, generator=gen, device=device)
    q[:, ::8] *= 10.0
    k[:, 3] *= 10.0
    v[:, 1] *= 100.0
    return q.to(dtype), k.to(dtype), v.to(dtype)
