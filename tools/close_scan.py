"""The judge's common-case comparison on the GPU: is every element of an output finite and within
tolerance? Two small Triton kernels instead of torch's casts, differences, bounds, reductions and stacks
(about eighteen operations per output).

Every torch operation in the judge hands its GIL over and waits to get it back, and the judge's threads
(one per candidate being checked) queue for it: the operations of the close test, not their GPU work,
were most of the judge's own seconds per candidate. One scan here is three operations: a launch, a
second launch, a read-back.

The statistics are the ones ``tools.compare`` takes from its torch scan: how many elements are not close
(a NaN never is), the sums of squares of the expected values and of the differences (in float64, not
finite when an expected value is not), the largest difference and its first position. Differences and
bounds are computed in float32 for 16-bit outputs and in float64 otherwise, as the torch scan does;
rtol and atol arrive as float32 (a hair below their float64 values), so this test is never looser than
the torch scan's and anything it does not call close goes to the full scan, which says what is wrong.
"""

from __future__ import annotations

import threading

import torch
import triton
import triton.language as tl

BLOCK = 2048
MAX_PROGRAMS = 1024  # partial rows per scan; the second kernel reduces them in one block
FIELDS = 5  # not close, sum e^2, sum d^2, largest d, its position
_FIELDS = tl.constexpr(FIELDS)
_COVERED = {torch.float16, torch.bfloat16, torch.float32, torch.float64}


@triton.jit(do_not_specialize=["n", "rtol", "atol"])
def _partials(g_ptr, e_ptr, n, rtol, atol, part_ptr, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0).to(tl.int64) * BLOCK
    lanes = tl.arange(0, BLOCK)
    far = tl.zeros([BLOCK], dtype=tl.int32)
    e_sq = tl.zeros([BLOCK], dtype=tl.float64)
    d_sq = tl.zeros([BLOCK], dtype=tl.float64)
    top = tl.full([BLOCK], -1.0, dtype=tl.float64)
    top_at = tl.zeros([BLOCK], dtype=tl.int64)
    for base in range(pid.to(tl.int64) * BLOCK, n, step):
        offs = base + lanes
        inside = offs < n
        g = tl.load(g_ptr + offs, mask=inside, other=0)
        e = tl.load(e_ptr + offs, mask=inside, other=0)
        if WIDE:
            g, e = g.to(tl.float64), e.to(tl.float64)
        else:
            g, e = g.to(tl.float32), e.to(tl.float32)
        d = tl.abs(g - e)
        close = d <= atol + rtol * tl.abs(e)  # NaN: False
        far += (inside & ~close).to(tl.int32)
        e_wide, d_wide = e.to(tl.float64), d.to(tl.float64)
        e_sq += e_wide * e_wide
        d_sq += d_wide * d_wide
        larger = d_wide > top  # NaN: False (a scan with a NaN is not close anyway)
        top = tl.where(larger, d_wide, top)
        top_at = tl.where(larger, offs, top_at)
    largest = tl.max(top, axis=0)
    first = tl.min(tl.where(top == largest, top_at, n), axis=0)
    row = part_ptr + pid * _FIELDS
    tl.store(row, tl.sum(far, axis=0).to(tl.float64))
    tl.store(row + 1, tl.sum(e_sq, axis=0))
    tl.store(row + 2, tl.sum(d_sq, axis=0))
    tl.store(row + 3, largest)
    tl.store(row + 4, first.to(tl.float64))


@triton.jit(do_not_specialize=["n_part"])
def _reduce(part_ptr, n_part, out_ptr, P_BLOCK: tl.constexpr):
    p = tl.arange(0, P_BLOCK)
    taken = p < n_part
    rows = part_ptr + p * _FIELDS
    tl.store(out_ptr, tl.sum(tl.load(rows, mask=taken, other=0.0), axis=0))
    tl.store(out_ptr + 1, tl.sum(tl.load(rows + 1, mask=taken, other=0.0), axis=0))
    tl.store(out_ptr + 2, tl.sum(tl.load(rows + 2, mask=taken, other=0.0), axis=0))
    tops = tl.load(rows + 3, mask=taken, other=-1.0)
    largest = tl.max(tops, axis=0)
    ats = tl.load(rows + 4, mask=taken, other=0.0)
    tl.store(out_ptr + 3, largest)
    tl.store(out_ptr + 4, tl.min(tl.where(taken & (tops == largest), ats, 1.0e300), axis=0))


_scratch = threading.local()  # per judge thread: partial rows and the result, reused scan after scan
_broken: list[str] = []  # why the kernels could not be compiled here: torch's scan then does every comparison


def covered(got: torch.Tensor, expected: torch.Tensor) -> bool:
    """Scans this module does: two contiguous non-empty GPU tensors of one floating dtype and size."""
    return (
        not _broken
        and got.is_cuda
        and expected.device == got.device
        and got.dtype == expected.dtype
        and got.dtype in _COVERED
        and got.is_contiguous()
        and expected.is_contiguous()
        and 0 < got.numel() == expected.numel()
    )


def stats(got: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> list[float]:
    """[elements not close, sum of e^2, sum of (g-e)^2, largest |g-e|, its flat position] of a covered pair."""
    n = got.numel()
    programs = min(triton.cdiv(n, BLOCK), MAX_PROGRAMS)
    part, out = _buffers(got.device)
    wide = got.element_size() > 2
    _partials[(programs,)](got, expected, n, rtol, atol, part, WIDE=wide, BLOCK=BLOCK, num_warps=8)
    _reduce[(1,)](part, programs, out, P_BLOCK=MAX_PROGRAMS, num_warps=4)
    return out.tolist()


def _buffers(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    held = getattr(_scratch, "by_device", None)
    if held is None:
        held = _scratch.by_device = {}
    if device not in held:
        held[device] = (
            torch.empty(MAX_PROGRAMS * FIELDS, dtype=torch.float64, device=device),
            torch.empty(FIELDS, dtype=torch.float64, device=device),
        )
    return held[device]


def warm(dtypes: set[torch.dtype], device: torch.device | str) -> str | None:
    """Compile the kernels for these dtypes now, on a few elements, instead of in the first checks. A
    failure turns them off (torch's scan compares everything) and is returned, for the judge's log."""
    try:
        for dtype in dtypes & _COVERED:
            scratch = torch.ones(4, dtype=dtype, device=device)
            if stats(scratch, scratch, 0.0, 0.0) != [0.0, 4.0, 0.0, 0.0, 0.0]:
                raise RuntimeError(f"the close scan of four ones in {dtype} came out wrong")
    except Exception as exc:  # noqa: BLE001 - any failure here only costs speed
        _broken.append(f"{type(exc).__name__}: {exc}")
        return _broken[-1]
    return None
