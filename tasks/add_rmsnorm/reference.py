"""Fused residual add + RMSNorm: the PyTorch reference and the input generator."""

from __future__ import annotations

import torch

EPS = 1e-6


def reference(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """h = x + r rounded to the input dtype; y = h * rsqrt(mean(h^2) + eps) * w in fp32 from that h."""
    h = (x.float() + r.float()).to(x.dtype)
    hf = h.float()
    rstd = torch.rsqrt(hf.pow(2).mean(dim=-1, keepdim=True) + EPS)
    y = (hf * rstd * w.float()).to(x.dtype)
    return y, h


def make_inputs(
    shape: dict[str, int], dtype: torch.dtype | str, device: str | torch.device, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x, r [M, N] and w [N], deterministic in (shape, seed).

    Every 4th row (3, 7, ...) is scaled x100 so large magnitudes are exercised, and when M >= 2 row 0
    of r is -x so h's row 0 is exactly zero (y must then be 0, not NaN).
    """
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    m, n = shape["M"], shape["N"]
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    x = torch.randn(m, n, generator=gen, device=device)
    r = torch.randn(m, n, generator=gen, device=device)
    w = 1.0 + 0.5 * torch.randn(n, generator=gen, device=device)
    x[3::4] *= 100.0
    r[3::4] *= 100.0
    x, r, w = x.to(dtype), r.to(dtype), w.to(dtype)
    if m >= 2:
        r[0] = -x[0]
    return x, r, w
