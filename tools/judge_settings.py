"""The judge's settings and the verdict it states (shared by the judge's modules)."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tools.sandbox import MAX_OPEN_FILES
from tools.timing import TimingSettings

FRESH_SEED = 1000  # fresh values written into the same buffers: seed + 1000
SAMPLES_PER_OUTPUT = 256  # positions checked in the output of every timed replay
TASK_ERROR = {"task_error": True}


@dataclass
class JudgeSettings:
    seeds: int = 3
    check_timeout_s: float = 240.0
    timing_timeout_s: float = 300.0
    parallel: int = 2
    max_open_files: int = MAX_OPEN_FILES
    cpu_address_space_bytes: int = 12 << 30
    file_bytes: int = 1 << 30
    timing: TimingSettings = field(default_factory=TimingSettings)
    references_share: float = 0.3  # of the device's memory, for the input sets and expected outputs
    # The re-measure of a win: the judge's wall clock over K replays against the worker's own events.
    confirm_wall_ms: float = 100.0
    confirm_band: float = 0.15
    confirm_band_us: float = 3.0
    confirm_content_ratio: float = 1.25  # rotating inputs this much slower than repeated ones: a cache
    # Time each candidate as soon as it passes, while others are still checked: their Triton compiling is
    # moved into commands that launch nothing, and the GPU gate keeps every check off the GPU during a
    # timed run (tools/gpu_gate.py). Off: every check of a group (max_waiting) ends before its first timing.
    overlap_timing: bool = False
    # Without overlap: a group's passed candidates are timed as soon as the group is closed, while its last
    # checks (often one slow Triton compile) still run: those compile in commands that launch nothing, and
    # each shape of a timing has the GPU to itself (the gate). Off: a group's timings wait for all its checks.
    early_timing: bool = False
    # Passed candidates waiting for their timing at once, each a worker with its own CUDA context. Without
    # overlap, a batch is checked and timed in groups of at most this many (at least ``parallel``, so that
    # every check worker has work), a group on a GPU closing earlier when the device's free memory runs short
    # (tools/batch_groups.py: a whole 24-candidate softmax batch of waiting workers filled an H200); with
    # overlap, at most parallel + 1 candidates are alive.
    max_waiting: int = 32
    # Triton's C launchers (one per kernel signature, about 0.3 s of a C compiler each in every fresh worker)
    # built once by a trusted process and copied into each later worker's cache (tools/launcher_cache.py).
    # A copy is made only where the worker has none of that key, whole, by a rename (a launcher written over
    # one a worker had loaded killed it). On an H100 (2026-12-08) this cut add_rmsnorm's checking from 7.2 to
    # 5.4 s a candidate, with the same timings; the probes and GPU hardening tests passed with it on.
    prebuilt_launchers: bool = True
    # The Triton launcher signatures this machine's judges built before (type names only, read back with
    # the same check as a worker's claim): built again at a judge's start, so the first workers of a run
    # find their launchers too (tools/launcher_cache.py). Empty: each judge learns them anew.
    launcher_memory: str = str(Path.home() / ".cache" / "kernel-agent" / "triton_launchers.json")


class Verdict(Exception):
    """A candidate's failure, as the judge states it."""

    def __init__(self, stage: str, error_type: str, message: str, log: str = "", details: dict | None = None):
        super().__init__(message)
        self.fields = {"verdict": "fail", "stage": stage, "error_type": error_type, "message": message,
                       "log": log[-20000:], "details": details or {}}  # fmt: skip


def device_info(device: str) -> dict[str, Any]:
    import triton

    name = torch.cuda.get_device_name() if device == "cuda" else "cpu (Triton interpreter)"
    return {"name": name, "triton": triton.__version__, "torch": torch.__version__.split("+")[0],
            "interpreted": device != "cuda"}  # fmt: skip


def device_limits(device: str) -> dict[str, int]:
    limits = {"registers_per_sm": 65536, "shared_bytes_per_block": 232448, "sm_count": 132}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        limits["sm_count"] = props.multi_processor_count
        limits["registers_per_sm"] = getattr(props, "regs_per_multiprocessor", 65536)
        limits["shared_bytes_per_block"] = getattr(props, "shared_memory_per_block_optin", 232448)
    return limits


def _died(returncode: int | None, stage: str, log: str) -> Verdict:
    if returncode == -signal.SIGXCPU:
        return Verdict(stage, "timeout", "the worker used up its CPU-time limit (SIGXCPU): the candidate computes on the host", log)
    if returncode == -signal.SIGXFSZ:
        return Verdict(stage, "crash", "the worker wrote a file over its size limit (SIGXFSZ): it flooded its output", log)
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name
        return Verdict(stage, "crash", f"the worker died with {name} (e.g. an out-of-bounds access)", log)
    return Verdict(stage, "crash", f"the worker exited with status {returncode} without a result", log)


