"""The log each timed replay leaves for the judge (tools.replay_log), run on real Triton kernels (the
interpreter without a GPU): every poisoned element counted, past one block and one program's share, and the
sampled values written exactly as the output holds them."""

from __future__ import annotations

import math

import pytest
import torch

from tools import replay_log
from tools.timing import poison_value

CASES = [torch.bfloat16, torch.float16, torch.float32, torch.int32, torch.int64, torch.uint8]


def logged(out: torch.Tensor, flat: torch.Tensor) -> list[float]:
    row = torch.zeros(1 + flat.numel(), dtype=torch.float64)
    replay_log.row_writer(out, poison_value(out.dtype), flat, row)()
    return row.tolist()


@pytest.mark.parametrize("dtype", CASES, ids=str)
def test_every_element_left_poisoned_is_counted_and_samples_are_exact(dtype: torch.dtype):
    n = 3 * replay_log.BLOCK + 17  # several blocks, a ragged tail
    out = (torch.arange(n).remainder(97) + 1).to(dtype)  # never the poison (0 for uint8)
    poison = poison_value(dtype)
    unwritten = torch.tensor([0, 5, replay_log.BLOCK, n - 1])
    out[unwritten] = poison
    flat = torch.tensor([1, 5, 2 * replay_log.BLOCK + 3, n - 1])
    row = logged(out, flat)
    assert row[0] == unwritten.numel()
    want = out[flat].to(torch.float64).tolist()
    assert all((math.isnan(a) and math.isnan(b)) or a == b for a, b in zip(row[1:], want, strict=True))


def test_a_fully_written_output_logs_no_poison():
    out = torch.randn(5000, dtype=torch.bfloat16)
    assert logged(out, torch.tensor([0, 4999]))[0] == 0


def test_more_blocks_than_programs_are_all_counted(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(replay_log, "MAX_PROGRAMS", 2)  # each program loops over several blocks
    out = torch.zeros(7 * replay_log.BLOCK, dtype=torch.float32)
    out[:: replay_log.BLOCK] = math.nan
    assert logged(out, torch.tensor([0]))[0] == 7


def test_outputs_the_kernels_do_not_cover_keep_torchs_steps():
    assert not replay_log.covered(torch.zeros(4, dtype=torch.bool), None)  # bool is never poisoned
    assert not replay_log.covered(torch.zeros(4, 4).t(), math.nan)  # not contiguous
    assert not replay_log.covered(torch.zeros(4), math.nan)  # not on the GPU
