"""The program ncu profiles: one candidate at one shape, warmed up, then one launch in a profiler range.

    python -m tools.profile_target TASK_DIR CANDIDATE.py --config JSON --shape JSON --dtype bfloat16

Warm-up launches compile the kernels (and fill Triton's caches) outside the range; ncu runs with
``--profile-from-start off`` and measures only what happens between cudaProfilerStart and Stop.
Prints nothing on stdout, which ncu shares with its CSV.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from tools.task import import_file, load_task, torch_dtype


def profile_once(
    task_dir: str, candidate: str, config: dict, shape: dict, dtype: str, warmup: int = 2
) -> None:
    import torch

    task = load_task(task_dir)
    module = import_file(Path(candidate), "_ka_profiled_candidate")
    inputs = task.make_inputs(shape, torch_dtype(dtype), "cuda", seed=0)
    for _ in range(warmup):
        module.launch(*inputs, **config)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    module.launch(*inputs, **config)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def enter_sandbox(scratch: str | None) -> Path:
    """The candidate's code runs here as in the evaluator's workers: in a scratch folder that holds its
    Triton cache and temp files, under the same audit hook (no writes elsewhere, no sockets, no foreign
    programs), so profiling an untrusted kernel cannot touch the run folder or the case library."""
    from tools.worker import _enter_sandbox, _set_triton_cache

    sys.dont_write_bytecode = True  # no __pycache__ beside the task or the candidate
    folder = Path(scratch) if scratch else Path(tempfile.mkdtemp(prefix="ka-profile-"))
    (folder / "tmp").mkdir(parents=True, exist_ok=True)
    os.environ["TRITON_CACHE_DIR"] = str(folder / "triton_cache")
    os.environ["TMPDIR"] = str(folder / "tmp")
    tempfile.tempdir = None
    _set_triton_cache(os.environ["TRITON_CACHE_DIR"])
    os.chdir(folder)
    _enter_sandbox()
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.profile_target", description=__doc__.splitlines()[0]
    )
    parser.add_argument("task")
    parser.add_argument("candidate")
    parser.add_argument("--config", default="{}", help="JSON object of launch() keyword arguments")
    parser.add_argument("--shape", required=True, help='JSON object, e.g. {"M": 4096, "N": 4096}')
    parser.add_argument("--dtype", required=True)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--scratch", default=None, help="folder for the candidate's cache and temp files")
    args = parser.parse_args(argv)
    enter_sandbox(args.scratch)
    profile_once(
        args.task, args.candidate, json.loads(args.config), json.loads(args.shape), args.dtype, args.warmup
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
