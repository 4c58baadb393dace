"""What each timed replay leaves for the judge: per output, how many elements still hold the poison and the
values at the sampled positions, written as one float64 row on the GPU.

Two small Triton kernels per output instead of torch's elementwise test, reduction, gather, casts and
copies (about seven kernels per output): the log runs after every timed replay, so its cost is paid a few
hundred times per shape, and on a 268 MB output torch's steps cost several times the kernel being timed.
Outputs the kernels do not cover (not contiguous, or of a dtype below) keep torch's steps."""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from tools.timing import poison_value

BLOCK = 4096
MAX_PROGRAMS = 1024  # partial counts per output; the second kernel sums them in one block
SAMPLE_BLOCK = 256  # the judge samples at most 256 positions per output
_COVERED = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int16,
            torch.int32, torch.int64}  # fmt: skip


@triton.jit(do_not_specialize=["n", "poison"])
def _count_poison(out_ptr, n, partial_ptr, poison, IS_NAN: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0).to(tl.int64) * BLOCK
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for base in range(pid.to(tl.int64) * BLOCK, n, step):
        offs = base + tl.arange(0, BLOCK)
        inside = offs < n
        x = tl.load(out_ptr + offs, mask=inside, other=0)
        if IS_NAN:
            wide = x.to(tl.float32)  # NaN survives the widening; half types compare reliably as fp32
            hit = wide != wide
        else:
            hit = x == poison
        acc += (hit & inside).to(tl.int32)
    tl.store(partial_ptr + pid, tl.sum(acc, axis=0).to(tl.int64))


@triton.jit(do_not_specialize=["n_partial", "n_samples"])
def _write_row(partial_ptr, n_partial, out_ptr, offsets_ptr, n_samples, row_ptr,
               P_BLOCK: tl.constexpr, S_BLOCK: tl.constexpr):  # fmt: skip
    p = tl.arange(0, P_BLOCK)
    total = tl.sum(tl.load(partial_ptr + p, mask=p < n_partial, other=0), axis=0)
    tl.store(row_ptr, total.to(tl.float64))
    s = tl.arange(0, S_BLOCK)
    taken = s < n_samples
    where = tl.load(offsets_ptr + s, mask=taken, other=0)
    tl.store(row_ptr + 1 + s, tl.load(out_ptr + where, mask=taken, other=0).to(tl.float64), mask=taken)


def covered(out: torch.Tensor, poison: float | int | None) -> bool:
    return out.is_cuda and out.is_contiguous() and out.dtype in _COVERED and poison is not None and out.numel() > 0


def row_writer(out: torch.Tensor, poison: float | int, flat: torch.Tensor, row: torch.Tensor) -> Callable[[], None]:
    """A call that writes ``row`` = [poison count of ``out``, out.flat[flat]...] (``row`` float64, on the GPU)."""
    n = out.numel()
    programs = min(triton.cdiv(n, BLOCK), MAX_PROGRAMS)
    partial = torch.zeros(programs, dtype=torch.int64, device=out.device)
    offsets = flat.to(device=out.device, dtype=torch.int64).contiguous()
    is_nan = isinstance(poison, float)
    s_block = max(SAMPLE_BLOCK, triton.next_power_of_2(max(1, offsets.numel())))  # one specialization

    def write() -> None:
        _count_poison[(programs,)](out, n, partial, 0 if is_nan else int(poison), IS_NAN=is_nan, BLOCK=BLOCK,
                                   num_warps=8)  # fmt: skip
        _write_row[(1,)](partial, programs, out, offsets, offsets.numel(), row, P_BLOCK=MAX_PROGRAMS,
                         S_BLOCK=s_block, num_warps=4)  # fmt: skip

    return write


_WARM: set[torch.dtype] = set()


def warm(outputs: tuple) -> None:
    """Compile both kernels for these outputs' dtypes now (on a few scratch elements), so that the first
    timed shape does not pay Triton's compile on the GPU's serial path."""
    for out in outputs:
        if type(out) is not torch.Tensor or out.dtype in _WARM or not out.is_cuda:  # no subclass's code runs here
            continue
        poison = poison_value(out.dtype)
        scratch = torch.zeros(16, dtype=out.dtype, device=out.device)
        if not covered(scratch, poison):
            continue
        row = torch.zeros(2, dtype=torch.float64, device=out.device)
        row_writer(scratch, poison, torch.zeros(1, dtype=torch.int64), row)()
        _WARM.add(out.dtype)
