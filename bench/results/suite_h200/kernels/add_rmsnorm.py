"""add_rmsnorm: Fused residual add + RMSNorm over the last dimension.

Exported by kernel-agent (python -m tools.export). Per-shape table over M, N: 19.26 us geomean
against 19.85 us for one config (+3.1%), measured on NVIDIA H200; run add_rmsnorm.

    from add_rmsnorm_kernel import launch   # or whatever this file is named
    outputs = launch(*inputs)              # the config the table picks for these shapes
    outputs = launch(*inputs, **config)    # any config of the search space, on baseline.py

Needs only torch and triton.
"""

import functools
import math
import torch
import triton
import triton.language as tl


# --------------------------------------------------------------------------------------------------
# from baseline.py (candidate ff398089a0ecce11)
# Fused residual add + RMSNorm: one row per program (ROWS rows in a loop), the whole row in one block.

EPS = 1e-6


@triton.jit
def add_rmsnorm_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, M, N, eps, ROWS: tl.constexpr, BLOCK_N: tl.constexpr
):
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    # w is shared by every row this program handles: load it once.
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    for i in range(ROWS):
        row = tl.program_id(0) * ROWS + i
        # A branch, not a mask: the last program's rows past M do nothing (and the interpreter
        # mishandles a scalar condition and-ed into a block mask).
        if row < M:
            offs = row.to(tl.int64) * N + cols
            x = tl.load(x_ptr + offs, mask=col_mask, other=0.0).to(tl.float32)
            r = tl.load(r_ptr + offs, mask=col_mask, other=0.0).to(tl.float32)
            # h is rounded to the storage dtype first: y is defined on the h that is written out.
            h = (x + r).to(h_ptr.dtype.element_ty)
            tl.store(h_ptr + offs, h, mask=col_mask)
            hf = h.to(tl.float32)
            rstd = tl.rsqrt(tl.sum(hf * hf, axis=0) / N + eps)
            tl.store(y_ptr + offs, (hf * rstd * w).to(y_ptr.dtype.element_ty), mask=col_mask)


def _launch_baseline(x, r, w, *, ROWS: int, num_warps: int):
    assert x.is_contiguous() and r.is_contiguous() and w.is_contiguous(), "x, r and w must be contiguous"
    M, N = x.shape
    assert r.shape == x.shape and w.shape == (N,), "expected x[M, N], r[M, N], w[N]"
    y = torch.empty_like(x)
    h = torch.empty_like(x)
    grid = (triton.cdiv(M, ROWS),)
    add_rmsnorm_kernel[grid](
        x, r, w, y, h, M, N, EPS,
        ROWS=ROWS, BLOCK_N=triton.next_power_of_2(N), num_warps=num_warps,
    )  # fmt: skip
    return y, h


# --------------------------------------------------------------------------------------------------
# from multirow.py (candidate 87a9192e284cea84)
# Fused residual add + RMSNorm: ROWS rows per program as one 2-D [ROWS, BLOCK_N] block.
#
# Unlike the baseline's row loop, all ROWS rows are loaded at once, so a program has ROWS times more
# independent loads in flight and w is fetched once for the whole tile.

EPS_multirow = 1e-6


@triton.jit
def add_rmsnorm_multirow_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, M, N, eps, ROWS: tl.constexpr, BLOCK_N: tl.constexpr
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    mask = (rows < M)[:, None] & col_mask[None, :]
    offs = rows.to(tl.int64)[:, None] * N + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    h = (x + r).to(h_ptr.dtype.element_ty)
    tl.store(h_ptr + offs, h, mask=mask)
    hf = h.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(hf * hf, axis=1) / N + eps)
    tl.store(y_ptr + offs, (hf * rstd[:, None] * w[None, :]).to(y_ptr.dtype.element_ty), mask=mask)


def _launch_multirow(x, r, w, *, ROWS: int, num_warps: int):
    assert x.is_contiguous() and r.is_contiguous() and w.is_contiguous(), "x, r and w must be contiguous"
    M, N = x.shape
    assert r.shape == x.shape and w.shape == (N,), "expected x[M, N], r[M, N], w[N]"
    y = torch.empty_like(x)
    h = torch.empty_like(x)
    grid = (triton.cdiv(M, ROWS),)
    add_rmsnorm_multirow_kernel[grid](
        x, r, w, y, h, M, N, EPS_multirow, ROWS=ROWS, BLOCK_N=triton.next_power_of_2(N), num_warps=num_warps
    )
    return y, h


# --------------------------------------------------------------------------------------------------
# Dispatch table, chosen offline from per-shape timings: a call takes the row nearest to its
# shape (log2 distance over M, N).
SHAPE_DIMS = {"M": (0, 0), "N": (0, 1)}  # dim -> (input index, axis)
DTYPE_INPUT = None  # the input whose dtype selects the rows (None: one dtype)
DEFAULT = ("baseline", {"ROWS": 1, "num_warps": 8})  # the best single config
DISPATCH = [
    {"when": {"M": 1, "N": 4096}, "dtype": "bfloat16", "source": "baseline", "config": {"ROWS": 1, "num_warps": 8}},
    {"when": {"M": 1, "N": 8192}, "dtype": "bfloat16", "source": "baseline", "config": {"ROWS": 1, "num_warps": 8}},
    {"when": {"M": 32, "N": 4096}, "dtype": "bfloat16", "source": "multirow", "config": {"ROWS": 1, "num_warps": 32}},
    {"when": {"M": 32, "N": 8192}, "dtype": "bfloat16", "source": "baseline", "config": {"ROWS": 1, "num_warps": 4}},
    {"when": {"M": 256, "N": 4096}, "dtype": "bfloat16", "source": "baseline", "config": {"ROWS": 1, "num_warps": 4}},
    {"when": {"M": 256, "N": 8192}, "dtype": "bfloat16", "source": "baseline", "config": {"ROWS": 1, "num_warps": 16}},
    {"when": {"M": 4096, "N": 4096}, "dtype": "bfloat16", "source": "baseline", "config": {"ROWS": 1, "num_warps": 4}},
    {"when": {"M": 4096, "N": 8192}, "dtype": "bfloat16", "source": "multirow", "config": {"ROWS": 2, "num_warps": 8}},
    {"when": {"M": 16384, "N": 4096}, "dtype": "bfloat16", "source": "baseline", "config": {"ROWS": 1, "num_warps": 4}},
    {"when": {"M": 16384, "N": 8192}, "dtype": "bfloat16", "source": "baseline", "config": {"ROWS": 1, "num_warps": 32}},
]


def _dims(*inputs):
    return tuple((dim, inputs[i].shape[axis]) for dim, (i, axis) in SHAPE_DIMS.items())


@functools.lru_cache(maxsize=4096)
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


def launch(*inputs, **config):
    """Run the kernel with the config the table picks, or with ``config`` (every key) on the
    single config's source when given."""
    source, chosen = (DEFAULT[0], config) if config else choose(*inputs)
    if source == "multirow":
        return _launch_multirow(*inputs, **chosen)
    return _launch_baseline(*inputs, **chosen)
