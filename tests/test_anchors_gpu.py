"""Every library anchor against the formula it stands for, on CUDA tensors, including those no example
task uses yet (RMSNorm, SwiGLU). Needs a CUDA GPU and liger-kernel (skipped without them)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bench.anchors import ANCHORS

pytestmark = pytest.mark.gpu


def rms(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    hf = h.float()
    return (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(h.dtype)


def attend(q, k, v):
    g = q.shape[1] // k.shape[1]
    scores = torch.einsum("bhd,bhsd->bhs", q.float(), k.repeat_interleave(g, 1).float()) / q.shape[-1] ** 0.5
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v.repeat_interleave(g, 1).float()).to(q.dtype)


def cases():
    cuda = {"device": "cuda", "dtype": torch.bfloat16}
    x, r, w = torch.randn(64, 1000, **cuda), torch.randn(64, 1000, **cuda), torch.randn(1000, **cuda)
    a, b = torch.randn(64, 1000, **cuda), torch.randn(64, 1000, **cuda)
    q, k, v = (
        torch.randn(2, 32, 128, **cuda),
        torch.randn(2, 8, 77, 128, **cuda),
        torch.randn(2, 8, 77, 128, **cuda),
    )
    return {
        "liger.fused_add_rms_norm": ((x, r, w), (rms(x + r, w), x + r)),
        "liger.rms_norm": ((x, w), (rms(x, w),)),
        "liger.softmax": ((x,), (torch.softmax(x.float(), -1).to(x.dtype),)),
        "liger.swiglu": ((a, b), ((F.silu(a.float()) * b.float()).to(a.dtype),)),
        "sdpa": ((q, k, v), (attend(q, k, v),)),
    }


@pytest.mark.parametrize("name", sorted(ANCHORS))
def test_each_anchor_computes_its_op(name):
    if name.startswith("liger."):
        pytest.importorskip("liger_kernel")
    inputs, expected = cases()[name]
    anchor = ANCHORS[name]
    got = anchor.build(anchor.options())(*inputs)
    for g, e in zip(got if isinstance(got, tuple) else (got,), expected, strict=True):
        torch.testing.assert_close(g.float(), e.float(), rtol=2e-2, atol=2e-2)
