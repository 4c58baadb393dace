"""16_ScaledDotProductAttention: Multi-head attention core without projections: softmax(q k^T / sqrt(d)) v.

q, k, v are [batch, heads, seq, head_dim]; no mask, no dropout.

Exported by kernel-agent (python -m tools.export). Config inductor.py {"R0_BLOCK_SCALE": 1,
"XBLOCK_SCALE": 4, "WARPS_SCALE": 1}: 1503.36 us geomean over 3 shapes on NVIDIA H200; run
16_ScaledDotProductAttention.

    from 16_ScaledDotProductAttention_kernel import launch   # or whatever this file is named
    outputs = launch(*inputs)              # the exported config
    outputs = launch(*inputs, **config)    # any config of the search space, on inductor.py

Needs only torch and triton. Host cost: the config is bound to the kernel's own launcher once, at
import; once two calls at a signature (the inputs' shapes, strides, dtypes and alignment, the other
arguments' values) have done the same, later calls there allocate the same outputs and launch the
same compiled kernels directly, without Triton's per-call dispatch (``Replayed`` below says when a
call stays on the launcher). ``launcher_for(*inputs)`` returns that bound launcher, to call it
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

from triton.language.extra import libdevice
import torch
import triton
import triton.language as tl

# --------------------------------------------------------------------------------------------------
# from inductor.py (candidate edf076567d82c65c)
# Inductor's Triton for 16_ScaledDotProductAttention (torch.compile mode triton-gemm), as a candidate.
#
# Kernels per shape (dynamic=False: sizes and strides are literals in them) for {"batch_size": 8, "heads": 16, "seq_len": 1024, "head_dim": 64}, {"batch_size": 4, "heads": 16, "seq_len": 1024, "head_dim": 64}, {"batch_size": 16, "heads": 16, "seq_len": 1024, "head_dim": 64}, {"batch_size": 1, "heads": 1, "seq_len": 1, "head_dim": 1}, {"batch_size": 1, "heads": 4, "seq_len": 8, "head_dim": 8}, {"batch_size": 4, "heads": 4, "seq_len": 8, "head_dim": 8}, {"batch_size": 5, "heads": 5, "seq_len": 9, "head_dim": 9};
# launch() picks them by the inputs' shapes, strides and dtypes. Any other shape runs Inductor's general kernels (dynamic=True, traced at {"batch_size": 8, "heads": 16, "seq_len": 1024, "head_dim": 64}), which check Inductor's shape guards first.
# Config: scale factors on Inductor's own block sizes and warps (1 everywhere is torch.compile's kernel).

@triton.jit
def inductor_promote_to_tensor(x):
    return x + tl.zeros((1,), tl.int1)


@triton.jit
def inductor_is_floating(x):
    return inductor_promote_to_tensor(x).dtype.is_floating()


@triton.jit
def inductor_maximum(a, b):
    pick_a = a > b
    if inductor_is_floating(a):
        pick_a |= a != a
    return tl.where(pick_a, a, b)


@triton.jit
def inductor_max2(a, dim):
    return tl.reduce(a, dim, inductor_maximum)


@triton.jit
def triton_tem_fused_bmm_transpose_view_0_s0(arg_A, arg_B, out_ptr0):
    EVEN_K: tl.constexpr = True
    USE_FAST_ACCUM: tl.constexpr = False
    ACC_TYPE: tl.constexpr = tl.float32
    BLOCK_M: tl.constexpr = 64
    BLOCK_N: tl.constexpr = 128
    BLOCK_K: tl.constexpr = 32
    GROUP_M: tl.constexpr = 8
    ALLOW_TF32: tl.constexpr = False
    INDEX_DTYPE: tl.constexpr = tl.int32
    A = arg_A
    B = arg_B
    M = 1024
    N = 1024
    K = 64
    stride_aq = 65536
    stride_am = 64
    stride_ak = 1
    stride_bq = 65536
    stride_bk = 1
    stride_bn = 64
    pid = tl.program_id(0).to(INDEX_DTYPE)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + pid % group_size
    pid_n = pid % width // group_size
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if stride_am == 1 and stride_ak == M or (stride_am == K and stride_ak == 1):
        ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        ram = rm % M
    if stride_bk == 1 and stride_bn == K or (stride_bk == N and stride_bn == 1):
        rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        rbn = rn % N
    rk = tl.arange(0, BLOCK_K)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    A = A + (ram[:, None] * stride_am + rk[None, :] * stride_ak + idx_q * stride_aq)
    B = B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn + idx_q * stride_bq)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k in range(K, 0, -BLOCK_K):
        if EVEN_K:
            a = tl.load(A)
            b = tl.load(B)
        else:
            a = tl.load(A, mask=rk[None, :] < k, other=0.0)
            b = tl.load(B, mask=rk[:, None] < k, other=0.0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32)
        A += BLOCK_K * stride_ak
        B += BLOCK_K * stride_bk
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    xindex = idx_n + 1024 * idx_m + 1048576 * idx_q
    tl.store(out_ptr0 + tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N]), acc, mask)


@triton.jit
def triton_per_fused__softmax_amax_div_mul_sub_view_1_s0(in_out_ptr0, xnumel, r0_numel, XBLOCK: tl.constexpr):
    xnumel = 131072
    r0_numel = 1024
    R0_BLOCK: tl.constexpr = 1024
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
    roffset = r0_offset
    rindex = r0_index
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_out_ptr0 + (r0_1 + 1024 * x0), None)
    tmp1 = tl.full([1, 1], 1.0, tl.float32)
    tmp2 = tmp0 * tmp1
    tmp3 = tl.broadcast_to(tmp2, [XBLOCK, R0_BLOCK])
    tmp5 = inductor_max2(tmp3, 1)[:, None].to(tl.float32)
    tmp6 = tmp2 - tmp5
    tmp7 = tl.full([1, 1], 0.125, tl.float32)
    tmp8 = tmp6 * tmp7
    tmp9 = libdevice.exp(tmp8)
    tmp10 = tl.broadcast_to(tmp9, [XBLOCK, R0_BLOCK])
    tmp12 = tl.sum(tmp10, 1)[:, None].to(tl.float32)
    tmp13 = tmp9 / tmp12
    tl.store(in_out_ptr0 + (r0_1 + 1024 * x0), tmp13, None)


@triton.jit
def triton_tem_fused__softmax_bmm_div_mul_sub_view_2_s0(arg_A, arg_B, out_ptr0):
    EVEN_K: tl.constexpr = True
    USE_FAST_ACCUM: tl.constexpr = False
    ACC_TYPE: tl.constexpr = tl.float32
    BLOCK_M: tl.constexpr = 128
    BLOCK_N: tl.constexpr = 64
    BLOCK_K: tl.constexpr = 32
    GROUP_M: tl.constexpr = 8
    ALLOW_TF32: tl.constexpr = False
    INDEX_DTYPE: tl.constexpr = tl.int32
    A = arg_A
    B = arg_B
    M = 1024
    N = 64
    K = 1024
    stride_aq = 1048576
    stride_am = 1024
    stride_ak = 1
    stride_bq = 65536
    stride_bk = 64
    stride_bn = 1
    pid = tl.program_id(0).to(INDEX_DTYPE)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + pid % group_size
    pid_n = pid % width // group_size
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if stride_am == 1 and stride_ak == M or (stride_am == K and stride_ak == 1):
        ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        ram = rm % M
    if stride_bk == 1 and stride_bn == K or (stride_bk == N and stride_bn == 1):
        rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        rbn = rn % N
    rk = tl.arange(0, BLOCK_K)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    A = A + (ram[:, None] * stride_am + rk[None, :] * stride_ak + idx_q * stride_aq)
    B = B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn + idx_q * stride_bq)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k in range(K, 0, -BLOCK_K):
        if EVEN_K:
            a = tl.load(A)
            b = tl.load(B)
        else:
            a = tl.load(A, mask=rk[None, :] < k, other=0.0)
            b = tl.load(B, mask=rk[:, None] < k, other=0.0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32)
        A += BLOCK_K * stride_ak
        B += BLOCK_K * stride_bk
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    xindex = idx_n + 64 * idx_m + 65536 * idx_q
    tl.store(out_ptr0 + tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N]), acc, mask)


@triton.jit
def triton_tem_fused_bmm_transpose_view_0_s1(arg_A, arg_B, out_ptr0):
    EVEN_K: tl.constexpr = True
    USE_FAST_ACCUM: tl.constexpr = False
    ACC_TYPE: tl.constexpr = tl.float32
    BLOCK_M: tl.constexpr = 64
    BLOCK_N: tl.constexpr = 128
    BLOCK_K: tl.constexpr = 32
    GROUP_M: tl.constexpr = 8
    ALLOW_TF32: tl.constexpr = False
    INDEX_DTYPE: tl.constexpr = tl.int32
    A = arg_A
    B = arg_B
    M = 1024
    N = 1024
    K = 64
    stride_aq = 65536
    stride_am = 64
    stride_ak = 1
    stride_bq = 65536
    stride_bk = 1
    stride_bn = 64
    pid = tl.program_id(0).to(INDEX_DTYPE)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + pid % group_size
    pid_n = pid % width // group_size
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if stride_am == 1 and stride_ak == M or (stride_am == K and stride_ak == 1):
        ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        ram = rm % M
    if stride_bk == 1 and stride_bn == K or (stride_bk == N and stride_bn == 1):
        rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        rbn = rn % N
    rk = tl.arange(0, BLOCK_K)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    A = A + (ram[:, None] * stride_am + rk[None, :] * stride_ak + idx_q * stride_aq)
    B = B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn + idx_q * stride_bq)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k in range(K, 0, -BLOCK_K):
        if EVEN_K:
            a = tl.load(A)
            b = tl.load(B)
        else:
            a = tl.load(A, mask=rk[None, :] < k, other=0.0)
            b = tl.load(B, mask=rk[:, None] < k, other=0.0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32)
        A += BLOCK_K * stride_ak
        B += BLOCK_K * stride_bk
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    xindex = idx_n + 1024 * idx_m + 1048576 * idx_q
    tl.store(out_ptr0 + tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N]), acc, mask)


@triton.jit
def triton_per_fused__softmax_amax_div_mul_sub_view_1_s1(in_out_ptr0, xnumel, r0_numel, XBLOCK: tl.constexpr):
    xnumel = 65536
    r0_numel = 1024
    R0_BLOCK: tl.constexpr = 1024
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
    roffset = r0_offset
    rindex = r0_index
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_out_ptr0 + (r0_1 + 1024 * x0), None)
    tmp1 = tl.full([1, 1], 1.0, tl.float32)
    tmp2 = tmp0 * tmp1
    tmp3 = tl.broadcast_to(tmp2, [XBLOCK, R0_BLOCK])
    tmp5 = inductor_max2(tmp3, 1)[:, None].to(tl.float32)
    tmp6 = tmp2 - tmp5
    tmp7 = tl.full([1, 1], 0.125, tl.float32)
    tmp8 = tmp6 * tmp7
    tmp9 = libdevice.exp(tmp8)
    tmp10 = tl.broadcast_to(tmp9, [XBLOCK, R0_BLOCK])
    tmp12 = tl.sum(tmp10, 1)[:, None].to(tl.float32)
    tmp13 = tmp9 / tmp12
    tl.store(in_out_ptr0 + (r0_1 + 1024 * x0), tmp13, None)


@triton.jit
def triton_tem_fused__softmax_bmm_div_mul_sub_view_2_s1(arg_A, arg_B, out_ptr0):
    EVEN_K: tl.constexpr = True
    USE_FAST_ACCUM: tl.constexpr = False
    ACC_TYPE: tl.constexpr = tl.float32
    BLOCK_M: tl.constexpr = 128
    BLOCK_N: tl.constexpr = 64
    BLOCK_K: tl.constexpr = 32
    GROUP_M: tl.constexpr = 8
    ALLOW_TF32: tl.constexpr = False
    INDEX_DTYPE: tl.constexpr = tl.int32
    A = arg_A
    B = arg_B
    M = 1024
    N = 64
    K = 1024
    stride_aq = 1048576
    stride_am = 1024
    stride_ak = 1
    stride_bq = 65536
    stride_bk = 64
    stride_bn = 1
    pid = tl.program_id(0).to(INDEX_DTYPE)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + pid % group_size
    pid_n = pid % width // group_size
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if stride_am == 1 and stride_ak == M or (stride_am == K and stride_ak == 1):
        ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        ram = rm % M
    if stride_bk == 1 and stride_bn == K or (stride_bk == N and stride_bn == 1):
        rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        rbn = rn % N
    rk = tl.arange(0, BLOCK_K)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    A = A + (ram[:, None] * stride_am + rk[None, :] * stride_ak + idx_q * stride_aq)
    B = B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn + idx_q * stride_bq)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k in range(K, 0, -BLOCK_K):
        if EVEN_K:
            a = tl.load(A)
            b = tl.load(B)
        else:
            a = tl.load(A, mask=rk[None, :] < k, other=0.0)
            b = tl.load(B, mask=rk[:, None] < k, other=0.0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32)
        A += BLOCK_K * stride_ak
        B += BLOCK_K * stride_bk
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    xindex = idx_n + 64 * idx_m + 65536 * idx_q
    tl.store(out_ptr0 + tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N]), acc, mask)


@triton.jit
def triton_tem_fused_bmm_transpose_view_0_s2(arg_A, arg_B, out_ptr0):
    EVEN_K: tl.constexpr = True
    USE_FAST_ACCUM: tl.constexpr = False
    ACC_TYPE: tl.constexpr = tl.float32
    BLOCK_M: tl.constexpr = 64
    BLOCK_N: tl.constexpr = 128
    BLOCK_K: tl.constexpr = 32
    GROUP_M: tl.constexpr = 8
    ALLOW_TF32: tl.constexpr = False
    INDEX_DTYPE: tl.constexpr = tl.int32
    A = arg_A
    B = arg_B
    M = 1024
    N = 1024
    K = 64
    stride_aq = 65536
    stride_am = 64
    stride_ak = 1
    stride_bq = 65536
    stride_bk = 1
    stride_bn = 64
    pid = tl.program_id(0).to(INDEX_DTYPE)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + pid % group_size
    pid_n = pid % width // group_size
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if stride_am == 1 and stride_ak == M or (stride_am == K and stride_ak == 1):
        ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        ram = rm % M
    if stride_bk == 1 and stride_bn == K or (stride_bk == N and stride_bn == 1):
        rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        rbn = rn % N
    rk = tl.arange(0, BLOCK_K)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    A = A + (ram[:, None] * stride_am + rk[None, :] * stride_ak + idx_q * stride_aq)
    B = B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn + idx_q * stride_bq)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k in range(K, 0, -BLOCK_K):
        if EVEN_K:
            a = tl.load(A)
            b = tl.load(B)
        else:
            a = tl.load(A, mask=rk[None, :] < k, other=0.0)
            b = tl.load(B, mask=rk[:, None] < k, other=0.0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32)
        A += BLOCK_K * stride_ak
        B += BLOCK_K * stride_bk
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    xindex = idx_n + 1024 * idx_m + 1048576 * idx_q
    tl.store(out_ptr0 + tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N]), acc, mask)


@triton.jit
def triton_per_fused__softmax_amax_div_mul_sub_view_1_s2(in_out_ptr0, xnumel, r0_numel, XBLOCK: tl.constexpr):
    xnumel = 262144
    r0_numel = 1024
    R0_BLOCK: tl.constexpr = 1024
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
    roffset = r0_offset
    rindex = r0_index
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_out_ptr0 + (r0_1 + 1024 * x0), None)
    tmp1 = tl.full([1, 1], 1.0, tl.float32)
    tmp2 = tmp0 * tmp1
    tmp3 = tl.broadcast_to(tmp2, [XBLOCK, R0_BLOCK])
    tmp5 = inductor_max2(tmp3, 1)[:, None].to(tl.float32)
    tmp6 = tmp2 - tmp5
    tmp7 = tl.full([1, 1], 0.125, tl.float32)
    tmp8 = tmp6 * tmp7
    tmp9 = libdevice.exp(tmp8)
    tmp10 = tl.broadcast_to(tmp9, [XBLOCK, R0_BLOCK])
    tmp12 = tl.sum(tmp10, 1)[:, None].to(tl.float32)
    tmp13 = tmp9 / tmp12
    tl.store(in_out_ptr0 + (r0_1 + 1024 * x0), tmp13, None)


@triton.jit
def triton_tem_fused__softmax_bmm_div_mul_sub_view_2_s2(arg_A, arg_B, out_ptr0):
    EVEN_K: tl.constexpr = True
    USE_FAST_ACCUM: tl.constexpr = False
    ACC_TYPE: tl.constexpr = tl.float32
    BLOCK_M: tl.constexpr = 64
    BLOCK_N: tl.constexpr = 64
    BLOCK_K: tl.constexpr = 64
    GROUP_M: tl.constexpr = 8
    ALLOW_TF32: tl.constexpr = False
    INDEX_DTYPE: tl.constexpr = tl.int32
    A = arg_A
    B = arg_B
    M = 1024
    N = 64
    K = 1024
    stride_aq = 1048576
    stride_am = 1024
    stride_ak = 1
    stride_bq = 65536
    stride_bk = 64
    stride_bn = 1
    pid = tl.program_id(0).to(INDEX_DTYPE)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + pid % group_size
    pid_n = pid % width // group_size
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if stride_am == 1 and stride_ak == M or (stride_am == K and stride_ak == 1):
        ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        ram = rm % M
    if stride_bk == 1 and stride_bn == K or (stride_bk == N and stride_bn == 1):
        rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        rbn = rn % N
    rk = tl.arange(0, BLOCK_K)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    A = A + (ram[:, None] * stride_am + rk[None, :] * stride_ak + idx_q * stride_aq)
    B = B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn + idx_q * stride_bq)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k in range(K, 0, -BLOCK_K):
        if EVEN_K:
            a = tl.load(A)
            b = tl.load(B)
        else:
            a = tl.load(A, mask=rk[None, :] < k, other=0.0)
            b = tl.load(B, mask=rk[:, None] < k, other=0.0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32)
        A += BLOCK_K * stride_ak
        B += BLOCK_K * stride_bk
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    xindex = idx_n + 64 * idx_m + 65536 * idx_q
    tl.store(out_ptr0 + tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N]), acc, mask)


@triton.jit
def triton_tem_fused__softmax_amax_bmm_div_mul_sub_transpose_view_0_s3(arg_A, arg_B, out_ptr2):
    EVEN_K: tl.constexpr = False
    USE_FAST_ACCUM: tl.constexpr = False
    ACC_TYPE: tl.constexpr = tl.float32
    BLOCK_M: tl.constexpr = 16
    BLOCK_N: tl.constexpr = 16
    BLOCK_K: tl.constexpr = 16
    GROUP_M: tl.constexpr = 8
    ALLOW_TF32: tl.constexpr = False
    INDEX_DTYPE: tl.constexpr = tl.int32
    A = arg_A
    B = arg_B
    M = 1
    N = 1
    K = 1
    if M * N == 0:
        return
    stride_am = 1
    stride_ak = 1
    stride_bk = 1
    stride_bn = 1
    pid = tl.program_id(0).to(INDEX_DTYPE)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + pid % group_size
    pid_n = pid % width // group_size
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if (stride_am == 1 and stride_ak == M or (stride_am == K and stride_ak == 1)) and (M >= BLOCK_M and K > 1):
        offs_a_m = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        offs_a_m = rm % M
    if (stride_bk == 1 and stride_bn == K or (stride_bk == N and stride_bn == 1)) and (N >= BLOCK_N and K > 1):
        offs_b_n = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        offs_b_n = rn % N
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k_idx in range(0, tl.cdiv(K, BLOCK_K)):
        a_mask = offs_k[None, :] < K - k_idx * BLOCK_K
        b_mask = offs_k[:, None] < K - k_idx * BLOCK_K
        a_k_idx_vals = offs_k[None, :] + k_idx * BLOCK_K
        b_k_idx_vals = offs_k[:, None] + k_idx * BLOCK_K
        idx_m = offs_a_m[:, None]
        idx_n = a_k_idx_vals
        xindex = idx_m + idx_n
        a = tl.load(A + tl.full([BLOCK_M, BLOCK_K], 0, tl.int32).broadcast_to(xindex.shape), mask=a_mask, other=0.0)
        idx_m = b_k_idx_vals
        idx_n = offs_b_n[None, :]
        xindex = idx_m + idx_n
        b = tl.load(B + tl.full([BLOCK_K, BLOCK_N], 0, tl.int32).broadcast_to(xindex.shape), mask=b_mask, other=0.0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32, out_dtype=ACC_TYPE)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    xindex = idx_m + idx_n
    tmp0 = tl.full([1], 1.0, tl.float32)
    tmp1 = acc * tmp0
    tmp2 = tmp1 - tmp1
    tmp3 = tmp2 * tmp0
    tmp4 = libdevice.exp(tmp3)
    tmp5 = tmp4 / tmp4
    tl.store(out_ptr2 + tl.full([BLOCK_M, BLOCK_N], 0, tl.int32).broadcast_to(BLOCK_M, BLOCK_N), tmp5, None)


@triton.jit
def triton_tem_fused__softmax_amax_bmm_div_mul_sub_view_1_s3(arg_A, arg_B, out_ptr0):
    EVEN_K: tl.constexpr = False
    USE_FAST_ACCUM: tl.constexpr = False
    ACC_TYPE: tl.constexpr = tl.float32
    BLOCK_M: tl.constexpr = 16
    BLOCK_N: tl.constexpr = 16
    BLOCK_K: tl.constexpr = 16
    GROUP_M: tl.constexpr = 8
    ALLOW_TF32: tl.constexpr = False
    INDEX_DTYPE: tl.constexpr = tl.int32
    A = arg_A
    B = arg_B
    M = 1
    N = 1
    K = 1
    if M * N == 0:
        return
    stride_am = 1
    stride_ak = 1
    stride_bk = 1
    stride_bn = 1
    pid = tl.program_id(0).to(INDEX_DTYPE)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + pid % group_size
    pid_n = pid % width // group_size
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if (stride_am == 1 and stride_ak == M or (stride_am == K and stride_ak == 1)) and (M >= BLOCK_M and K > 1):
        offs_a_m = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        offs_a_m = rm % M
    if (stride_bk == 1 and stride_bn == K or (stride_bk == N and stride_bn == 1)) and (N >= BLOCK_N and K > 1):
        offs_b_n = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        offs_b_n = rn % N
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k_idx in range(0, tl.cdiv(K, BLOCK_K)):
        a_mask = offs_k[None, :] < K - k_idx * BLOCK_K
        b_mask = offs_k[:, None] < K - k_idx * BLOCK_K
        a_k_idx_vals = offs_k[None, :] + k_idx * BLOCK_K
        b_k_idx_vals = offs_k[:, None] + k_idx * BLOCK_K
        idx_m = offs_a_m[:, None]
        idx_n = a_k_idx_vals
        xindex = idx_m + idx_n
        a = tl.load(A + tl.full([BLOCK_M, BLOCK_K], 0, tl.int32).broadcast_to(xindex.shape), mask=a_mask, other=0.0)
        idx_m = b_k_idx_vals
        idx_n = offs_b_n[None, :]
        xindex = idx_m + idx_n
        b = tl.load(B + tl.full([BLOCK_K, BLOCK_N], 0, tl.int32).broadcast_to(xindex.shape), mask=b_mask, other=0.0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32, out_dtype=ACC_TYPE)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    xindex = idx_m + idx_n
    tl.store(out_ptr0 + tl.full([BLOCK_M, BLOCK_N], 0, tl.int32).broadcast_to(BLOCK_M, BLOCK_N), acc, None)


@triton.jit
def triton_tem_fused_bmm_transpose_view_0_s4(arg_A, arg_B, out_ptr0):
    EVEN_K: tl.constexpr = False
    USE_FAST_ACCUM: tl.constexpr = False
    ACC_TYPE: tl.constexpr = tl.float32
    BLOCK_M: tl.constexpr = 16
    BLOCK_N: tl.constexpr = 16
    BLOCK_K: tl.constexpr = 16
    GROUP_M: tl.constexpr = 8
    ALLOW_TF32: tl.constexpr = False
    INDEX_DTYPE: tl.constexpr = tl.int32
    A = arg_A
    B = arg_B
    M = 8
    N = 8
    K = 8
    stride_aq = 64
    stride_am = 8
    stride_ak = 1
    stride_bq = 64
    stride_bk = 1
    stride_bn = 8
    pid = tl.program_id(0).to(INDEX_DTYPE)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + pid % group_size
    pid_n = pid % width // group_size
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if stride_am == 1 and stride_ak == M or (stride_am == K and stride_ak == 1):
        ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        ram = rm % M
    if stride_bk == 1 and stride_bn == K or (stride_bk == N and stride_bn == 1):
        rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        rbn = rn % N
    rk = tl.arange(0, BLOCK_K)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    A = A + (ram[:, None] * stride_am + rk[None, :] * stride_ak + idx_q * stride_aq)
    B = B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn + idx_q * stride_bq)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k in range(K, 0, -BLOCK_K):
        if EVEN_K:
            a = tl.load(A)
            b = tl.load(B)
        else:
            a = tl.load(A, mask=rk[None, :] < k, other=0.0)
            b = tl.load(B, mask=rk[:, None] < k, other=0.0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32)
        A += BLOCK_K * stride_ak
        B += BLOCK_K * stride_bk
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    xindex = idx_n + 8 * idx_m + 64 * idx_q
    tl.store(out_ptr0 + tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N]), acc, mask)


@triton.jit
def triton_per_fused__softmax_amax_div_mul_sub_view_1_s4(in_out_ptr0, xnumel, r0_numel, XBLOCK: tl.constexpr):
    xnumel = 32
    r0_numel = 8
    R0_BLOCK: tl.constexpr = 8
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
    roffset = r0_offset
    rindex = r0_index
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_out_ptr0 + (r0_1 + 8 * x0), xmask, other=0.0)
    tmp1 = tl.full([1, 1], 1.0, tl.float32)
    tmp2 = tmp0 * tmp1
    tmp3 = tl.broadcast_to(tmp2, [XBLOCK, R0_BLOCK])
    tmp5 = tl.where(xmask, tmp3, float('-inf'))
    tmp6 = inductor_max2(tmp5, 1)[:, None].to(tl.float32)
    tmp7 = tmp2 - tmp6
    tmp8 = tl.full([1, 1], 0.35355339059327373, tl.float32)
    tmp9 = tmp7 * tmp8
    tmp10 = libdevice.exp(tmp9)
    tmp11 = tl.broadcast_to(tmp10, [XBLOCK, R0_BLOCK])
    tmp13 = tl.where(xmask, tmp11, 0)
    tmp14 = tl.sum(tmp13, 1)[:, None].to(tl.float32)
    tmp15 = tmp10 / tmp14
    tl.store(in_out_ptr0 + (r0_1 + 8 * x0), tmp15, xmask)


@triton.jit
def triton_tem_fused__softmax_bmm_div_mul_sub_view_2_s4(arg_A, arg_B, out_ptr0):
    EVEN_K: tl.constexpr = False
    USE_FAST_ACCUM: tl.constexpr = False
    ACC_TYPE: tl.constexpr = tl.float32
    BLOCK_M: tl.constexpr = 16
    BLOCK_N: tl.constexpr = 16
    BLOCK_K: tl.constexpr = 16
    GROUP_M: tl.constexpr = 8
    ALLOW_TF32: tl.constexpr = False
    INDEX_DTYPE: tl.constexpr = tl.int32
    A = arg_A
    B = arg_B
    M = 8
    N = 8
    K = 8
    stride_aq = 64
    stride_am = 8
    stride_ak = 1
    stride_bq = 64
    stride_bk = 8
    stride_bn = 1
    pid = tl.program_id(0).to(INDEX_DTYPE)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + pid % group_size
    pid_n = pid % width // group_size
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if stride_am == 1 and stride_ak == M or (stride_am == K and stride_ak == 1):
        ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        ram = rm % M
    if stride_bk == 1 and stride_bn == K or (stride_bk == N and stride_bn == 1):
        rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        rbn = rn % N
    rk = tl.arange(0, BLOCK_K)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    A = A + (ram[:, None] * stride_am + rk[None, :] * stride_ak + idx_q * stride_aq)
    B = B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn + idx_q * stride_bq)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k in range(K, 0, -BLOCK_K):
        if EVEN_K:
            a = tl.load(A)
            b = tl.load(B)
        else:
            a = tl.load(A, mask=rk[None, :] < k, other=0.0)
            b = tl.load(B, mask=rk[:, None] < k, other=0.0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32)
        A += BLOCK_K * stride_ak
        B += BLOCK_K * stride_bk
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    xindex = idx_n + 8 * idx_m + 64 * idx_q
    tl.store(out_ptr0 + tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N]), acc, mask)


@triton.jit
def triton_tem_fused_bmm_transpose_view_0_s5(arg_A, arg_B, out_ptr0):
    EVEN_K: tl.constexpr = False
    USE_FAST_ACCUM: tl.constexpr = False
    ACC_TYPE: tl.constexpr = tl.float32
    BLOCK_M: tl.constexpr = 16
    BLOCK_N: tl.constexpr = 16
    BLOCK_K: tl.constexpr = 16
    GROUP_M: tl.constexpr = 8
    ALLOW_TF32: tl.constexpr = False
    INDEX_DTYPE: tl.constexpr = tl.int32
    A = arg_A
    B = arg_B
    M = 8
    N = 8
    K = 8
    stride_aq = 64
    stride_am = 8
    stride_ak = 1
    stride_bq = 64
    stride_bk = 1
    stride_bn = 8
    pid = tl.program_id(0).to(INDEX_DTYPE)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + pid % group_size
    pid_n = pid % width // group_size
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if stride_am == 1 and stride_ak == M or (stride_am == K and stride_ak == 1):
        ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        ram = rm % M
    if stride_bk == 1 and stride_bn == K or (stride_bk == N and stride_bn == 1):
        rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        rbn = rn % N
    rk = tl.arange(0, BLOCK_K)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    A = A + (ram[:, None] * stride_am + rk[None, :] * stride_ak + idx_q * stride_aq)
    B = B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn + idx_q * stride_bq)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k in range(K, 0, -BLOCK_K):
        if EVEN_K:
            a = tl.load(A)
            b = tl.load(B)
        else:
            a = tl.load(A, mask=rk[None, :] < k, other=0.0)
            b = tl.load(B, mask=rk[:, None] < k, other=0.0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32)
        A += BLOCK_K * stride_ak
        B += BLOCK_K * stride_bk
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    xindex = idx_n + 8 * idx_m + 64 * idx_q
    tl.store(out_ptr0 + tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N]), acc, mask)


@triton.jit
def triton_per_fused__softmax_amax_div_mul_sub_view_1_s5(in_out_ptr0, xnumel, r0_numel, XBLOCK: tl.constexpr):
    xnumel = 128
    r0_numel = 8
    R0_BLOCK: tl.constexpr = 8
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
    roffset = r0_offset
    rindex = r0_index
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_out_ptr0 + (r0_1 + 8 * x0), xmask, other=0.0)
    tmp1 = tl.full([1, 1], 1.0, tl.float32)
    tmp2 = tmp0 * tmp1
    tmp3 = tl.broadcast_to(tmp2, [XBLOCK, R0_BLOCK])
    tmp5 = tl.where(xmask, tmp3, float('-inf'))
    tmp6 = inductor_max2(tmp5, 1)[:, None].to(tl.float32)
    tmp7 = tmp2 - tmp6
    tmp8 = tl.full([1, 1], 0.35355339059327373, tl.float32)
    tmp9 = tmp7 * tmp8
    tmp10 = libdevice.exp(tmp9)
    tmp11 = tl.broadcast_to(tmp10, [XBLOCK, R0_BLOCK])
    tmp13 = tl.where(xmask, tmp11, 0)
    tmp14 = tl.sum(tmp13, 1)[:, None].to(tl.float32)
    tmp15 = tmp10 / tmp14
    tl.store(in_out_ptr0 + (r0_1 + 8 * x0), tmp15, xmask)


@triton.jit
def triton_tem_fused__softmax_bmm_div_mul_sub_view_2_s5(arg_A, arg_B, out_ptr0):
    EVEN_K: tl.constexpr = False
    USE_FAST_ACCUM: tl.constexpr = False
    ACC_TYPE: tl.constexpr = tl.float32
    BLOCK_M: tl.constexpr = 16
    BLOCK_N: tl.constexpr = 16
    BLOCK_K: tl.constexpr = 16
    GROUP_M: tl.constexpr = 8
    ALLOW_TF32: tl.constexpr = False
    INDEX_DTYPE: tl.constexpr = tl.int32
    A = arg_A
    B = arg_B
    M = 8
    N = 8
    K = 8
    stride_aq = 64
    stride_am = 8
    stride_ak = 1
    stride_bq = 64
    stride_bk = 8
    stride_bn = 1
    pid = tl.program_id(0).to(INDEX_DTYPE)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + pid % group_size
    pid_n = pid % width // group_size
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if stride_am == 1 and stride_ak == M or (stride_am == K and stride_ak == 1):
        ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        ram = rm % M
    if stride_bk == 1 and stride_bn == K or (stride_bk == N and stride_bn == 1):
        rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        rbn = rn % N
    rk = tl.arange(0, BLOCK_K)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    A = A + (ram[:, None] * stride_am + rk[None, :] * stride_ak + idx_q * stride_aq)
    B = B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn + idx_q * stride_bq)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k in range(K, 0, -BLOCK_K):
        if EVEN_K:
            a = tl.load(A)
            b = tl.load(B)
        else:
            a = tl.load(A, mask=rk[None, :] < k, other=0.0)
            b = tl.load(B, mask=rk[:, None] < k, other=0.0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32)
        A += BLOCK_K * stride_ak
        B += BLOCK_K * stride_bk
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    xindex = idx_n + 8 * idx_m + 64 * idx_q
    tl.store(out_ptr0 + tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N]), acc, mask)


@triton.jit
def triton_tem_fused_bmm_transpose_view_0_s6(arg_A, arg_B, out_ptr0):
    EVEN_K: tl.constexpr = False
    USE_FAST_ACCUM: tl.constexpr = False
    ACC_TYPE: tl.constexpr = tl.float32
    BLOCK_M: tl.constexpr = 16
    BLOCK_N: tl.constexpr = 16
    BLOCK_K: tl.constexpr = 16
    GROUP_M: tl.constexpr = 8
    ALLOW_TF32: tl.constexpr = False
    INDEX_DTYPE: tl.constexpr = tl.int32
    A = arg_A
    B = arg_B
    M = 9
    N = 9
    K = 9
    stride_aq = 81
    stride_am = 9
    stride_ak = 1
    stride_bq = 81
    stride_bk = 1
    stride_bn = 9
    pid = tl.program_id(0).to(INDEX_DTYPE)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + pid % group_size
    pid_n = pid % width // group_size
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if stride_am == 1 and stride_ak == M or (stride_am == K and stride_ak == 1):
        ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        ram = rm % M
    if stride_bk == 1 and stride_bn == K or (stride_bk == N and stride_bn == 1):
        rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        rbn = rn % N
    rk = tl.arange(0, BLOCK_K)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    A = A + (ram[:, None] * stride_am + rk[None, :] * stride_ak + idx_q * stride_aq)
    B = B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn + idx_q * stride_bq)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k in range(K, 0, -BLOCK_K):
        if EVEN_K:
            a = tl.load(A)
            b = tl.load(B)
        else:
            a = tl.load(A, mask=rk[None, :] < k, other=0.0)
            b = tl.load(B, mask=rk[:, None] < k, other=0.0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32)
        A += BLOCK_K * stride_ak
        B += BLOCK_K * stride_bk
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    xindex = idx_n + 9 * idx_m + 81 * idx_q
    tl.store(out_ptr0 + tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N]), acc, mask)


@triton.jit
def triton_per_fused__softmax_amax_div_mul_sub_view_1_s6(in_out_ptr0, xnumel, r0_numel, XBLOCK: tl.constexpr):
    xnumel = 225
    r0_numel = 9
    R0_BLOCK: tl.constexpr = 16
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = r0_index < r0_numel
    roffset = r0_offset
    rindex = r0_index
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_out_ptr0 + (r0_1 + 9 * x0), r0_mask & xmask, other=0.0)
    tmp1 = tl.full([1, 1], 1.0, tl.float32)
    tmp2 = tmp0 * tmp1
    tmp3 = tl.broadcast_to(tmp2, [XBLOCK, R0_BLOCK])
    tmp5 = tl.where(r0_mask & xmask, tmp3, float('-inf'))
    tmp6 = inductor_max2(tmp5, 1)[:, None].to(tl.float32)
    tmp7 = tmp2 - tmp6
    tmp8 = tl.full([1, 1], 0.3333333333333333, tl.float32)
    tmp9 = tmp7 * tmp8
    tmp10 = libdevice.exp(tmp9)
    tmp11 = tl.broadcast_to(tmp10, [XBLOCK, R0_BLOCK])
    tmp13 = tl.where(r0_mask & xmask, tmp11, 0)
    tmp14 = tl.sum(tmp13, 1)[:, None].to(tl.float32)
    tmp15 = tmp10 / tmp14
    tl.store(in_out_ptr0 + (r0_1 + 9 * x0), tmp15, r0_mask & xmask)


@triton.jit
def triton_tem_fused__softmax_bmm_div_mul_sub_view_2_s6(arg_A, arg_B, out_ptr0):
    EVEN_K: tl.constexpr = False
    USE_FAST_ACCUM: tl.constexpr = False
    ACC_TYPE: tl.constexpr = tl.float32
    BLOCK_M: tl.constexpr = 16
    BLOCK_N: tl.constexpr = 16
    BLOCK_K: tl.constexpr = 16
    GROUP_M: tl.constexpr = 8
    ALLOW_TF32: tl.constexpr = False
    INDEX_DTYPE: tl.constexpr = tl.int32
    A = arg_A
    B = arg_B
    M = 9
    N = 9
    K = 9
    stride_aq = 81
    stride_am = 9
    stride_ak = 1
    stride_bq = 81
    stride_bk = 9
    stride_bn = 1
    pid = tl.program_id(0).to(INDEX_DTYPE)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + pid % group_size
    pid_n = pid % width // group_size
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if stride_am == 1 and stride_ak == M or (stride_am == K and stride_ak == 1):
        ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        ram = rm % M
    if stride_bk == 1 and stride_bn == K or (stride_bk == N and stride_bn == 1):
        rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        rbn = rn % N
    rk = tl.arange(0, BLOCK_K)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    A = A + (ram[:, None] * stride_am + rk[None, :] * stride_ak + idx_q * stride_aq)
    B = B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn + idx_q * stride_bq)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k in range(K, 0, -BLOCK_K):
        if EVEN_K:
            a = tl.load(A)
            b = tl.load(B)
        else:
            a = tl.load(A, mask=rk[None, :] < k, other=0.0)
            b = tl.load(B, mask=rk[:, None] < k, other=0.0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32)
        A += BLOCK_K * stride_ak
        B += BLOCK_K * stride_bk
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    xindex = idx_n + 9 * idx_m + 81 * idx_q
    tl.store(out_ptr0 + tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N]), acc, mask)


@triton.jit
def triton_tem_fused_bmm_expand_transpose_view_0_general(arg_A, arg_B, out_ptr0, ks0, ks1, ks2):
    EVEN_K: tl.constexpr = False
    USE_FAST_ACCUM: tl.constexpr = False
    ACC_TYPE: tl.constexpr = tl.float32
    BLOCK_M: tl.constexpr = 128
    BLOCK_N: tl.constexpr = 64
    BLOCK_K: tl.constexpr = 32
    GROUP_M: tl.constexpr = 8
    ALLOW_TF32: tl.constexpr = False
    INDEX_DTYPE: tl.constexpr = tl.int32
    A = arg_A
    B = arg_B
    M = ks0
    N = ks1
    K = ks2
    stride_aq = ks0 * ks2
    stride_am = ks2
    stride_ak = 1
    stride_bq = ks1 * ks2
    stride_bk = 1
    stride_bn = ks2
    pid = tl.program_id(0).to(INDEX_DTYPE)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + pid % group_size
    pid_n = pid % width // group_size
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if stride_am == 1 and stride_ak == M or (stride_am == K and stride_ak == 1):
        ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        ram = rm % M
    if stride_bk == 1 and stride_bn == K or (stride_bk == N and stride_bn == 1):
        rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        rbn = rn % N
    rk = tl.arange(0, BLOCK_K)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    A = A + (ram[:, None] * stride_am + rk[None, :] * stride_ak + idx_q * stride_aq)
    B = B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn + idx_q * stride_bq)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k in range(K, 0, -BLOCK_K):
        if EVEN_K:
            a = tl.load(A)
            b = tl.load(B)
        else:
            a = tl.load(A, mask=rk[None, :] < k, other=0.0)
            b = tl.load(B, mask=rk[:, None] < k, other=0.0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32)
        A += BLOCK_K * stride_ak
        B += BLOCK_K * stride_bk
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    xindex = idx_n + idx_m * ks1 + idx_q * ks0 * ks1
    tl.store(out_ptr0 + tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N]), acc, mask)


@triton.jit
def triton_red_fused__softmax_amax_div_ge_mul_neg_scalar_tensor_sub_view_where_1_general(in_out_ptr0, ks0, ks1, xnumel, r0_numel, XBLOCK: tl.constexpr, R0_BLOCK: tl.constexpr):
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    _tmp12 = tl.full([XBLOCK, R0_BLOCK], float('-inf'), tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_out_ptr0 + (r0_1 + ks0 * x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp1 = ks1
        tmp2 = tmp1.to(tl.float64)
        tmp3 = libdevice.sqrt(tmp2)
        tmp4 = tmp3.to(tl.float32)
        tmp5 = tl.full([1, 1], 0.0, tl.float32)
        tmp6 = tmp4 >= tmp5
        tmp7 = tl.full([1, 1], 1.0, tl.float32)
        tmp8 = tl.full([1, 1], -1.0, tl.float32)
        tmp9 = tl.where(tmp6, tmp7, tmp8)
        tmp10 = tmp0 * tmp9
        tmp11 = tl.broadcast_to(tmp10, [XBLOCK, R0_BLOCK])
        tmp13 = inductor_maximum(_tmp12, tmp11)
        _tmp12 = tl.where(r0_mask & xmask, tmp13, _tmp12)
    tmp12 = inductor_max2(_tmp12, 1)[:, None]
    _tmp30 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp14 = tl.load(in_out_ptr0 + (r0_1 + ks0 * x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp15 = ks1
        tmp16 = tmp15.to(tl.float64)
        tmp17 = libdevice.sqrt(tmp16)
        tmp18 = tmp17.to(tl.float32)
        tmp19 = tl.full([1, 1], 0.0, tl.float32)
        tmp20 = tmp18 >= tmp19
        tmp21 = tl.full([1, 1], 1.0, tl.float32)
        tmp22 = tl.full([1, 1], -1.0, tl.float32)
        tmp23 = tl.where(tmp20, tmp21, tmp22)
        tmp24 = tmp14 * tmp23
        tmp25 = tmp24 - tmp12
        tmp26 = tmp23 * tmp18
        tmp27 = tmp25 / tmp26
        tmp28 = libdevice.exp(tmp27)
        tmp29 = tl.broadcast_to(tmp28, [XBLOCK, R0_BLOCK])
        tmp31 = _tmp30 + tmp29
        _tmp30 = tl.where(r0_mask & xmask, tmp31, _tmp30)
    tmp30 = tl.sum(_tmp30, 1)[:, None]
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp32 = tl.load(in_out_ptr0 + (r0_1 + ks0 * x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
        tmp33 = ks1
        tmp34 = tmp33.to(tl.float64)
        tmp35 = libdevice.sqrt(tmp34)
        tmp36 = tmp35.to(tl.float32)
        tmp37 = tl.full([1, 1], 0.0, tl.float32)
        tmp38 = tmp36 >= tmp37
        tmp39 = tl.full([1, 1], 1.0, tl.float32)
        tmp40 = tl.full([1, 1], -1.0, tl.float32)
        tmp41 = tl.where(tmp38, tmp39, tmp40)
        tmp42 = tmp32 * tmp41
        tmp43 = tmp42 - tmp12
        tmp44 = tmp41 * tmp36
        tmp45 = tmp43 / tmp44
        tmp46 = libdevice.exp(tmp45)
        tmp47 = tmp46 / tmp30
        tl.store(in_out_ptr0 + (r0_1 + ks0 * x0), tmp47, r0_mask & xmask)


@triton.jit
def triton_tem_fused__softmax_bmm_div_expand_ge_mul_neg_scalar_tensor_sub_view_where_2_general(arg_A, arg_B, out_ptr0, ks0, ks1, ks2):
    EVEN_K: tl.constexpr = False
    USE_FAST_ACCUM: tl.constexpr = False
    ACC_TYPE: tl.constexpr = tl.float32
    BLOCK_M: tl.constexpr = 64
    BLOCK_N: tl.constexpr = 64
    BLOCK_K: tl.constexpr = 32
    GROUP_M: tl.constexpr = 8
    ALLOW_TF32: tl.constexpr = False
    INDEX_DTYPE: tl.constexpr = tl.int32
    A = arg_A
    B = arg_B
    M = ks0
    N = ks1
    K = ks2
    stride_aq = ks0 * ks2
    stride_am = ks2
    stride_ak = 1
    stride_bq = ks1 * ks2
    stride_bk = ks1
    stride_bn = 1
    pid = tl.program_id(0).to(INDEX_DTYPE)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + pid % group_size
    pid_n = pid % width // group_size
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if stride_am == 1 and stride_ak == M or (stride_am == K and stride_ak == 1):
        ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        ram = rm % M
    if stride_bk == 1 and stride_bn == K or (stride_bk == N and stride_bn == 1):
        rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        rbn = rn % N
    rk = tl.arange(0, BLOCK_K)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    A = A + (ram[:, None] * stride_am + rk[None, :] * stride_ak + idx_q * stride_aq)
    B = B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn + idx_q * stride_bq)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k in range(K, 0, -BLOCK_K):
        if EVEN_K:
            a = tl.load(A)
            b = tl.load(B)
        else:
            a = tl.load(A, mask=rk[None, :] < k, other=0.0)
            b = tl.load(B, mask=rk[:, None] < k, other=0.0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32)
        A += BLOCK_K * stride_ak
        B += BLOCK_K * stride_bk
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_q = tl.program_id(1).to(INDEX_DTYPE)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    xindex = idx_n + idx_m * ks1 + idx_q * ks0 * ks1
    tl.store(out_ptr0 + tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N]), acc, mask)


def _block(base, scale, cap, numel, exact):
    """Inductor's block size times scale (1: Inductor's own), a power of 2 in [1, cap]; exact: it
    divides numel (the kernel has no mask on that axis)."""
    if scale == 1:
        return base
    value = max(1, min(int(base * scale), max(cap, 1), triton.next_power_of_2(numel)))
    while exact and numel % value:
        value //= 2
    return value


def _warps(base, scale):
    return base if scale == 1 else max(1, min(32, int(base * scale)))


def _yz_overflow(x, y_blocks):
    """Inductor's grid for y past 65535 programs: y split over the grid's y and z."""
    split = triton.cdiv(y_blocks, 65535)
    return (x, triton.cdiv(y_blocks, split), split)


def _signature(inputs, with_dtypes):
    if with_dtypes:
        return tuple((tuple(t.shape), tuple(t.stride()), str(t.dtype)) for t in inputs)
    return tuple((tuple(t.shape), tuple(t.stride())) for t in inputs)


def _launch_s0(inputs, R0_BLOCK_SCALE, XBLOCK_SCALE, WARPS_SCALE):
    arg0_1 = inputs[1]
    arg1_1 = inputs[0]
    arg2_1 = inputs[2]
    device = inputs[0].device
    buf0 = torch.empty_strided((128, 1024, 1024), (1048576, 1024, 1), dtype=torch.float32, device=device)
    triton_tem_fused_bmm_transpose_view_0_s0[(128, 128, 1)](arg1_1, arg0_1, buf0, num_warps=_warps(4, WARPS_SCALE), num_stages=3)
    buf3 = buf0.as_strided((8, 16, 1024, 1024), (16777216, 1048576, 1024, 1), 0)
    xblock = _block(1, XBLOCK_SCALE, max(1, min(4096, 16384 // (1 * 1024))), 131072, exact=True)
    triton_per_fused__softmax_amax_div_mul_sub_view_1_s0[(triton.cdiv(131072, xblock),)](buf3, 131072, 1024, XBLOCK=xblock, num_warps=_warps(8, WARPS_SCALE), num_stages=1)
    buf4 = torch.empty_strided((128, 1024, 64), (65536, 64, 1), dtype=torch.float32, device=device)
    triton_tem_fused__softmax_bmm_div_mul_sub_view_2_s0[(8, 128, 1)](buf3, arg2_1, buf4, num_warps=_warps(8, WARPS_SCALE), num_stages=4)
    return buf4.as_strided((8, 16, 1024, 64), (1048576, 65536, 64, 1), 0)


def _launch_s1(inputs, R0_BLOCK_SCALE, XBLOCK_SCALE, WARPS_SCALE):
    arg0_1 = inputs[1]
    arg1_1 = inputs[0]
    arg2_1 = inputs[2]
    device = inputs[0].device
    buf0 = torch.empty_strided((64, 1024, 1024), (1048576, 1024, 1), dtype=torch.float32, device=device)
    triton_tem_fused_bmm_transpose_view_0_s1[(128, 64, 1)](arg1_1, arg0_1, buf0, num_warps=_warps(4, WARPS_SCALE), num_stages=3)
    buf3 = buf0.as_strided((4, 16, 1024, 1024), (16777216, 1048576, 1024, 1), 0)
    xblock = _block(1, XBLOCK_SCALE, max(1, min(4096, 16384 // (1 * 1024))), 65536, exact=True)
    triton_per_fused__softmax_amax_div_mul_sub_view_1_s1[(triton.cdiv(65536, xblock),)](buf3, 65536, 1024, XBLOCK=xblock, num_warps=_warps(8, WARPS_SCALE), num_stages=1)
    buf4 = torch.empty_strided((64, 1024, 64), (65536, 64, 1), dtype=torch.float32, device=device)
    triton_tem_fused__softmax_bmm_div_mul_sub_view_2_s1[(8, 64, 1)](buf3, arg2_1, buf4, num_warps=_warps(8, WARPS_SCALE), num_stages=4)
    return buf4.as_strided((4, 16, 1024, 64), (1048576, 65536, 64, 1), 0)


def _launch_s2(inputs, R0_BLOCK_SCALE, XBLOCK_SCALE, WARPS_SCALE):
    arg0_1 = inputs[1]
    arg1_1 = inputs[0]
    arg2_1 = inputs[2]
    device = inputs[0].device
    buf0 = torch.empty_strided((256, 1024, 1024), (1048576, 1024, 1), dtype=torch.float32, device=device)
    triton_tem_fused_bmm_transpose_view_0_s2[(128, 256, 1)](arg1_1, arg0_1, buf0, num_warps=_warps(4, WARPS_SCALE), num_stages=3)
    buf3 = buf0.as_strided((16, 16, 1024, 1024), (16777216, 1048576, 1024, 1), 0)
    xblock = _block(1, XBLOCK_SCALE, max(1, min(4096, 16384 // (1 * 1024))), 262144, exact=True)
    triton_per_fused__softmax_amax_div_mul_sub_view_1_s2[(triton.cdiv(262144, xblock),)](buf3, 262144, 1024, XBLOCK=xblock, num_warps=_warps(8, WARPS_SCALE), num_stages=1)
    buf4 = torch.empty_strided((256, 1024, 64), (65536, 64, 1), dtype=torch.float32, device=device)
    triton_tem_fused__softmax_bmm_div_mul_sub_view_2_s2[(16, 256, 1)](buf3, arg2_1, buf4, num_warps=_warps(4, WARPS_SCALE), num_stages=3)
    return buf4.as_strided((16, 16, 1024, 64), (1048576, 65536, 64, 1), 0)


def _launch_s3(inputs, R0_BLOCK_SCALE, XBLOCK_SCALE, WARPS_SCALE):
    arg0_1 = inputs[1]
    arg1_1 = inputs[0]
    arg2_1 = inputs[2]
    device = inputs[0].device
    buf2 = torch.empty_strided((1, 1), (1, 1), dtype=torch.float32, device=device)
    triton_tem_fused__softmax_amax_bmm_div_mul_sub_transpose_view_0_s3[(1, 1, 1)](arg1_1, arg0_1, buf2, num_warps=_warps(1, WARPS_SCALE), num_stages=5)
    buf3 = torch.empty_strided((1, 1), (1, 1), dtype=torch.float32, device=device)
    triton_tem_fused__softmax_amax_bmm_div_mul_sub_view_1_s3[(1, 1, 1)](buf2, arg2_1, buf3, num_warps=_warps(1, WARPS_SCALE), num_stages=5)
    return buf3.as_strided((1, 1, 1, 1), (1, 1, 1, 1), 0)


def _launch_s4(inputs, R0_BLOCK_SCALE, XBLOCK_SCALE, WARPS_SCALE):
    arg0_1 = inputs[1]
    arg1_1 = inputs[0]
    arg2_1 = inputs[2]
    device = inputs[0].device
    buf0 = torch.empty_strided((4, 8, 8), (64, 8, 1), dtype=torch.float32, device=device)
    triton_tem_fused_bmm_transpose_view_0_s4[(1, 4, 1)](arg1_1, arg0_1, buf0, num_warps=_warps(1, WARPS_SCALE), num_stages=1)
    buf3 = buf0.as_strided((1, 4, 8, 8), (256, 64, 8, 1), 0)
    xblock = _block(1, XBLOCK_SCALE, max(1, min(4096, 16384 // (1 * 8))), 32, exact=False)
    triton_per_fused__softmax_amax_div_mul_sub_view_1_s4[(triton.cdiv(32, xblock),)](buf3, 32, 8, XBLOCK=xblock, num_warps=_warps(2, WARPS_SCALE), num_stages=1)
    buf4 = torch.empty_strided((4, 8, 8), (64, 8, 1), dtype=torch.float32, device=device)
    triton_tem_fused__softmax_bmm_div_mul_sub_view_2_s4[(1, 4, 1)](buf3, arg2_1, buf4, num_warps=_warps(1, WARPS_SCALE), num_stages=2)
    return buf4.as_strided((1, 4, 8, 8), (256, 64, 8, 1), 0)


def _launch_s5(inputs, R0_BLOCK_SCALE, XBLOCK_SCALE, WARPS_SCALE):
    arg0_1 = inputs[1]
    arg1_1 = inputs[0]
    arg2_1 = inputs[2]
    device = inputs[0].device
    buf0 = torch.empty_strided((16, 8, 8), (64, 8, 1), dtype=torch.float32, device=device)
    triton_tem_fused_bmm_transpose_view_0_s5[(1, 16, 1)](arg1_1, arg0_1, buf0, num_warps=_warps(1, WARPS_SCALE), num_stages=5)
    buf3 = buf0.as_strided((4, 4, 8, 8), (256, 64, 8, 1), 0)
    xblock = _block(128, XBLOCK_SCALE, max(1, min(4096, 16384 // (1 * 8))), 128, exact=False)
    triton_per_fused__softmax_amax_div_mul_sub_view_1_s5[(triton.cdiv(128, xblock),)](buf3, 128, 8, XBLOCK=xblock, num_warps=_warps(2, WARPS_SCALE), num_stages=1)
    buf4 = torch.empty_strided((16, 8, 8), (64, 8, 1), dtype=torch.float32, device=device)
    triton_tem_fused__softmax_bmm_div_mul_sub_view_2_s5[(1, 16, 1)](buf3, arg2_1, buf4, num_warps=_warps(1, WARPS_SCALE), num_stages=5)
    return buf4.as_strided((4, 4, 8, 8), (256, 64, 8, 1), 0)


def _launch_s6(inputs, R0_BLOCK_SCALE, XBLOCK_SCALE, WARPS_SCALE):
    arg0_1 = inputs[1]
    arg1_1 = inputs[0]
    arg2_1 = inputs[2]
    device = inputs[0].device
    buf0 = torch.empty_strided((25, 9, 9), (81, 9, 1), dtype=torch.float32, device=device)
    triton_tem_fused_bmm_transpose_view_0_s6[(1, 25, 1)](arg1_1, arg0_1, buf0, num_warps=_warps(1, WARPS_SCALE), num_stages=1)
    buf3 = buf0.as_strided((5, 5, 9, 9), (405, 81, 9, 1), 0)
    xblock = _block(32, XBLOCK_SCALE, max(1, min(4096, 16384 // (1 * 16))), 225, exact=False)
    triton_per_fused__softmax_amax_div_mul_sub_view_1_s6[(triton.cdiv(225, xblock),)](buf3, 225, 9, XBLOCK=xblock, num_warps=_warps(2, WARPS_SCALE), num_stages=1)
    buf4 = torch.empty_strided((25, 9, 9), (81, 9, 1), dtype=torch.float32, device=device)
    triton_tem_fused__softmax_bmm_div_mul_sub_view_2_s6[(1, 25, 1)](buf3, arg2_1, buf4, num_warps=_warps(1, WARPS_SCALE), num_stages=1)
    return buf4.as_strided((5, 5, 9, 9), (405, 81, 9, 1), 0)


def _launch_general(inputs, R0_BLOCK_SCALE, XBLOCK_SCALE, WARPS_SCALE):
    if not ((inputs[0].shape[3] == inputs[1].shape[3]) and (inputs[1].shape[1] != 1) and ((inputs[1].shape[0]*inputs[1].shape[1]) != 1) and (inputs[1].shape[0] != 1) and (inputs[1].shape[0]*inputs[1].shape[1] > 1) and (inputs[1].shape[2]*inputs[1].shape[0]*inputs[1].shape[1]*inputs[0].shape[2] <= 2147483647) and (inputs[1].shape[0]*inputs[1].shape[1]*inputs[1].shape[3]*inputs[0].shape[2] <= 2147483647) and (inputs[1].shape[2]*inputs[1].shape[0]*inputs[1].shape[1]*inputs[1].shape[3] <= 2147483647) and ((inputs[1].shape[2]*inputs[0].shape[2]) != 1) and (inputs[1].shape[0]*inputs[1].shape[1]*inputs[0].shape[2]*inputs[2].shape[3] <= 2147483647) and (inputs[1].shape[2]*inputs[1].shape[0]*inputs[1].shape[1]*inputs[2].shape[3] <= 2147483647) and (inputs[0].shape[2]*inputs[2].shape[3] >= inputs[2].shape[3]) and (inputs[1].shape[1]*inputs[0].shape[2]*inputs[2].shape[3] >= inputs[0].shape[2]*inputs[2].shape[3]) and (inputs[1].shape[0]*inputs[1].shape[1]*inputs[0].shape[2] <= 2147483647) and (0 <= inputs[1].shape[0]) and (0 <= inputs[1].shape[1]) and (2 <= inputs[1].shape[2]) and (2 <= inputs[1].shape[3]) and (0 <= inputs[0].shape[2]) and (0 <= inputs[2].shape[3])):
        raise ValueError(f"inputs {_signature(inputs, False)} are outside L['inputs'][0].size()[3] == L['inputs'][1].size()[3] and L['inputs'][1].size()[1] != 1 and (L['inputs'][1].size()[0]*L['inputs'][1].size()[1]) != 1 and L['inputs'][1].size()[0] != 1 and L['inputs'][1].size()[0]*L['inputs'][1].size()[1] > 1 and L['inputs'][1].size()[2]*L['inputs'][1].size()[0]*L['inputs'][1].size()[1]*L['inputs'][0].size()[2] <= 2147483647 and L['inputs'][1].size()[0]*L['inputs'][1].size()[1]*L['inputs'][1].size()[3]*L['inputs'][0].size()[2] <= 2147483647 and L['inputs'][1].size()[2]*L['inputs'][1].size()[0]*L['inputs'][1].size()[1]*L['inputs'][1].size()[3] <= 2147483647 and (L['inputs'][1].size()[2]*L['inputs'][0].size()[2]) != 1 and L['inputs'][1].size()[0]*L['inputs'][1].size()[1]*L['inputs'][0].size()[2]*L['inputs'][2].size()[3] <= 2147483647 and L['inputs'][1].size()[2]*L['inputs'][1].size()[0]*L['inputs'][1].size()[1]*L['inputs'][2].size()[3] <= 2147483647 and L['inputs'][0].size()[2]*L['inputs'][2].size()[3] >= L['inputs'][2].size()[3] and L['inputs'][1].size()[1]*L['inputs'][0].size()[2]*L['inputs'][2].size()[3] >= L['inputs'][0].size()[2]*L['inputs'][2].size()[3] and L['inputs'][1].size()[0]*L['inputs'][1].size()[1]*L['inputs'][0].size()[2] <= 2147483647 and 0 <= L['inputs'][1].size()[0] and 0 <= L['inputs'][1].size()[1] and 2 <= L['inputs'][1].size()[2] and 2 <= L['inputs'][1].size()[3] and 0 <= L['inputs'][0].size()[2] and 0 <= L['inputs'][2].size()[3]")
    arg0_1 = inputs[1].shape[0]
    arg1_1 = inputs[1].shape[1]
    arg2_1 = inputs[1].shape[2]
    arg3_1 = inputs[1].shape[3]
    arg4_1 = inputs[1]
    arg5_1 = inputs[0].shape[2]
    arg6_1 = inputs[0].shape[3]
    arg7_1 = inputs[0]
    arg8_1 = inputs[2].shape[3]
    arg9_1 = inputs[2]
    device = inputs[0].device
    s35 = arg0_1
    s22 = arg1_1
    s20 = arg2_1
    s55 = arg3_1
    s65 = arg5_1
    s54 = arg6_1
    s87 = arg8_1
    arg4_1_size = arg4_1.size()
    s21 = arg4_1_size[0]
    if tuple(arg4_1.shape) != (s21, s22, s20, s54) or tuple(arg4_1.stride()) != (s20 * s22 * s54, s20 * s54, s54, 1):
        raise ValueError(f"arg4_1 is {tuple(arg4_1.shape)}, Inductor's general kernels need (s21, s22, s20, s54)")
    if tuple(arg7_1.shape) != (s21, s22, s65, s54) or tuple(arg7_1.stride()) != (s22 * s54 * s65, s54 * s65, s54, 1):
        raise ValueError(f"arg7_1 is {tuple(arg7_1.shape)}, Inductor's general kernels need (s21, s22, s65, s54)")
    if tuple(arg9_1.shape) != (s21, s22, s20, s87) or tuple(arg9_1.stride()) != (s20 * s22 * s87, s20 * s87, s87, 1):
        raise ValueError(f"arg9_1 is {tuple(arg9_1.shape)}, Inductor's general kernels need (s21, s22, s20, s87)")
    buf0 = torch.empty_strided((s21 * s22, s65, s20), (s20 * s65, s20, 1), dtype=torch.float32, device=device)
    triton_tem_fused_bmm_expand_transpose_view_0_general[((63 + s20) // 64 * ((127 + s65) // 128), s21 * s22, 1)](arg7_1, arg4_1, buf0, s65, s20, s54, num_warps=_warps(4, WARPS_SCALE), num_stages=3)
    buf3 = buf0.as_strided((s21, s22, s65, s20), (s20 * s22 * s65, s20 * s65, s20, 1), 0)
    triton_red_fused__softmax_amax_div_ge_mul_neg_scalar_tensor_sub_view_where_1_xnumel = s21 * s22 * s65
    r0_block = _block(512, R0_BLOCK_SCALE, max(1, min(16384, 16384 // (1 * 1))), s20, exact=False)
    xblock = _block(2, XBLOCK_SCALE, max(1, min(4096, 16384 // (r0_block * 1))), triton_red_fused__softmax_amax_div_ge_mul_neg_scalar_tensor_sub_view_where_1_xnumel, exact=False)
    triton_red_fused__softmax_amax_div_ge_mul_neg_scalar_tensor_sub_view_where_1_general[(triton.cdiv(triton_red_fused__softmax_amax_div_ge_mul_neg_scalar_tensor_sub_view_where_1_xnumel, xblock),)](buf3, s20, s54, triton_red_fused__softmax_amax_div_ge_mul_neg_scalar_tensor_sub_view_where_1_xnumel, s20, R0_BLOCK=r0_block, XBLOCK=xblock, num_warps=_warps(8, WARPS_SCALE), num_stages=1)
    buf4 = torch.empty_strided((s21 * s22, s65, s87), (s65 * s87, s87, 1), dtype=torch.float32, device=device)
    triton_tem_fused__softmax_bmm_div_expand_ge_mul_neg_scalar_tensor_sub_view_where_2_general[((63 + s65) // 64 * ((63 + s87) // 64), s21 * s22, 1)](buf3, arg9_1, buf4, s65, s87, s20, num_warps=_warps(4, WARPS_SCALE), num_stages=3)
    return buf4.as_strided((s21, s22, s65, s87), (s22 * s65 * s87, s65 * s87, s87, 1), 0)


CAPTURED = [{'batch_size': 8, 'heads': 16, 'seq_len': 1024, 'head_dim': 64}, {'batch_size': 4, 'heads': 16, 'seq_len': 1024, 'head_dim': 64}, {'batch_size': 16, 'heads': 16, 'seq_len': 1024, 'head_dim': 64}, {'batch_size': 1, 'heads': 1, 'seq_len': 1, 'head_dim': 1}, {'batch_size': 1, 'heads': 4, 'seq_len': 8, 'head_dim': 8}, {'batch_size': 4, 'heads': 4, 'seq_len': 8, 'head_dim': 8}, {'batch_size': 5, 'heads': 5, 'seq_len': 9, 'head_dim': 9}]


def _launch_inductor(*inputs, R0_BLOCK_SCALE=1, XBLOCK_SCALE=1, WARPS_SCALE=1):
    key = _signature(inputs, True)
    if key == (((8, 16, 1024, 64), (1048576, 65536, 64, 1), 'torch.float32'), ((8, 16, 1024, 64), (1048576, 65536, 64, 1), 'torch.float32'), ((8, 16, 1024, 64), (1048576, 65536, 64, 1), 'torch.float32')):
        return _launch_s0(inputs, R0_BLOCK_SCALE, XBLOCK_SCALE, WARPS_SCALE)
    if key == (((4, 16, 1024, 64), (1048576, 65536, 64, 1), 'torch.float32'), ((4, 16, 1024, 64), (1048576, 65536, 64, 1), 'torch.float32'), ((4, 16, 1024, 64), (1048576, 65536, 64, 1), 'torch.float32')):
        return _launch_s1(inputs, R0_BLOCK_SCALE, XBLOCK_SCALE, WARPS_SCALE)
    if key == (((16, 16, 1024, 64), (1048576, 65536, 64, 1), 'torch.float32'), ((16, 16, 1024, 64), (1048576, 65536, 64, 1), 'torch.float32'), ((16, 16, 1024, 64), (1048576, 65536, 64, 1), 'torch.float32')):
        return _launch_s2(inputs, R0_BLOCK_SCALE, XBLOCK_SCALE, WARPS_SCALE)
    if key == (((1, 1, 1, 1), (1, 1, 1, 1), 'torch.float32'), ((1, 1, 1, 1), (1, 1, 1, 1), 'torch.float32'), ((1, 1, 1, 1), (1, 1, 1, 1), 'torch.float32')):
        return _launch_s3(inputs, R0_BLOCK_SCALE, XBLOCK_SCALE, WARPS_SCALE)
    if key == (((1, 4, 8, 8), (256, 64, 8, 1), 'torch.float32'), ((1, 4, 8, 8), (256, 64, 8, 1), 'torch.float32'), ((1, 4, 8, 8), (256, 64, 8, 1), 'torch.float32')):
        return _launch_s4(inputs, R0_BLOCK_SCALE, XBLOCK_SCALE, WARPS_SCALE)
    if key == (((4, 4, 8, 8), (256, 64, 8, 1), 'torch.float32'), ((4, 4, 8, 8), (256, 64, 8, 1), 'torch.float32'), ((4, 4, 8, 8), (256, 64, 8, 1), 'torch.float32')):
        return _launch_s5(inputs, R0_BLOCK_SCALE, XBLOCK_SCALE, WARPS_SCALE)
    if key == (((5, 5, 9, 9), (405, 81, 9, 1), 'torch.float32'), ((5, 5, 9, 9), (405, 81, 9, 1), 'torch.float32'), ((5, 5, 9, 9), (405, 81, 9, 1), 'torch.float32')):
        return _launch_s6(inputs, R0_BLOCK_SCALE, XBLOCK_SCALE, WARPS_SCALE)
    return _launch_general(inputs, R0_BLOCK_SCALE, XBLOCK_SCALE, WARPS_SCALE)


# --------------------------------------------------------------------------------------------------
# The exported config (inductor.py), bound to its launcher once.
CONFIG = {"R0_BLOCK_SCALE": 1, "XBLOCK_SCALE": 4, "WARPS_SCALE": 1}
_BOUND = functools.partial(_launch_inductor, **CONFIG)


def launcher_for(*inputs):
    """The launcher ``launch(*inputs)`` calls: the kernel's own with CONFIG bound in."""
    return _BOUND


_HOT = _BOUND  # what launch(*inputs) runs; the host side below wraps it


# --------------------------------------------------------------------------------------------------
# The hot path: the launcher with CONFIG bound in, its launches replayed once two calls at a signature agree.
def launch(*inputs, **config):
    """Run the kernel with the exported config, or with ``config`` (every key) when given."""
    if config:
        return _launch_inductor(*inputs, **config)
    return _HOT(*inputs)


# === host side: an exported module given as a candidate ends above this line ===
# The replay of launch(*inputs)'s launches (kernel-agent's tools/fast_launch.py); see the docstring's host
# cost. Given as a candidate, the module ends at the line above.
import sys
import threading
import types

from torch.utils._python_dispatch import TorchDispatchMode

AGREEING_RECORDINGS = 2  # identical recordings before a signature is replayed
MAX_RECORDINGS = 4  # after this many without agreement a signature stays on its launcher
_ALLOCATING = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
_FILLING = {"zeros": 0, "zeros_like": 0, "new_zeros": 0, "ones": 1, "ones_like": 1, "new_ones": 1}
_PRIMITIVE = (int, float, bool, str, bytes, type(None))
_HEAD = 9  # gridX, gridY, gridZ, stream, function, kernel metadata, launch metadata, enter hook, exit hook
MAX_SIGNATURES = 256  # signatures a launcher learns; calls at any other go to the launcher as they are
# One state for every copy of this file in the process (each exported module holds one): a recording
# patches Triton's classes, so only one runs at a time, and a replay inside a recording (one exported
# module's launch called by another's launcher) must run its launcher, so that the recording sees it.
_SHARED = sys.modules.setdefault("_kernel_agent_fast_launch", types.ModuleType("_kernel_agent_fast_launch"))
_SHARED.__dict__.setdefault("recording_lock", threading.Lock())
_SHARED.__dict__.setdefault("recording_here", threading.local())


class _Pointer:
    """An address where Triton's launcher expects a tensor (it reads only ``data_ptr()``): a view at an
    offset into an input or an allocation."""

    __slots__ = ("address",)

    def __init__(self, address):
        self.address = address

    def data_ptr(self):
        return self.address


class TritonBackend:
    """What a replay needs from Triton: the launcher class of compiled kernels, its JIT class, the current
    device and stream as Triton reads them, and where the launch hooks live."""

    device_type = "cuda"

    def __init__(self):
        from triton.runtime import driver
        from triton.runtime.jit import JITFunction

        active = driver.active
        self.launcher_class = active.launcher_cls
        self.jit_class = JITFunction
        self.current_device = active.get_current_device
        self.current_stream = active.get_current_stream
        try:
            from triton import knobs

            self.hooks = knobs.runtime
        except ImportError:  # Triton before 3.4 keeps the hooks on CompiledKernel
            from triton.compiler.compiler import CompiledKernel

            self.hooks = CompiledKernel


def signature(inputs):
    """What a launcher's behaviour may depend on: per tensor its shape, strides, dtype, device and
    16-byte alignment (Triton specializes on it); every other argument by type and value. TypeError for
    an argument that is neither a tensor nor a plain value (a key must not hold it alive)."""
    return tuple(
        [(t.shape, t.stride(), t.dtype, t.get_device(), t.data_ptr() & 15) if isinstance(t, torch.Tensor)
         else (type(t), t) if _plain(t) else _not_a_key(t) for t in inputs]
    )  # fmt: skip


def _not_a_key(value):
    raise TypeError(f"no replay keyed on a {type(value).__name__}")


class _Recording(TorchDispatchMode):
    """One call of a launcher: the tensors it allocated and the launches it made (torch ops seen here)."""

    def __init__(self):
        super().__init__()
        self.made = []  # (tensor, fill value or None), in allocation order
        self.launches = []  # (launcher object, its arguments, the calls to its native launch, that launch)
        self.jit_runs = 0
        self.refused = ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func._overloadpacket.__name__
        if name in _ALLOCATING or name in _FILLING:
            self.made.append((out, _FILLING.get(name)))
        elif not func.is_view and not self.refused:
            self.refused = f"the launcher runs aten.{name}"
        return out


def _record(launcher, inputs, backend, device):
    """(the launcher's outputs, the recording of that call) with Triton's JIT and launcher classes patched
    for this thread only. Each launch keeps its native ``launch`` and the calls the launcher made to it."""
    recording, me = _Recording(), threading.get_ident()
    jit, launcher_class = backend.jit_class, backend.launcher_class
    original_run, original_call = jit.run, launcher_class.__call__

    def run(self, *args, **kwargs):
        if threading.get_ident() == me and not kwargs.get("warmup"):
            recording.jit_runs += 1
        return original_run(self, *args, **kwargs)

    def call(self, *args, **kwargs):
        if threading.get_ident() != me:
            return original_call(self, *args, **kwargs)
        native, seen = getattr(self, "launch", None), []
        if kwargs:
            recording.refused = "Triton's launcher called with keywords"
        if backend.current_device() != device:  # the launcher switched device: the replay would not
            recording.refused = "a launch on another device than the caller's"
        if kwargs or native is None:
            recording.launches.append((self, args, seen, native))
            return original_call(self, *args, **kwargs)
        self.launch = lambda *a, **k: (seen.append((a, k)), native(*a, **k))[1]
        try:
            return original_call(self, *args)
        finally:
            self.launch = native
            recording.launches.append((self, args, seen, native))

    jit.run, launcher_class.__call__ = run, call
    try:
        with recording:
            outputs = launcher(*inputs)
    finally:
        jit.run, launcher_class.__call__ = original_run, original_call
    return outputs, recording


class _Sources:
    """Where each tensor of a recording comes from: kind 0 an input, 1 an allocation of the call,
    2 a tensor the launcher keeps (a module-level buffer); by storage."""

    def __init__(self, inputs, made):
        self.by_storage = {}
        self.ranges = []
        for kind, tensors in ((0, inputs), (1, [t for t, _ in made])):
            for i, t in enumerate(tensors):
                if not isinstance(t, torch.Tensor):
                    continue
                storage = t.untyped_storage()
                base = storage.data_ptr()
                if base in self.by_storage:
                    raise _Unreplayable("two inputs or allocations share memory")
                self.by_storage[base] = (kind, i, t)
                self.ranges.append((base, base + storage.nbytes()))

    def role(self, t):
        """(kind, index or the kept tensor, byte offset from the source's data_ptr)."""
        found = self.by_storage.get(t.untyped_storage().data_ptr())
        if found is None:
            return 2, t, 0
        kind, i, source = found
        offset = t.data_ptr() - source.data_ptr()
        if offset < 0:
            raise _Unreplayable("a view before its input's first element")
        return kind, i, offset

    def inside(self, value):
        return any(low <= value < high for low, high in self.ranges)


class _Unreplayable(Exception):
    pass


_MISS = object()  # a replay that must not run this call (a hook was set, another device is current)


class _Plan:
    """A signature's launches as one generated function: the allocations, each launch with the new
    tensors' addresses in place of the recorded ones, the outputs rebuilt. Where a launcher's own Python
    only forwards to its native launch (no scratch memory to allocate), the native launch is called."""

    def __init__(self, recording, inputs, outputs, backend, device, stream):
        if recording.refused:
            raise _Unreplayable(recording.refused)
        if not recording.launches or recording.jit_runs != len(recording.launches):
            raise _Unreplayable("a launch outside Triton's JIT path, or none")
        sources = _Sources(inputs, recording.made)
        self.env = {"empty_strided": torch.empty_strided, "empty_like": torch.empty_like, "Pointer": _Pointer,
                    "MISS": _MISS, "DEVICE": device, "hooks": backend.hooks, "current_device": backend.current_device,
                    "current_stream": backend.current_stream}  # fmt: skip
        self.described = []  # what two recordings must share besides the source
        lines = ["def replay(inputs):", *self._hook_check(backend.hooks)]
        lines += ["    device = current_device()", "    if device != DEVICE:", "        return MISS"]
        for k, (t, fill) in enumerate(recording.made):
            twin = next((i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.is_contiguous()
                         and _same_layout(x, t)), None)  # fmt: skip
            if twin is not None:  # empty_like of a contiguous input: the same layout, and cheaper
                lines.append(f"    a{k} = empty_like(inputs[{twin}])")
                self.described.append(f"like input {twin}")
            else:
                spec = self.constant((tuple(t.shape), t.stride(), t.dtype, t.device))
                lines.append(f"    a{k} = empty_strided(*{spec}[:2], dtype={spec}[2], device={spec}[3])")
            if fill is not None:
                lines.append(f"    a{k}.fill_({fill!r})")
        lines.append("    stream = current_stream(device)")
        for obj, args, seen, native in recording.launches:
            lines.append("    " + self._launch(obj, args, seen, native, sources, stream))
        lines.append(f"    return {self._output(outputs, sources)}")
        self.source = "\n".join(lines) + "\n"
        exec(compile(self.source, "<fast_launch replay>", "exec"), self.env)
        self.run = self.env["replay"]

    def constant(self, value, described=None):
        """The generated code's name for ``value``; ``described``: how two recordings compare it (repr)."""
        name = f"c{len(self.described)}"
        self.env[name] = value
        self.described.append(repr(value) if described is None else described)
        return name

    def _hook_check(self, hooks):
        enter, exit = hooks.launch_enter_hook, hooks.launch_exit_hook
        self.env.update(ENTER=enter, EXIT=exit)
        head = ["    enter, exit = hooks.launch_enter_hook, hooks.launch_exit_hook"]
        if enter is None and exit is None:
            return head + ["    if enter is not None or exit is not None:", "        return MISS"]
        if not all(isinstance(getattr(h, "calls", None), list) and not h.calls for h in (enter, exit)):
            raise _Unreplayable("a launch hook is set")
        return head + [  # Triton's chains of hooks: the same two, still empty
            "    if enter is not ENTER or exit is not EXIT or ENTER.calls or EXIT.calls:", "        return MISS"]

    def _launch(self, obj, args, seen, native, sources, stream):
        """One launch's line: the native launch where that is all the launcher's Python does, else the
        launcher object itself."""
        if len(args) < _HEAD or args[3] != stream or args[7] is not self.env["ENTER"] or args[8] is not self.env["EXIT"]:
            raise _Unreplayable("Triton's launcher takes arguments this replay does not know")
        exprs = []
        for pos, value in enumerate(args):
            if pos == 3:
                exprs.append("stream")
            elif pos in (7, 8):
                exprs.append(("enter", "exit")[pos - 7])
            elif pos == 6:  # launch metadata: read only by launch hooks, and none is set when this runs
                exprs.append(self.constant(value, "launch metadata"))
            else:
                exprs.append(self._argument(value, sources, pos >= _HEAD))
        try:
            native_exprs = self._native(obj, args, seen, exprs)
            name = self.constant(native, f"native of launcher {id(obj)}")
            return f"{name}({', '.join(native_exprs)})"
        except _Unreplayable:
            name = self.constant(obj, f"launcher {id(obj)}")
            return f"{name}({', '.join(exprs)})"

    def _argument(self, value, sources, kernel_argument):
        if isinstance(value, torch.Tensor):
            kind, index, offset = sources.role(value)
            base = (f"inputs[{index}]", f"a{index}", None)[kind] or self.constant(value, f"kept {value.data_ptr()}")
            return f"Pointer({base}.data_ptr() + {offset})" if offset else base
        if isinstance(value, int) and sources.inside(value):
            raise _Unreplayable("an address passed as an integer")
        if _plain(value) or (kernel_argument and type(value).__module__.startswith("triton.language")):
            return self.constant(value)  # a constexpr such as a tl.dtype is part of the compiled kernel
        raise _Unreplayable(f"an argument of type {type(value).__name__} cannot be re-created")

    def _native(self, obj, args, seen, exprs):
        """The native launch's arguments as expressions: the stream at its position, each tensor the
        launcher object was given as that tensor's expression, every other value a constant of itself
        (no scratch memory is allocated per call, so none of them changes between calls)."""
        sizes = (getattr(obj, "global_scratch_size", None), getattr(obj, "profile_scratch_size", 0))
        if len(seen) != 1 or seen[0][1] or sizes != (0, 0) or getattr(obj, "gsan_enabled", False):
            raise _Unreplayable("the launcher's Python does more than forward")
        native_args = seen[0][0]
        if len(native_args) < 4 or native_args[3] is not args[3]:
            raise _Unreplayable("the native launch takes its stream elsewhere")
        tensors = {id(v): e for v, e in zip(args, exprs, strict=True) if isinstance(v, torch.Tensor)}
        given = {id(v) for v in args}

        def expression(value):
            if isinstance(value, torch.Tensor):
                if id(value) not in tensors:
                    raise _Unreplayable("the native launch takes a tensor the launcher was not given")
                return tensors[id(value)]
            if type(value) is tuple:
                return "(" + "".join(f"{expression(v)}, " for v in value) + ")"
            if _plain(value) or id(value) in given:  # e.g. launch metadata, Triton's chains of hooks
                return self.constant(value, repr(value) if _plain(value) else f"given {type(value).__name__}")
            raise _Unreplayable("the native launch takes a value the launcher was not given")

        return ["stream" if pos == 3 else expression(v) for pos, v in enumerate(native_args)]

    def _output(self, value, sources):
        """The generated expression that rebuilds an output of the launcher."""
        if isinstance(value, torch.Tensor):
            kind, index, _ = sources.role(value)
            if kind == 2:
                raise _Unreplayable("an output the call did not allocate")
            source = sources.by_storage[value.untyped_storage().data_ptr()][2]
            base = f"inputs[{index}]" if kind == 0 else f"a{index}"
            if _same_view(value, source):
                return base
            if value.dtype != source.dtype:
                raise _Unreplayable("an output viewed as another dtype")
            view = self.constant((tuple(value.shape), value.stride(), value.storage_offset() - source.storage_offset()))
            return f"{base}.as_strided({view}[0], {view}[1], {base}.storage_offset() + {view}[2])"
        if type(value) is tuple:
            return "(" + "".join(f"{self._output(v, sources)}, " for v in value) + ")"
        if type(value) is list:
            return "[" + ", ".join(self._output(v, sources) for v in value) + "]"
        if _plain(value):
            return self.constant(value)
        raise _Unreplayable(f"an output of type {type(value).__name__}")

    def describe(self):
        """What two recordings must share to be replayed."""
        return self.source, self.described


def _same_layout(a, b):
    return (a.dtype, a.shape, a.stride(), a.device) == (b.dtype, b.shape, b.stride(), b.device)


def _same_view(a, b):
    return (a.dtype, a.shape, a.stride(), a.storage_offset()) == (b.dtype, b.shape, b.stride(), b.storage_offset())


def _plain(value):
    if isinstance(value, tuple):
        return all(_plain(v) for v in value)
    return isinstance(value, _PRIMITIVE)


class Replayed:
    """``launcher`` with its launches replayed once two recordings at a signature agree (see the module's
    docstring); ``replaying()`` says how many signatures replay. ``backend`` is Triton's by default."""

    def __init__(self, launcher, backend=None):
        self.launcher = launcher
        self._backend = backend
        self._off = False
        self._plans = {}  # signature -> _Plan (replayed), a list of recordings' plans, or False (never)
        self._lock = threading.Lock()

    def __call__(self, *inputs):
        if self._off or torch.compiler.is_compiling() or getattr(_SHARED.recording_here, "on", False):
            return self.launcher(*inputs)  # inside another launcher's recording: it must see these launches
        try:
            key = signature(inputs)
            plan = self._plans.get(key)
        except (TypeError, RuntimeError):  # an argument a replay cannot be keyed on (or hashed)
            return self.launcher(*inputs)
        if plan.__class__ is _Plan:
            outputs = plan.run(inputs)
            return self.launcher(*inputs) if outputs is _MISS else outputs
        if plan is False or (plan is None and len(self._plans) >= MAX_SIGNATURES):
            return self.launcher(*inputs)
        return self._learn(key, inputs)

    def replaying(self):
        return sum(1 for p in self._plans.values() if p.__class__ is _Plan)

    def _backend_or_none(self):
        if self._backend is None:
            try:
                self._backend = TritonBackend()
            except Exception:  # no GPU driver (CPU, Triton's interpreter): the launcher runs as it is
                self._off = True
        return self._backend

    def _learn(self, key, inputs):
        backend = self._backend_or_none()
        device_type = getattr(backend, "device_type", None)
        tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
        if backend is None or not tensors or any(t.device.type != device_type for t in tensors):
            return self.launcher(*inputs)
        if not _SHARED.recording_lock.acquire(blocking=False):
            return self.launcher(*inputs)
        _SHARED.recording_here.on = True
        try:
            device = backend.current_device()
            stream = backend.current_stream(device)
            outputs, recording = _record(self.launcher, inputs, backend, device)
        finally:
            _SHARED.recording_here.on = False
            _SHARED.recording_lock.release()
        try:
            plan = _Plan(recording, inputs, outputs, backend, device, stream)
        except Exception:  # _Unreplayable, or anything else it cannot read: the call itself has run
            plan = None
        self._remember(key, plan)
        return outputs

    def _remember(self, key, plan):
        with self._lock:
            seen = self._plans.get(key)
            if seen.__class__ is _Plan or seen is False:  # decided meanwhile by another thread's call
                return
            seen = seen if isinstance(seen, list) else []
            seen.append(plan)
            recent = seen[-AGREEING_RECORDINGS:]
            if len(recent) == AGREEING_RECORDINGS and None not in recent:
                described = {repr(p.describe()) for p in recent}
                if len(described) == 1:
                    self._plans[key] = plan
                    return
            self._plans[key] = False if len(seen) >= MAX_RECORDINGS else seen


_HOT = Replayed(_HOT)
