"""Row softmax split across programs: for few long rows (M = 1), SPLITS programs share each row.

Kernel 1: each (row, split) program reduces its CHUNK of the row to a partial (max, sum).
Kernel 2: each (row, split) program combines the row's SPLITS partials into the row's max and sum
and writes its chunk of exp(x - max) / sum, re-reading x (mostly from L2). With M rows the grid is
M x SPLITS, so even one row keeps the SMs busy.
"""

import torch
import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)  # kernels may only read constexpr globals


@triton.jit
def softmax_partial_kernel(x_ptr, max_ptr, sum_ptr, N, CHUNK, SPLITS: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    split = tl.program_id(1)
    x_row = x_ptr + row.to(tl.int64) * N
    lo = split * CHUNK
    hi = tl.minimum(lo + CHUNK, N)
    cols = tl.arange(0, BLOCK_N)
    m = tl.full([], float("-inf"), tl.float32)
    s = tl.full([BLOCK_N], 0.0, tl.float32)
    # A split past the end of a short row runs no iteration and reports (max=-inf, sum=0).
    for start in range(lo, hi, BLOCK_N):
        idx = start + cols
        x = tl.load(x_row + idx, mask=idx < hi, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp2((m - m_new) * LOG2E) + tl.exp2((x - m_new) * LOG2E)
        m = m_new
    tl.store(max_ptr + row * SPLITS + split, m)
    tl.store(sum_ptr + row * SPLITS + split, tl.sum(s, axis=0))


@triton.jit
def softmax_normalize_kernel(
    x_ptr, y_ptr, max_ptr, sum_ptr, N, CHUNK, SPLITS: tl.constexpr, BLOCK_N: tl.constexpr
):
    row = tl.program_id(0)
    split = tl.program_id(1)
    parts = row * SPLITS + tl.arange(0, SPLITS)
    part_max = tl.load(max_ptr + parts)
    part_sum = tl.load(sum_ptr + parts)
    m = tl.max(part_max, axis=0)  # finite: split 0 always holds the row's first element
    inv_sum = 1.0 / tl.sum(part_sum * tl.exp2((part_max - m) * LOG2E), axis=0)
    x_row = x_ptr + row.to(tl.int64) * N
    y_row = y_ptr + row.to(tl.int64) * N
    lo = split * CHUNK
    hi = tl.minimum(lo + CHUNK, N)
    cols = tl.arange(0, BLOCK_N)
    for start in range(lo, hi, BLOCK_N):
        idx = start + cols
        mask = idx < hi
        x = tl.load(x_row + idx, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + idx, (tl.exp2((x - m) * LOG2E) * inv_sum).to(y_ptr.dtype.element_ty), mask=mask)


def launch(x, *, SPLITS: int, BLOCK_N: int, num_warps: int):
    assert x.is_contiguous(), "x must be contiguous"
    M, N = x.shape
    y = torch.empty_like(x)
    part_max = torch.empty((M, SPLITS), dtype=torch.float32, device=x.device)
    part_sum = torch.empty((M, SPLITS), dtype=torch.float32, device=x.device)
    # Each split covers a whole number of tiles; trailing splits of a short row may be empty.
    chunk = triton.cdiv(triton.cdiv(N, SPLITS), BLOCK_N) * BLOCK_N
    grid = (M, SPLITS)
    softmax_partial_kernel[grid](
        x, part_max, part_sum, N, chunk, SPLITS=SPLITS, BLOCK_N=BLOCK_N, num_warps=num_warps
    )
    softmax_normalize_kernel[grid](
        x, y, part_max, part_sum, N, chunk, SPLITS=SPLITS, BLOCK_N=BLOCK_N, num_warps=num_warps
    )
    return y
