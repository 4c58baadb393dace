"""The judge's reference cache: each (shape, dtype, seed) input set and the reference's outputs for it,
made once per run and kept where no candidate runs.

A task's ``make_inputs`` may be slow (a CPU generator at hundreds of millions of elements takes
seconds per set); every candidate of a run is checked against the same sets, so they are made once,
in parallel, and candidates only ever see copies. Entries stay on the device up to a byte budget and
on the host beyond it.

``make_inputs`` usually draws from torch's global generators, which the judge's own work on the
reference disturbs (torch.compile saves and restores them around a trace: in the middle of another
thread's draws, two inputs come out equal). ``alone`` keeps them apart: entries are made under its
shared hold, and the judge runs that work under its exclusive one.
"""

from __future__ import annotations

import contextlib
import threading
import traceback
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from tools import staging
from tools.gpu_gate import GpuGate
from tools.task import Task, torch_dtype

Key = tuple[str, str, int]  # (shape as sorted JSON, dtype, seed)


class TaskFailure(Exception):
    """The task's own make_inputs or reference failed: a verdict on the task, not on a candidate."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.message, self.log = message, log


@dataclass
class Entry:
    """One input set and the reference's outputs for it. ``image`` is the arena's input region as a worker
    must find it (``staging.input_image``); ``inputs`` are views into it."""

    inputs: tuple[torch.Tensor, ...]
    expected: tuple[torch.Tensor, ...]
    dtype: str
    image: torch.Tensor

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.inputs, *self.expected))

    def input_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.inputs)

    def output_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.expected)


def shape_key(shape: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(shape.items()))


class ReferenceCache:
    def __init__(self, task: Task, device: str, device_budget_bytes: int, gpu_gate: GpuGate | None = None):
        self.task = task
        self.device = device
        self.budget = device_budget_bytes
        self.on_device = 0
        self._entries: dict[Key, Entry | TaskFailure] = {}
        self._locks: dict[Key, threading.Lock] = {}
        self._guard = threading.Lock()
        self.seconds = 0.0  # spent making inputs and references
        self.alone = GpuGate()  # shared: making entries; exclusive: what touches the task's global state
        # the judge's GPU gate: an entry made while a candidate is timed would run in its events
        self.gpu = gpu_gate or GpuGate()

    def get(self, shape: dict[str, int], dtype: str, seed: int) -> Entry:
        key = (shape_key(shape), dtype, seed)
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._entries:
                self._entries[key] = self._make(shape, dtype, seed)
        found = self._entries[key]
        if isinstance(found, TaskFailure):
            raise found
        return found

    def prefetch(self, wanted: Iterable[tuple[dict[str, int], str, int]], threads: int) -> None:
        """Make these entries now, ``threads`` at a time (task failures are kept for ``get``)."""
        wanted = list(wanted)

        def one(item: tuple[dict[str, int], str, int]) -> None:
            with contextlib.suppress(TaskFailure):
                self.get(*item)

        with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            list(pool.map(one, wanted))
        if self.device == "cuda":
            # ``threads`` references made at once leave their intermediates (and the device copies of the
            # entries kept on the host) in the allocator's cache, memory the workers need: at softmax's
            # 1 GiB tensors the judge's process held 116.6 GiB of the H200 when it ran out of memory
            torch.cuda.empty_cache()

    def _make(self, shape: dict[str, int], dtype: str, seed: int) -> Entry | TaskFailure:
        import time

        started = time.perf_counter()
        try:
            with self.alone.shared(), self.gpu.shared():
                inputs = _inputs(self.task, shape, dtype, self.device, seed)
                expected = _reference(self.task, inputs, shape)
                image, packed = staging.input_image(inputs)
        except TaskFailure as failure:
            return failure
        finally:
            with self._guard:
                self.seconds += time.perf_counter() - started
        entry = Entry(packed, expected, dtype, image)
        with self._guard:
            keep_here = self.device == "cpu" or self.on_device + entry.nbytes <= self.budget
            if keep_here:
                self.on_device += entry.nbytes if self.device != "cpu" else 0
        if not keep_here:  # over the device budget: keep it on the host, copied in on use
            with self.gpu.shared():  # copies off the device are GPU work too
                host = image.cpu()
                entry = Entry(staging.image_views(host, packed), tuple(t.cpu() for t in expected), dtype, host)
        return entry


def _inputs(task: Task, shape: dict[str, int], dtype: str, device: str, seed: int) -> tuple[torch.Tensor, ...]:
    try:
        made = task.make_inputs(dict(shape), torch_dtype(dtype), device, seed)
    except Exception as exc:
        derived = dict(shape) in task.derived_cpu_shapes and device == "cpu"
        hint = " (a CPU shape shrunk from the task's shapes: name cpu_shapes in task.json to choose them)" if derived else ""
        raise TaskFailure(f"the task's make_inputs failed for {shape}{hint}: {exc}", _tb(exc)) from None
    if not made or not all(isinstance(t, torch.Tensor) for t in made):
        raise TaskFailure(f"the task's make_inputs({shape}) must return a tuple of tensors")
    if any(t.device.type != torch.device(device).type for t in made):
        raise TaskFailure(f"the task's make_inputs({shape}) returned tensors on another device than {device}")
    return tuple(t.detach() for t in made)


def _reference(task: Task, inputs: tuple[torch.Tensor, ...], shape: dict[str, int]) -> tuple[torch.Tensor, ...]:
    try:
        with torch.no_grad():
            out = task.reference(*[t.clone() for t in inputs])
    except Exception as exc:
        raise TaskFailure(f"the task's reference raised at {shape}: {exc}", _tb(exc)) from None
    out = tuple(out) if isinstance(out, tuple | list) else (out,)
    if not all(isinstance(t, torch.Tensor) for t in out):
        raise TaskFailure(f"the task's reference must return tensors (at {shape})")
    return tuple(t.detach().contiguous() for t in out)


def _tb(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
