"""The judge's reference cache: input sets drawn from torch's global generator stay what make_inputs
makes alone, even while the judge's own work saves and restores that generator (torch.compile does
around every trace)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

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
