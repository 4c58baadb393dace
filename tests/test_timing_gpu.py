"""The timing loop on a real GPU: the L2 flush really evicts, and it charges nothing of its own.

Run on the H200: `python -m pytest tests/test_timing_gpu.py -m gpu -s` (prints what it measured).
"""

from __future__ import annotations

import pytest
import torch

from tools import timing
from tools.timing import TimingSettings, bench_ms, copy_bandwidth_gbps

pytestmark = pytest.mark.gpu


def test_a_kernel_whose_data_fits_in_l2_is_timed_cold(monkeypatch):
    x = torch.randn(8 << 20, device="cuda")  # 32 MB: fits in the L2, so only a flush keeps it cold
    out = torch.empty((), device="cuda")

    def read() -> None:
        torch.sum(x, dim=0, out=out)

    cold = bench_ms(read, 5, 20)
    # The same loop with the flush replaced by a GPU spin of about its length that touches no memory.
    monkeypatch.setattr(timing, "flush_l2", lambda: torch.cuda._sleep(100_000))
    warm = bench_ms(read, 5, 20)
    print(f"32 MB read: {cold * 1000:.1f} us flushed, {warm * 1000:.1f} us from a warm L2")
    assert cold > 1.2 * warm


def test_a_read_only_kernel_pays_for_no_dirty_line_of_the_flush():
    import triton.testing

    x = torch.randn(64 << 20, device="cuda")  # 256 MB, read once
    out = torch.empty((), device="cuda")

    def read() -> None:
        torch.sum(x, dim=0, out=out)

    ours = bench_ms(read, 5, 30)
    zeroing = triton.testing.do_bench(read, warmup=5, rep=30, return_mode="median")
    gbps = x.numel() * 4 / (ours * 1e-3) / 1e9
    copy = copy_bandwidth_gbps(TimingSettings())
    print(
        f"256 MB read: {ours * 1000:.1f} us ({gbps:.0f} GB/s; copy {copy:.0f} GB/s), do_bench {zeroing * 1000:.1f} us"
    )
    assert ours < 0.95 * zeroing  # do_bench's zero_ flush leaves ~L2-size dirty lines to write back
    assert gbps < 1.25 * copy  # and no faster than the memory can deliver: the data came from DRAM
