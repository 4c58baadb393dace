"""softmax: Row softmax over the last dimension: y[i, :] = exp(x[i, :] - max(x[i, :])) / sum(exp(x[i, :] - max(x[i, :]))), computed in fp32 and stored in the input dtype (float32 or bfloat16).

Exported by kernel-agent (python -m tools.export). Per-shape table over M, N: 54.05 us geomean
against 111.94 us for one config (+107.1%), measured on NVIDIA H200; run softmax.

    from softmax_kernel import launch   # or whatever this file is named
    outputs = launch(*inputs)              # the config the table picks for these shapes
    outputs = launch(*inputs, **config)    # any config of the search space, on baseline.py

Needs only torch and triton. Host cost: the config for a shape and dtype is chosen on the first call
there and bound to its launcher; every later call at that shape and dtype is one dict lookup away
from the kernel's own launcher. ``launcher_for(*inputs)`` returns that bound launcher, to call it
directly.

Without a GPU: set TRITON_INTERPRET=1 in the environment before triton is first imported
(``TRITON_INTERPRET=1 python app.py``: Triton reads it when kernels are defined) and pass CPU
tensors; the kernels then run in Triton's interpreter, correct but slow (small shapes only).

In a CUDA graph: call ``launch(*inputs)`` once outside the capture (Triton compiles the kernels),
then capture one call per shape. The config is chosen at capture time; a replay reruns the captured
kernels on the same input and output buffers:

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = launch(*inputs)
    graph.replay()   # after refilling the inputs in place; outputs holds the results

Under torch.compile: ``torch.compiler.disable(launch)`` keeps the call out of the graph (a graph
break; it then runs eagerly, as here). Dynamo also traces Python code that launches Triton kernels
(PyTorch >= 2.3), so ``launch`` can be called inside a compiled function as it is. To give the op a
schema other PyTorch subsystems understand, wrap it in ``torch.library.custom_op`` (opaque to the
compiler; it needs a fake implementation giving the outputs' shapes). In Triton's interpreter only
the disabled form works: Dynamo cannot trace interpreted kernels.
"""

import functools
import math

import torch
import triton
import triton.language as tl

# --------------------------------------------------------------------------------------------------
# from baseline.py (candidate 48974053d93a9f0f)
# Row softmax, the tutorial kernel: one row per program, the whole row in one block.

@triton.jit
def softmax_kernel(x_ptr, y_ptr, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=float("-inf")).to(tl.float32)
    num = tl.exp(x - tl.max(x, axis=0))
    y = num / tl.sum(num, axis=0)
    tl.store(y_ptr + row * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch_baseline(x, *, num_warps: int):
    assert x.is_contiguous(), "x must be contiguous"
    M, N = x.shape
    y = torch.empty_like(x)
    softmax_kernel[(M,)](x, y, N, BLOCK_N=triton.next_power_of_2(N), num_warps=num_warps)
    return y


# --------------------------------------------------------------------------------------------------
# from split_row.py (candidate 40dd2f5a1053a54c)
# Row softmax split across programs: for few long rows (M = 1), SPLITS programs share each row.
#
# Kernel 1: each (row, split) program reduces its CHUNK of the row to a partial (max, sum).
# Kernel 2: each (row, split) program combines the row's SPLITS partials into the row's max and sum
# and writes its chunk of exp(x - max) / sum, re-reading x (mostly from L2). With M rows the grid is
# M x SPLITS, so even one row keeps the SMs busy.

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


def _launch_split_row(x, *, SPLITS: int, BLOCK_N: int, num_warps: int):
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


# --------------------------------------------------------------------------------------------------
# from multirow.py (candidate 6be4fed4ac432744)
# Row softmax, ROWS short rows per program as one 2-D [ROWS, BLOCK_N] block.
#
# For rows of a few thousand elements one row per program leaves each program with little to load; ROWS
# rows at once put ROWS times more independent loads in flight per program (the row stays in registers,
# so keep ROWS * BLOCK_N modest: long rows belong to the baseline or online.py).

LOG2E_multirow = tl.constexpr(1.4426950408889634)  # kernels may only read constexpr globals


@triton.jit
def softmax_multirow_kernel(x_ptr, y_ptr, M, N, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    row_mask = rows < M
    mask = row_mask[:, None] & (cols < N)[None, :]
    offs = rows.to(tl.int64)[:, None] * N + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
    # Rows past M are all -inf (never stored): a 0 max and a unit sum keep their lanes finite.
    m = tl.where(row_mask, tl.max(x, axis=1), 0.0)
    num = tl.exp2((x - m[:, None]) * LOG2E_multirow)
    y = num / tl.where(row_mask, tl.sum(num, axis=1), 1.0)[:, None]
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch_multirow(x, *, ROWS: int, num_warps: int):
    assert x.is_contiguous(), "x must be contiguous"
    M, N = x.shape
    y = torch.empty_like(x)
    softmax_multirow_kernel[(triton.cdiv(M, ROWS),)](
        x, y, M, N, ROWS=ROWS, BLOCK_N=triton.next_power_of_2(N), num_warps=num_warps
    )
    return y


# --------------------------------------------------------------------------------------------------
# from online.py (candidate 7863e7db46edff39)
# Row softmax with a looped online softmax: rows of any length in BLOCK_N tiles, nothing spills.
#
# Pass 1 keeps a running max (a scalar; the sum is rescaled when it grows) and per-lane running sums;
# pass 2 re-reads the row, last tile first, and writes exp(x - max) / sum. One exp per element per pass;
# in both passes the next tile's loads are issued before the current tile's math.
# The re-read is cheap only while the row is still in L2, so at most PROGRAMS programs run, each
# looping over rows: fewer rows in flight, a smaller working set (132 is the H200's SM count; a value
# above M gives one row per program).

LOG2E_online = tl.constexpr(1.4426950408889634)  # kernels may only read constexpr globals


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
            s = s * tl.exp2((m - m_new) * LOG2E_online) + tl.exp2((x - m_new) * LOG2E_online)
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
                y_row + idx, (tl.exp2((x - m) * LOG2E_online) * inv_sum).to(y_ptr.dtype.element_ty), mask=idx < N
            )


def _launch_online(x, *, BLOCK_N: int, PROGRAMS: int, num_warps: int):
    assert x.is_contiguous(), "x must be contiguous"
    M, N = x.shape
    y = torch.empty_like(x)
    softmax_online_kernel[(min(M, PROGRAMS),)](x, y, M, N, BLOCK_N=BLOCK_N, num_warps=num_warps)
    return y


# --------------------------------------------------------------------------------------------------
# Dispatch table, chosen offline from per-shape timings: a call takes the row nearest to its
# shape (log2 distance over M, N) among the rows of its dtype.
SHAPE_DIMS = {"M": (0, 0), "N": (0, 1)}  # dim -> (input index, axis)
DTYPE_INPUT = 0  # the input whose dtype selects the rows (None: one dtype)
DEFAULT = ("baseline", {"num_warps": 16})  # the best single config
DISPATCH = [
    {"when": {"M": 1, "N": 131072}, "dtype": "bfloat16", "source": "split_row", "config": {"SPLITS": 32, "BLOCK_N": 4096, "num_warps": 4}},
    {"when": {"M": 32, "N": 32768}, "dtype": "bfloat16", "source": "multirow", "config": {"ROWS": 1, "num_warps": 16}},
    {"when": {"M": 2048, "N": 131072}, "dtype": "bfloat16", "source": "online", "config": {"BLOCK_N": 16384, "PROGRAMS": 528, "num_warps": 32}},
    {"when": {"M": 4096, "N": 4096}, "dtype": "bfloat16", "source": "baseline", "config": {"num_warps": 8}},
    {"when": {"M": 8192, "N": 32768}, "dtype": "bfloat16", "source": "online", "config": {"BLOCK_N": 8192, "PROGRAMS": 65536, "num_warps": 16}},
    {"when": {"M": 1, "N": 131072}, "dtype": "float32", "source": "split_row", "config": {"SPLITS": 128, "BLOCK_N": 1024, "num_warps": 16}},
    {"when": {"M": 32, "N": 32768}, "dtype": "float32", "source": "baseline", "config": {"num_warps": 16}},
    {"when": {"M": 2048, "N": 131072}, "dtype": "float32", "source": "online", "config": {"BLOCK_N": 16384, "PROGRAMS": 528, "num_warps": 32}},
    {"when": {"M": 4096, "N": 4096}, "dtype": "float32", "source": "baseline", "config": {"num_warps": 4}},
    {"when": {"M": 8192, "N": 32768}, "dtype": "float32", "source": "multirow", "config": {"ROWS": 1, "num_warps": 16}},
]
_LAUNCHERS = {
    "baseline": _launch_baseline,
    "split_row": _launch_split_row,
    "multirow": _launch_multirow,
    "online": _launch_online,
}
_BOUND = {}  # (input shapes, dtype) -> the chosen launcher with its config bound in


def _dims(*inputs):
    return tuple((dim, inputs[i].shape[axis]) for dim, (i, axis) in SHAPE_DIMS.items())


def _pick(dims, dtype):
    best, best_distance = -1, math.inf
    for n, row in enumerate(DISPATCH):
        if DTYPE_INPUT is not None and row["dtype"] != dtype:
            continue
        distance = sum((math.log2(max(size, 1)) - math.log2(row["when"][dim])) ** 2 for dim, size in dims)
        if distance < best_distance:
            best, best_distance = n, distance
    return best


def choose(*inputs):
    """(source tag, config) the table picks for these inputs."""
    dtype = str(inputs[DTYPE_INPUT].dtype).removeprefix("torch.") if DTYPE_INPUT is not None else ""
    n = _pick(_dims(*inputs), dtype)
    if n < 0:
        return DEFAULT[0], dict(DEFAULT[1])
    return DISPATCH[n]["source"], dict(DISPATCH[n]["config"])


def launcher_for(*inputs):
    """The launcher ``launch(*inputs)`` calls for these inputs, with the chosen config bound in
    (chosen on the first call at their shapes and dtype, then cached)."""
    key = (inputs[0].shape, inputs[0].dtype)
    bound = _BOUND.get(key)
    if bound is None:
        source, config = choose(*inputs)
        bound = _BOUND[key] = functools.partial(_LAUNCHERS[source], **config)
    return bound


# --------------------------------------------------------------------------------------------------
# The hot path: one dict lookup by shape and dtype, once the launcher is bound for them.
def launch(*inputs, **config):
    """Run the kernel with the config the table picks, or with ``config`` (every key) on the
    single config's source when given."""
    if config:
        return _launch_baseline(*inputs, **config)
    bound = _BOUND.get((inputs[0].shape, inputs[0].dtype))
    if bound is None:
        bound = launcher_for(*inputs)
    return bound(*inputs)
