"""Row softmax over the last dimension: the PyTorch reference and the input generator."""

from __future__ import annotations

import torch


def reference(x: torch.Tensor) -> torch.Tensor:
    """softmax(x, dim=-1) computed in fp32, returned in x's dtype."""
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def make_inputs(
    shape: dict[str, int], dtype: torch.dtype | str, device: str | torch.device, seed: int
) -> tuple[torch.Tensor]:
    """x [M, N], deterministic in (shape, seed).

    Rows 4k+1 carry a +1000 offset (exp without subtracting the max overflows), rows 4k+3 are scaled
    x100 (a few entries take all the mass), and when M >= 2 row 0 is all zeros (a uniform row).
    """
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    m, n = shape["M"], shape["N"]
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    x = 2.0 * torch.randn(m, n, generator=gen, device=device)
    x[1::4] += 1000.0
    x[3::4] *= 100.0
    if m >= 2:
        x[0] = 0.0
    return (x.to(dtype),)
