"""Row softmax, the tutorial kernel: one row per program, the whole row in one block."""

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=float("-inf")).to(tl.float32)
    num = tl.exp(x - tl.max(x, axis=0))
    y = num / tl.sum(num, axis=0)
    tl.store(y_ptr + row * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def launch(x, *, num_warps: int):
    assert x.is_contiguous(), "x must be contiguous"
    M, N = x.shape
    y = torch.empty_like(x)
    softmax_kernel[(M,)](x, y, N, BLOCK_N=triton.next_power_of_2(N), num_warps=num_warps)
    return y
