"""The judge's reference cache: input sets drawn from torch's global generator stay what make_inputs
makes alone, even while the judge's own work saves and restores that generator (torch.compile does
around every trace)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import torch

from tools.references import ReferenceCache
from tools.task import load_task

REFERENCE = '''
import threading
import time
import torch

LOCK = threading.Lock()  # the judge draws several sets at once: shared state is the task's to lock


def reference(a, b):
    return a - b


def make_inputs(shape, dtype, device, seed):
    with LOCK:
        torch.manual_seed(seed)  # the global generator, as most tasks draw
        a = torch.randn(shape["N"], dtype=dtype, device=device)
        time.sleep(0.003)  # a slow generator: the window another thread's restore can fall into
        b = torch.randn(shape["N"], dtype=dtype, device=device)
    return a, b
'''


def _task(tmp_path: Path):
    (tmp_path / "reference.py").write_text(REFERENCE)
    spec = {"name": "global_rng", "description": "a - b", "reference": "reference.py",
            "inputs": "reference.py:make_inputs", "dtype": "float32", "shapes": [{"N": 64}]}  # fmt: skip
    (tmp_path / "task.json").write_text(json.dumps(spec))
    return load_task(tmp_path)


def test_entries_made_while_the_judge_restores_the_generator_are_the_ones_made_alone(tmp_path):
    task = _task(tmp_path)
    wanted = [({"N": 64}, "float32", seed) for seed in range(40)]
    cache = ReferenceCache(task, "cpu", 0)
    stop = threading.Event()

    def like_a_trace() -> None:  # what torch.compile does around a trace, under the judge's exclusive hold
        while not stop.is_set():
            with cache.alone.exclusive():
                saved = torch.random.get_rng_state()
                time.sleep(0.001)
                torch.random.set_rng_state(saved)
            time.sleep(0.001)  # the judge holds it now and then (anchors), never back to back

    disturber = threading.Thread(target=like_a_trace)
    disturber.start()
    try:
        cache.prefetch(wanted, threads=4)
    finally:
        stop.set()
        disturber.join()
    for shape, dtype, seed in wanted:
        a, b = cache.get(shape, dtype, seed).inputs
        alone_a, alone_b = task.make_inputs(shape, torch.float32, "cpu", seed)
        assert not torch.equal(a, b), f"seed {seed}: both inputs drawn from the same generator state"
        assert torch.equal(a, alone_a) and torch.equal(b, alone_b), f"seed {seed}"


PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """KL divergence between two row distributions given as scores."""

    def forward(self, p, q):
        return torch.nn.functional.kl_div(torch.log_softmax(p, -1), torch.softmax(q, -1), reduction="batchmean")


rows = 64
cols = 128


def get_inputs():
    return [torch.randn(rows, cols), torch.randn(rows, cols)]


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_problems_inputs_drawn_by_the_judges_threads_from_a_fresh_task_are_the_ones_drawn_alone(
    tmp_path, device
):
    """A KernelBench-format problem draws from torch's global generator: the judge's threads, each asking
    for make_inputs first thing, get the one reference module and its one-at-a-time lock, so no input set
    has its two draws equal (the KL of a set with p == q is 0). With the task's module imported once per
    thread (Python 3.12, no lock in cached_property) 5 of 17 runs of this test failed."""
    import sys

    from tools.judge import SWITCH_INTERVAL_S
    from tools.kernelbench import import_problem

    (tmp_path / "kl.py").write_text(PROBLEM)
    imported = import_problem(tmp_path / "kl.py", tmp_path / "tasks", "float32")
    wanted = [(shape, "float32", seed) for shape in imported.spec["shapes"] for seed in range(6)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        cache = ReferenceCache(load_task(imported.folder), device, 1 << 30)
        cache.prefetch(wanted, threads=8)
    finally:
        sys.setswitchinterval(interval)
    alone = load_task(imported.folder)
    for shape, dtype, seed in wanted:
        entry = cache.get(shape, dtype, seed)
        p, q = entry.inputs
        assert not torch.equal(p, q), f"{shape} seed {seed}: both inputs drawn from the same generator state"
        assert torch.equal(p, alone.make_inputs(shape, torch.float32, device, seed)[0])
        assert float(entry.expected[0]) > 0.5, f"{shape} seed {seed}: KL {float(entry.expected[0])}"
