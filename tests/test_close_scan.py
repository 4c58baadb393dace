"""The judge's close test on the GPU (tools.close_scan), run on real Triton kernels (the interpreter without
a GPU) against the torch scan that tools.compare runs everywhere else: the same verdict and the same
statistics, past one block and one program's share; never looser than that scan."""

from __future__ import annotations

import math

import pytest
import torch

from tools import close_scan, compare

RTOL, ATOL = 2e-2, 1e-2


def torch_scan(got: torch.Tensor, expected: torch.Tensor) -> compare._Scan | None:
    scan = compare._Scan()
    return scan if compare._scan_close_slice(scan, got, expected, 0, RTOL, ATOL, 0) else None


def near(n: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(n)
    e = torch.randn(n, generator=gen).to(dtype)
    g = (e.double() + 1e-3 * torch.randn(n, generator=gen, dtype=torch.float64)).to(dtype)
    return g, e


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64], ids=str)
def test_close_outputs_give_the_torch_scans_statistics(dtype: torch.dtype):
    g, e = near(3 * close_scan.BLOCK + 17, dtype)
    far, ref_sq, diff_sq, top, at = close_scan.stats(g, e, RTOL, ATOL)
    want = torch_scan(g, e)
    assert far == 0 and want is not None
    assert math.isclose(ref_sq, want.ref_sq, rel_tol=1e-12)
    assert math.isclose(diff_sq, want.diff_sq, rel_tol=1e-9)
    assert top == want.worst_diff
    assert (g.double() - e.double()).abs()[int(at)] == top  # the position holds the largest difference


def test_more_blocks_than_programs_are_all_scanned(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(close_scan, "MAX_PROGRAMS", 2)  # each program loops over several blocks
    g, e = near(7 * close_scan.BLOCK, torch.float32)
    g[-1] += 5.0  # in the last block of the second program
    far, _, _, top, at = close_scan.stats(g, e, RTOL, ATOL)
    assert far == 1 and int(at) == g.numel() - 1 and top == pytest.approx(5.0, abs=0.01)


@pytest.mark.parametrize(
    "spoil",
    [
        lambda g, e: g.__setitem__(5, math.nan),  # NaN where the reference is finite
        lambda g, e: g.__setitem__(5, math.inf),  # inf where the reference is finite
        lambda g, e: (g.__setitem__(5, math.inf), e.__setitem__(5, math.inf)),  # both inf: the full scan decides
        lambda g, e: (g.__setitem__(5, math.nan), e.__setitem__(5, math.nan)),  # both NaN: the full scan decides
        lambda g, e: g.__setitem__(slice(0, None, 97), 0.0),  # a degenerate share of the output
    ],
    ids=["nan", "inf", "both_inf", "both_nan", "zeros"],
)
def test_anything_the_torch_scan_does_not_call_close_is_not_close_here(spoil):
    g, e = near(5000, torch.float32)
    spoil(g, e)
    far, ref_sq, diff_sq, _, _ = close_scan.stats(g, e, RTOL, ATOL)
    assert torch_scan(g, e) is None
    assert far > 0 or not math.isfinite(ref_sq) or not math.isfinite(diff_sq)


def test_pairs_the_kernels_do_not_cover_keep_torchs_steps():
    x = torch.zeros(4, 4)
    assert not close_scan.covered(x, x)  # not on the GPU
    assert not close_scan.covered(x.t(), x.t())  # not contiguous (and not on the GPU)
