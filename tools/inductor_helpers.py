"""Device helpers that Inductor's Triton kernels call, written as plain ``@triton.jit`` functions.

tools.inductor_import copies the ones a kernel uses into the converted candidate (a candidate may
import only triton and torch, not torch._inductor.runtime): ``triton_helpers.NAME`` becomes
``inductor_NAME``. The ``portable_*`` functions stand in for libdevice calls when a candidate must run
in the Triton interpreter, which has no libdevice (``portable_math=True``); on a GPU the kernels keep
Inductor's libdevice calls.

Semantics follow Inductor's: NaN wins a max/min, ties of a max/min with index keep the lower index,
Welford partials combine with a guard for equal (possibly infinite) means, online-softmax partials
with a guard for an all -inf row.
"""

import triton
import triton.language as tl


@triton.jit
def inductor_promote_to_tensor(x):
    return x + tl.zeros((1,), tl.int1)


@triton.jit
def inductor_is_floating(x):
    return inductor_promote_to_tensor(x).dtype.is_floating()


@triton.jit
def inductor_div_floor_integer(a, b):
    quotient = a // b
    rounded_down = tl.where(a % b != 0, quotient - 1, quotient)
    return tl.where((a < 0) != (b < 0), rounded_down, quotient)


@triton.jit
def inductor_remainder_integer(a, b):
    r = a % b
    return tl.where((r != 0) & ((a < 0) != (b < 0)), r + b, r)


@triton.jit
def inductor_maximum(a, b):
    pick_a = a > b
    if inductor_is_floating(a):
        pick_a |= a != a
    return tl.where(pick_a, a, b)


@triton.jit
def inductor_minimum(a, b):
    pick_a = a < b
    if inductor_is_floating(a):
        pick_a |= a != a
    return tl.where(pick_a, a, b)


@triton.jit
def inductor_max2(a, dim):
    return tl.reduce(a, dim, inductor_maximum)


@triton.jit
def inductor_min2(a, dim):
    return tl.reduce(a, dim, inductor_minimum)


@triton.jit
def inductor_maximum_with_index(a_value, a_index, b_value, b_index):
    pick_a = a_value > b_value
    tie = a_value == b_value
    if inductor_is_floating(a_value):
        a_nan = a_value != a_value
        b_nan = b_value != b_value
        pick_a |= a_nan & (not b_nan)
        tie |= a_nan & b_nan
    pick_a |= tie & (a_index < b_index)
    return tl.where(pick_a, a_value, b_value), tl.where(pick_a, a_index, b_index)


@triton.jit
def inductor_minimum_with_index(a_value, a_index, b_value, b_index):
    pick_a = a_value < b_value
    tie = a_value == b_value
    if inductor_is_floating(a_value):
        a_nan = a_value != a_value
        b_nan = b_value != b_value
        pick_a |= a_nan & (not b_nan)
        tie |= a_nan & b_nan
    pick_a |= tie & (a_index < b_index)
    return tl.where(pick_a, a_value, b_value), tl.where(pick_a, a_index, b_index)


@triton.jit
def inductor_max_with_index(value, index, dim):
    return tl.reduce((value, index), dim, inductor_maximum_with_index)


@triton.jit
def inductor_min_with_index(value, index, dim):
    return tl.reduce((value, index), dim, inductor_minimum_with_index)


@triton.jit
def inductor_multiply(a, b):
    return a * b


@triton.jit
def inductor_prod(value, axis):
    return tl.reduce(value, axis, inductor_multiply)


@triton.jit
def inductor_either(a, b):
    return a | b


@triton.jit
def inductor_any(a, dim):
    return tl.reduce(a, dim, inductor_either)


@triton.jit
def inductor_welford_reduce(value, mean, m2, weight, first_iteration):
    if first_iteration:
        new_weight = tl.full(weight.shape, 1, weight.dtype)
        new_mean = value
        new_m2 = tl.zeros_like(m2)
    else:
        delta = value - mean
        new_weight = weight + 1
        new_mean = mean + delta / new_weight
        new_m2 = m2 + delta * (value - new_mean)
    return new_mean, new_m2, new_weight


@triton.jit
def inductor_welford_combine(mean_1, m2_1, weight_1, mean_2, m2_2, weight_2):
    delta = tl.where(mean_1 == mean_2, 0.0, mean_2 - mean_1)
    weight = weight_1 + weight_2
    share_2 = tl.where(weight == 0.0, 0.0, weight_2 / weight)
    return mean_1 + delta * share_2, m2_1 + m2_2 + delta * delta * weight_1 * share_2, weight


@triton.jit
def inductor_welford(mean, m2, weight, dim):
    return tl.reduce((mean, m2, weight), dim, inductor_welford_combine)


@triton.jit
def inductor_exp(x, use_fast_math: tl.constexpr):
    # tl.exp in both modes: helpers are copied as written, and the interpreter has no libdevice.exp (the
    # precise exp Inductor calls without fast math)
    return tl.exp(x)


@triton.jit
def inductor_online_softmax_reduce(lhs_max, lhs_sum, dim, use_fast_math: tl.constexpr):
    out_max = inductor_max2(lhs_max, dim)
    out_max_keepdim = tl.expand_dims(out_max, dim)
    delta = tl.where(out_max_keepdim == float("-inf"), 0, lhs_max - out_max_keepdim)
    out_sum = tl.sum(lhs_sum * inductor_exp(delta, use_fast_math), dim)
    return out_max, out_sum


@triton.jit
def inductor_online_softmax_combine_with_sum(lhs_max, lhs_sum, rhs_max, rhs_sum, use_fast_math: tl.constexpr):
    out_max = inductor_maximum(lhs_max, rhs_max)
    lhs_scale = tl.where(out_max == float("-inf"), 1.0, inductor_exp(lhs_max - out_max, use_fast_math))
    rhs_scale = tl.where(out_max == float("-inf"), 1.0, inductor_exp(rhs_max - out_max, use_fast_math))
    return out_max, lhs_sum * lhs_scale + rhs_sum * rhs_scale


@triton.jit
def inductor_online_softmax_combine(lhs_max, lhs_sum, rhs_max, use_fast_math: tl.constexpr):
    # rhs is the next block of data, one element per lane: its sum is 1
    return inductor_online_softmax_combine_with_sum(lhs_max, lhs_sum, rhs_max, 1.0, use_fast_math)


# -- libdevice stand-ins for the interpreter (less exact than libdevice at the edges) ---------------------
@triton.jit
def portable_tanh(x):
    return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)


@triton.jit
def portable_log1p(x):
    return tl.log(1.0 + x)


@triton.jit
def portable_expm1(x):
    return tl.exp(x) - 1.0


@triton.jit
def portable_pow(x, y):
    return tl.exp2(y * tl.log2(x))


@triton.jit
def portable_isnan(x):
    return x != x


@triton.jit
def portable_isinf(x):
    return tl.abs(x) == float("inf")


@triton.jit
def portable_signbit(x):
    return x < 0


@triton.jit
def portable_trunc(x):
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))


@triton.jit
def portable_nearbyint(x):
    # round half to even, as rint does
    down = tl.floor(x)
    frac = x - down
    even = (down - 2.0 * tl.floor(down * 0.5)) == 0.0
    return tl.where(frac > 0.5, down + 1.0, tl.where(frac < 0.5, down, tl.where(even, down, down + 1.0)))


@triton.jit
def portable_tan(x):
    return tl.sin(x) / tl.cos(x)


# libdevice names with a tl equivalent, and the portable_* function for the rest.
LIBDEVICE_IN_TL = (
    "exp",
    "exp2",
    "log",
    "log2",
    "sqrt",
    "rsqrt",
    "erf",
    "abs",
    "floor",
    "ceil",
    "cos",
    "sin",
    "fma",
)
LIBDEVICE_PORTABLE = (
    "tanh",
    "log1p",
    "expm1",
    "pow",
    "isnan",
    "isinf",
    "signbit",
    "trunc",
    "nearbyint",
    "tan",
)
