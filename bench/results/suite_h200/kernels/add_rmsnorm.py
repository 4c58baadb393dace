"""add_rmsnorm: Fused residual add + RMSNorm over the last dimension.

Exported by kernel-agent (python -m tools.export). Config baseline.py {"ROWS": 1, "num_warps": 8}:
19.52 us geomean over 10 shapes on NVIDIA H200; run add_rmsnorm.

    from add_rmsnorm_kernel import launch   # or whatever this file is named
    outputs = launch(*inputs)              # the exported config
    outputs = launch(*inputs, **config)    # any config of the search space, on baseline.py

Needs only torch and triton. Host cost: the config is bound to the kernel's own launcher once, at
import. ``launcher_for(*inputs)`` returns that bound launcher, to call it directly.

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
# The exported config (baseline.py), bound to its launcher once.
CONFIG = {"ROWS": 1, "num_warps": 8}
_BOUND = functools.partial(_launch_baseline, **CONFIG)


def launcher_for(*inputs):
    """The launcher ``launch(*inputs)`` calls: the kernel's own with CONFIG bound in."""
    return _BOUND


# --------------------------------------------------------------------------------------------------
# The hot path: the launcher with CONFIG bound in.
def launch(*inputs, **config):
    """Run the kernel with the exported config, or with ``config`` (every key) when given."""
    if config:
        return _launch_baseline(*inputs, **config)
    return _BOUND(*inputs)
