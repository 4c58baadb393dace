"""Row softmax, persistent with a register prefetch: the next row's loads fly while this row is reduced.

The baseline holds one whole row per program, so each SM loads a row, stops loading while it takes
the max, the exps and the sum, then stores: with one large program per SM the memory system idles
during the math. Here PROGRAMS programs stride over the rows and issue the loads of their next row
before the math of the current one, so the loads of row i + 1 overlap the reduction of row i. One exp
per element, and a multiply by the reciprocal sum instead of a division per element. Both rows sit in
registers, so the prefetch is kept to rows of up to 64 KB (bf16 rows of 32768); longer rows are
handled one at a time (they belong to the baseline or online.py).
"""

import torch
import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)  # kernels may only read constexpr globals


@triton.jit
def _softmax(x):
    # Subtract before scaling by log2(e): x - m is exact for close values, x * log2(e) is not.
    num = tl.exp2((x - tl.max(x, axis=0)) * LOG2E)
    return num * (1.0 / tl.sum(num, axis=0))


@triton.jit
def softmax_prefetch_kernel(x_ptr, y_ptr, M, N, BLOCK_N: tl.constexpr, PREFETCH: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    first = tl.program_id(0)
    step = tl.num_programs(0)
    if PREFETCH:
        # The grid never exceeds M, so every program's first row exists.
        x_next = tl.load(x_ptr + tl.cast(first, tl.int64) * N + cols, mask=col_mask, other=float("-inf"))
        for row in range(first, M, step):
            x_raw = x_next
            nxt = row + step
            # Loaded now, used next iteration: the math below runs while these loads are in flight.
            # They are issued before the wait for this row's data (the conversion below), so the
            # memory system always has the next row requested. Past the last row the columns shift
            # out of range and nothing is read (an arithmetic mask: the interpreter cannot and a
            # scalar condition into a block mask).
            past_end = tl.cast(nxt >= M, tl.int32) * BLOCK_N
            x_next = tl.load(
                x_ptr + tl.cast(nxt, tl.int64) * N + cols, mask=cols + past_end < N, other=float("-inf")
            )
            y = _softmax(x_raw.to(tl.float32))
            tl.store(y_ptr + tl.cast(row, tl.int64) * N + cols, y.to(y_ptr.dtype.element_ty), mask=col_mask)
    else:
        for row in range(first, M, step):
            offs = tl.cast(row, tl.int64) * N + cols
            x = tl.load(x_ptr + offs, mask=col_mask, other=float("-inf")).to(tl.float32)
            tl.store(y_ptr + offs, _softmax(x).to(y_ptr.dtype.element_ty), mask=col_mask)


# Two rows in registers spill past 64 KB a row (fp32 rows of 32768 ran 1.4x slower than without the
# prefetch on the H200); longer rows run the same persistent loop, one row at a time.
PREFETCH_MAX_ROW_BYTES = 64 * 1024


def launch(x, *, PROGRAMS: int, num_warps: int):
    assert x.is_contiguous(), "x must be contiguous"
    M, N = x.shape
    y = torch.empty_like(x)
    if M == 0:
        return y
    block_n = triton.next_power_of_2(N)
    prefetch = block_n * x.element_size() <= PREFETCH_MAX_ROW_BYTES
    softmax_prefetch_kernel[(min(M, PROGRAMS),)](
        x, y, M, N, BLOCK_N=block_n, PREFETCH=prefetch, num_warps=num_warps, num_stages=1
    )
    return y
