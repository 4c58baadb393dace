"""The output comparison: bf16 rounding of a row's own arithmetic passes where a task opts in, real
errors never do."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from tools.compare import compare, same_bits
from tools.task import load_task

TASKS = Path(__file__).parent.parent / "tasks"
GQA = load_task(TASKS / "gqa_decode")
RTOL, ATOL = GQA.tolerance("bfloat16")


def flash_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Decode attention as FlashAttention (and the gqa_decode variants) compute it: the probabilities
    are rounded to bf16 before the P @ V product."""
    b, hq, d = q.shape
    hkv = k.shape[1]
    qg = q.view(b, hkv, hq // hkv, d).float()
    s = torch.einsum("bkgd,bksd->bkgs", qg, k.float()) / math.sqrt(d)
    p = torch.exp(s - s.amax(-1, keepdim=True))
    o = torch.einsum("bkgs,bksd->bkgd", p.to(torch.bfloat16).float(), v.float()) / p.sum(-1, keepdim=True)
    return o.reshape(b, hq, d).to(q.dtype)


def test_gqa_decode_opts_in_and_bf16_probabilities_pass():
    """Seen on the H200: heads whose V is scaled x100 have outputs ~10, where one bf16 step is 0.06; an
    element near zero in such a row differs by that step. Elementwise rtol alone rejected every
    flash-style kernel (and torch SDPA)."""
    assert GQA.row_scaled
    q, k, v = GQA.make_inputs({"B": 32, "S": 4096}, torch.bfloat16, "cpu", 0)
    expected, got = GQA.reference(q, k, v), flash_decode(q, k, v)
    assert compare(got, expected, RTOL, ATOL) is not None  # the element rule alone: rejected
    assert compare(got, expected, RTOL, ATOL, row_scale=True) is None


def test_attention_that_drops_a_key_or_the_scale_still_fails():
    q, k, v = GQA.make_inputs({"B": 4, "S": 4096}, torch.bfloat16, "cpu", 0)
    expected = GQA.reference(q, k, v)
    for wrong in (
        flash_decode(q, k[:, :, :-1], v[:, :, :-1]),
        flash_decode(q, k[:, :, 1:], v[:, :, 1:]),
        flash_decode(q * math.sqrt(128), k, v),
    ):
        assert compare(wrong, expected, RTOL, ATOL, row_scale=True) is not None


def test_other_tasks_keep_the_element_rule():
    """An exact output (the residual sum h of add_rmsnorm) may not drift by rtol of its row's scale."""
    task = load_task(TASKS / "add_rmsnorm")
    assert not task.row_scaled
    x, r, w = task.make_inputs({"M": 8, "N": 256}, torch.bfloat16, "cpu", 0)
    _, h = task.reference(x, r, w)
    drifted = h.clone()
    drifted[1:] += 0.03
    rtol, atol = task.tolerance("bfloat16")
    assert compare(drifted, h, rtol, atol) is not None


def test_row_scale_keeps_each_row_its_own_and_ignores_1d_and_short_rows():
    expected = torch.stack([torch.full((64,), 0.01), torch.linspace(-100, 100, 64)]).to(torch.bfloat16)
    got = expected.clone()
    got[0, 5] = 0.05  # 4x off in the small row: wrong, whatever the other row holds
    found = compare(got, expected, RTOL, ATOL, row_scale=True)
    assert found is not None and found[1]["index"] == [0, 5]
    got = expected.clone()
    got[1, 31] += 0.5  # one bf16 step at 100 in the large row: rounding, not an error
    assert compare(got, expected, RTOL, ATOL, row_scale=True) is None
    # 1-D outputs and rows of pairs are never row-scaled: [1000, 1, 1, ...] with the 1s off by 24% fails
    flat = torch.cat([torch.tensor([1000.0]), torch.ones(4095)])
    assert compare(torch.cat([flat[:1], flat[1:] * 0.76]), flat, RTOL, ATOL, row_scale=True) is not None
    pairs = torch.tensor([[100.0, 1.0]] * 8)
    assert compare(torch.tensor([[100.0, 2.4]] * 8), pairs, RTOL, ATOL, row_scale=True) is not None


def test_an_infinity_of_the_reference_must_be_matched_by_the_same_infinity():
    """A finite value, or the other infinity, where the reference has an infinity is wrong, however large
    the tolerance an infinite reference value would otherwise give it."""
    expected = torch.tensor([float("inf"), -float("inf"), 2.0]).repeat(100)
    for wrong in (expected.nan_to_num(posinf=0.0), expected.neg()):
        found = compare(wrong.clone(), expected, 1e-2, 1e-2)
        assert found is not None and found[0] == "mismatch", found
    assert compare(expected.clone(), expected, 1e-2, 1e-2) is None


def test_close_and_wrong_outputs_of_every_float_width_get_the_same_verdicts():
    """The short path (16-bit floats compared in fp32) and the full scan agree: close passes, one element
    off fails at that element, a NaN is reported as a NaN."""
    torch.manual_seed(0)
    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
        expected = torch.randn(64, 257).to(dtype)
        close = (expected.double() * (1 + 1e-3)).to(dtype)
        assert compare(close, expected, 2e-2, 1e-2) is None
        off = close.clone()
        off[7, 9] += 1.0
        assert compare(off, expected, 2e-2, 1e-2)[1]["index"] == [7, 9]
        nan = close.clone()
        nan[3, 4] = float("nan")
        assert compare(nan, expected, 2e-2, 1e-2)[0] == "nan"


def test_two_calls_are_the_same_bits_up_to_signed_zeros_and_nan_payloads_only():
    x = torch.tensor([1.0, -0.0, math.nan, 3.0])
    payload = torch.tensor([1.0, 0.0, math.nan, 3.0])
    payload.view(torch.int32)[2] = 0x7FC00001  # another NaN's bits
    assert same_bits((x, torch.ones(2)), (x.clone(), torch.ones(2)))
    assert same_bits((x,), (payload,))  # +0/-0 and the NaN's payload: the same values
    assert not same_bits((x,), (torch.tensor([1.0, 0.0, 2.0, 3.0]),))  # a number where a NaN was
    assert not same_bits((x,), (torch.tensor([1.0, 0.0, math.nan, 3.5]),))
    assert same_bits((torch.tensor(2.0),), (torch.tensor(2.0),))  # 0-d outputs
