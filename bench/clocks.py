"""The user's clock: one eager call as a user makes it, host work included (the device's clock, the
CUDA-graph replay that every candidate is scored by, is tools.timing.time_fn).

Before each timed call the L2 is flushed and the GPU drained, so the call starts on an idle GPU: the
start event runs at once and the interval to the end event holds the call's Python (argument checks,
dispatch, allocation, the launch itself) as well as its kernels. Without the drain the host would
queue the call while the GPU is still busy with the flush, and the host work would hide behind it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch

from tools.timing import Timed, TimingSettings, flush_l2

MAX_CALLS = 500


def _one_call_ms(fn: Callable[[], object], start: torch.cuda.Event, end: torch.cuda.Event) -> float:
    flush_l2()
    torch.cuda.synchronize()
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def eager_ms(fn: Callable[[], object], warmup_ms: float, rep_ms: float) -> float:
    """Median milliseconds of ``fn`` called eagerly on an idle GPU, each call after ``flush_l2``.

    tools.timing.bench_ms's schedule: five calls estimate the time, then about ``warmup_ms`` of warm-up
    calls and ``rep_ms`` of timed ones (counting the calls only, not the flushes between them), at most
    MAX_CALLS: a 5 us call would otherwise take 3000 flushes and drains per median."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    estimate_ms = max(statistics.median(_one_call_ms(fn, start, end) for _ in range(5)), 1e-4)
    for _ in range(max(1, int(warmup_ms / estimate_ms))):
        fn()
    samples = [_one_call_ms(fn, start, end) for _ in range(min(MAX_CALLS, max(1, int(rep_ms / estimate_ms))))]
    return statistics.median(samples)


def user_clock(fn: Callable[[], object], settings: TimingSettings) -> Timed:
    """Median of ``repeats`` ``eager_ms`` medians; ``spread`` = median / min over the repeats."""
    samples = [
        1000.0 * eager_ms(fn, settings.warmup_ms, settings.rep_ms) for _ in range(max(settings.repeats, 3))
    ]
    median, low = statistics.median(samples), min(samples)
    return Timed(
        median_us=median, min_us=low, spread=median / low if low > 0 else float("inf"), method="eager"
    )
