"""What a fresh candidate worker pays before its kernels run: seconds per first use, on the GPU box.

    python3 bench/worker_first_use.py [--prof]        (PREWARM_UTILS=1: Triton's driver module first)

A fresh process with a fresh Triton cache, as every check worker has: imports, the CUDA context, Triton's
C driver module, then add_rmsnorm's baseline (ROWS=1, 8 warps) called at the task's compile and check
shapes, each first call split into Triton's compile (its compilation listener) and the rest (the launcher
build, loading). Prints one JSON line; ``--prof`` adds a profile of the first call. Start several at once
to see what a batch's workers cost each other.
"""

from __future__ import annotations

import cProfile
import importlib.util
import inspect
import io
import json
import os
import pstats
import sys
import tempfile
import time

STARTED = time.perf_counter()
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="first_use_cache_")

import torch  # noqa: E402
import triton  # noqa: E402

SHAPES = [(4, 256), (1, 1), (5, 1000), (9, 4097), (17, 96), (1, 4096)]


def main() -> None:
    marks: dict[str, object] = {"import": round(time.perf_counter() - STARTED, 4)}
    profile = cProfile.Profile() if "--prof" in sys.argv else None

    def timed(name: str, step) -> None:
        t = time.perf_counter()
        step()
        marks[name] = round(time.perf_counter() - t, 4)

    if os.environ.get("PREWARM_UTILS"):
        timed("utils_prewarm", lambda: triton.runtime.driver.active.utils)
    timed("cuda_ctx", lambda: (torch.zeros(1, device="cuda"), torch.cuda.synchronize()))
    timed("driver_utils", lambda: triton.runtime.driver.active.utils)
    spec = importlib.util.spec_from_file_location("first_use_candidate", "tasks/add_rmsnorm/baseline.py")
    module = importlib.util.module_from_spec(spec)
    timed("import_cand", lambda: spec.loader.exec_module(module))
    jit = [0.0]

    def heard(*, times=None, **_) -> None:
        jit[0] += (times.ir_initialization + times.total_lowering + times.store_results) / 1e6

    triton.knobs.compilation.listener = heard
    for i, (m, n) in enumerate(SHAPES):
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        r, w = torch.randn_like(x), torch.randn(n, device="cuda", dtype=torch.bfloat16)
        if profile and i == 0:
            profile.enable()
        before = jit[0]
        timed(f"launch_{m}x{n}", lambda x=x, r=r, w=w: (module.launch(x, r, w, ROWS=1, num_warps=8), torch.cuda.synchronize()))
        if profile and i == 0:
            profile.disable()
        marks[f"jit_{m}x{n}"] = round(jit[0] - before, 4)
    marks["total"] = round(time.perf_counter() - STARTED, 3)
    marks["cpu_s"] = round(sum(os.times()[:2]), 3)
    from triton.backends.nvidia import driver

    marks["launcher_compiles_c"] = "compile_module_from_src" in inspect.getsource(driver.CudaLauncher)
    print(json.dumps(marks), flush=True)
    if profile:
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(35)
        print(text.getvalue())


if __name__ == "__main__":
    main()
