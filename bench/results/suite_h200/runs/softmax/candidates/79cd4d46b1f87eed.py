"""Row softmax with a looped online softmax: rows of any length in BLOCK_N tiles, nothing spills.

Pass 1 keeps a running max (a scalar; the sum is rescaled when it grows) and per-lane running sums;
pass 2 re-reads the row, last tile first, and writes exp(x - max) / sum. One exp per element per pass;
in both passes the next tile's loads are issued before the current tile's math.
The re-read is cheap only while the row is still in L2, so at most PROGRAMS programs run, each
looping over rows: fewer rows in flight, a smaller working set (132 is the H200's SM count; a value
above M gives one row per program).
"""

import torch
import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)  # kernels may only read constexpr globals


@triton.jit
def softmax_online_kernel(x_ptr, y_ptr, M, N, BLOCK_N: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    for row in range(tl.program_id(0), M, tl.num_programs(0)):
        offset = tl.cast(row, tl.int64) * N  # row is a plain int under the interpreter: no .to()
        x_row = x_ptr + offset
        y_row = y_ptr + offset
        m = tl.full([], float("-inf"), tl.float32)  # running max
        s = tl.full([BLOCK_N], 0.0, tl.float32)  # per-lane sums, all relative to m
        # Each tile's loads are issued one step ahead, before the wait for the current tile, so the
        # memory system always has the next tile requested while this one is reduced.
        x_next = tl.load(x_row + cols, mask=cols < N, other=float("-inf"))
        for start in range(0, N, BLOCK_N):
            x_raw = x_next
            idx = start + BLOCK_N + cols  # past the row's end the mask is all false: nothing is read
            x_next = tl.load(x_row + idx, mask=idx < N, other=float("-inf"))
            x = x_raw.to(tl.float32)
            # Every tile holds at least one real element, so m_new is finite from the first tile on.
            # Subtract before scaling by log2(e): x - m is exact for close values, x * log2(e) is not.
            m_new = tl.maximum(m, tl.max(x, axis=0))
            s = s * tl.exp2((m - m_new) * LOG2E) + tl.exp2((x - m_new) * LOG2E)
            m = m_new
        inv_sum = 1.0 / tl.sum(s, axis=0)
        # Pass 2 walks the row backwards: the tiles pass 1 read last are the likeliest still in L2.
        tiles = tl.cdiv(N, BLOCK_N)
        idx = (tiles - 1) * BLOCK_N + cols
        x_next = tl.load(x_row + idx, mask=idx < N, other=0.0)
        for back in range(0, tiles):
            x_raw = x_next
            idx = (tiles - 2 - back) * BLOCK_N + cols  # before the row's start: masked, nothing read
            x_next = tl.load(x_row + idx, mask=(idx >= 0) & (idx < N), other=0.0)
            idx = (tiles - 1 - back) * BLOCK_N + cols
            x = x_raw.to(tl.float32)
            tl.store(
                y_row + idx, (tl.exp2((x - m) * LOG2E) * inv_sum).to(y_ptr.dtype.element_ty), mask=idx < N
            )


def launch(x, *, BLOCK_N: int, PROGRAMS: int, num_warps: int):
    assert x.is_contiguous(), "x must be contiguous"
    M, N = x.shape
    y = torch.empty_like(x)
    softmax_online_kernel[(min(M, PROGRAMS),)](x, y, M, N, BLOCK_N=BLOCK_N, num_warps=num_warps)
    return y
