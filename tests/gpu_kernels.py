"""Kernels with a known bottleneck, to check the profiler snapshot's classifier on real hardware.

Each case builds its inputs and returns a zero-argument function that launches the kernel once, plus
what was launched (grid, num_warps). Run as a script it is the program ncu profiles:

    python tests/gpu_kernels.py run CASE       # warm up, then one launch inside cudaProfilerStart/Stop
    python tests/gpu_kernels.py report CASE --device cpu --size small   # JSON: grid, warps, timing

``report`` also runs under TRITON_INTERPRET=1 on a CPU (tiny sizes), which the CPU tests use.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

import torch
import triton
import triton.language as tl

Case = tuple[Callable[[], object], dict]


@triton.jit
def spill_rownorm_kernel(X, Y, N, BLOCK: tl.constexpr):
    """Normalize one row held entirely in registers: with one warp and a huge BLOCK it must spill."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(X + row * N + offs, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / N
    centered = tl.where(mask, x - mean, 0.0)
    var = tl.sum(centered * centered, axis=0) / N
    y = centered * tl.rsqrt(var + 1e-5) + tl.exp(x) * 1e-3
    tl.store(Y + row * N + offs, y, mask=mask)


@triton.jit
def small_grid_rmsnorm_kernel(X, Y, N, BLOCK: tl.constexpr):
    """One program per row: with 8 rows, 8 programs for the whole GPU."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(X + row * N + offs, mask=mask, other=0.0)
    rms = tl.sqrt(tl.sum(x * x, axis=0) / N + 1e-6)
    tl.store(Y + row * N + offs, x / rms, mask=mask)


@triton.jit
def strided_gather_kernel(X, Y, M, N, BLOCK: tl.constexpr):
    """y[k] = x[k % M, k // M] on a row-major x: neighbouring threads read addresses N elements apart."""
    pid = tl.program_id(0)
    k = pid * BLOCK + tl.arange(0, BLOCK)
    mask = k < M * N
    row = k % M
    col = k // M
    x = tl.load(X + row * N + col, mask=mask, other=0.0)
    tl.store(Y + k, x, mask=mask)


@triton.jit
def atomic_hotspot_kernel(X, Out, total, SLOTS: tl.constexpr, BLOCK: tl.constexpr):
    """Every element atomically added into one of a few slots: atomics serialize on the same addresses."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    x = tl.load(X + offs, mask=mask, other=0.0)
    tl.atomic_add(Out + (offs % SLOTS), x, mask=mask)


def launch_spills(x: torch.Tensor, num_warps: int = 1) -> tuple[torch.Tensor, tuple[int, ...]]:
    m, n = x.shape
    y = torch.empty_like(x)
    grid = (m,)
    spill_rownorm_kernel[grid](x, y, n, BLOCK=triton.next_power_of_2(n), num_warps=num_warps)
    return y, grid


def launch_small_grid(x: torch.Tensor, num_warps: int = 4) -> tuple[torch.Tensor, tuple[int, ...]]:
    m, n = x.shape
    y = torch.empty_like(x)
    grid = (m,)
    small_grid_rmsnorm_kernel[grid](x, y, n, BLOCK=triton.next_power_of_2(n), num_warps=num_warps)
    return y, grid


def launch_strided(x: torch.Tensor, block: int = 1024, num_warps: int = 4) -> tuple[torch.Tensor, tuple]:
    m, n = x.shape
    y = torch.empty(m * n, device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(m * n, block),)
    strided_gather_kernel[grid](x, y, m, n, BLOCK=block, num_warps=num_warps)
    return y, grid


def launch_atomics(x: torch.Tensor, slots: int = 8, block: int = 1024, num_warps: int = 4) -> tuple:
    out = torch.zeros(slots, device=x.device, dtype=torch.float32)
    grid = (triton.cdiv(x.numel(), block),)
    atomic_hotspot_kernel[grid](x, out, x.numel(), SLOTS=slots, BLOCK=block, num_warps=num_warps)
    return out, grid


# name -> (kernel name, expected label, sizes on a GPU, tiny sizes for the CPU interpreter)
CASES: dict[str, dict] = {
    "spills": {
        "kernel": "spill_rownorm_kernel",
        "label": "register_spills",
        "gpu": {"M": 4096, "N": 16384, "num_warps": 1},
        "small": {"M": 4, "N": 64, "num_warps": 1},
    },
    "small_grid": {
        "kernel": "small_grid_rmsnorm_kernel",
        "label": "low_parallelism",
        "gpu": {"M": 8, "N": 4096, "num_warps": 4},
        "small": {"M": 8, "N": 256, "num_warps": 4},
    },
    "strided": {
        "kernel": "strided_gather_kernel",
        "label": "memory_access_pattern",
        "gpu": {"M": 8192, "N": 8192, "BLOCK": 1024, "num_warps": 4},
        "small": {"M": 128, "N": 128, "BLOCK": 32, "num_warps": 4},
    },
    "atomics": {
        "kernel": "atomic_hotspot_kernel",
        "label": "contention",
        "gpu": {"M": 4096, "N": 4096, "BLOCK": 1024, "num_warps": 4},
        "small": {"M": 16, "N": 64, "BLOCK": 64, "num_warps": 4},
    },
}


def build_case(name: str, device: str, size: str = "gpu") -> Case:
    """(launch-once function, {"kernel", "grid", "num_warps", "bytes"}) for a case at a size."""
    spec = CASES[name]
    sizes = spec[size]
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(sizes["M"], sizes["N"], generator=gen, dtype=torch.float32).to(device)
    warps = sizes["num_warps"]
    if name == "spills":
        fn = lambda: launch_spills(x, num_warps=warps)
    elif name == "small_grid":
        fn = lambda: launch_small_grid(x, num_warps=warps)
    elif name == "strided":
        fn = lambda: launch_strided(x, block=sizes["BLOCK"], num_warps=warps)
    else:
        fn = lambda: launch_atomics(x, block=sizes["BLOCK"], num_warps=warps)
    return fn, {"kernel": spec["kernel"], "num_warps": warps, "bytes": 2 * x.numel() * x.element_size()}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_profiled(name: str, warmup: int = 2) -> None:
    """Compile and warm up, then launch once between cudaProfilerStart/Stop (what ncu captures)."""
    fn, _ = build_case(name, "cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def report(name: str, device: str, size: str, repeats: int = 3) -> dict:
    """Launch the case ``repeats`` times and report what was launched and how long it took (measured)."""
    fn, meta = build_case(name, device, size)
    times, grid = [], None
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        _, grid = fn()
        _sync(device)
        times.append((time.perf_counter() - start) * 1e6)
    return {
        **meta,
        "case": name,
        "grid": list(grid) + [1] * (3 - len(grid)),
        "median_us": statistics.median(times),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["run", "report"])
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--size", choices=["gpu", "small"], default="gpu")
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args(argv)
    if args.mode == "run":
        run_profiled(args.case, args.warmup)
    else:
        print(json.dumps(report(args.case, args.device, args.size)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
