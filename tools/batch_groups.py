"""How many candidate workers a batch keeps alive. Without overlap a batch is checked and timed in
groups: every check of a group ends before its first timing, so that no check shares the GPU with a timed
run. With overlap (a candidate timed as soon as it passed) ``AliveLimit`` bounds the workers alive.

A candidate that passed keeps its worker (a CUDA context, its arena, its cached memory) until it is
timed. A group therefore closes when it holds ``cap`` candidates, or, on a GPU, when the device's free
memory would not hold two more workers of the size this group's have grown to on top of a floor: a fixed
group size either filled an H200 (a 24-candidate softmax batch) or split small batches for nothing (an
add_rmsnorm batch of 24 in 16 + 8, its second group's checks on 8 of 15 workers).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

FLOOR_SHARE = 0.1  # of the device's memory, never given to waiting workers
MARGIN_WORKERS = 2  # room for this many more workers of the group's mean size before one more starts


class MemoryRoom:
    """Whether one more worker fits while ``alive`` of this group hold memory (``free_bytes()``: the
    device's free bytes, every process counted)."""

    def __init__(self, free_bytes: Callable[[], int], total_bytes: int):
        self._free_bytes = free_bytes
        self._floor = FLOOR_SHARE * total_bytes
        self._start = free_bytes()

    def __call__(self, alive: int) -> bool:
        free = self._free_bytes()
        per_worker = max(0, self._start - free) / max(1, alive)
        return free - MARGIN_WORKERS * per_worker > self._floor


class AliveLimit:
    """Candidate workers alive at once in a batch timed as it is checked (overlap): at most ``cap``, and
    one more only while ``fits(alive)`` says the device's free memory holds it (always the first)."""

    POLL_S = 0.5  # a worker's memory comes back when its process has ended, which nothing announces

    def __init__(self, cap: int, fits: Callable[[int], bool] | None = None):
        self.cap, self._fits = cap, fits or (lambda _alive: True)
        self._cond = threading.Condition()
        self.count = 0

    def enter(self) -> None:
        with self._cond:
            while not (self.count == 0 or (self.count < self.cap and self._fits(self.count))):
                self._cond.wait(self.POLL_S)
            self.count += 1

    def leave(self) -> None:
        with self._cond:
            self.count -= 1
            self._cond.notify_all()


class _Alive:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def add(self, n: int) -> None:
        with self._lock:
            self.count += n


def check_in_groups(
    jobs: Iterable[dict[str, Any]],
    parallel: int,
    cap: int,
    check: Callable[[dict[str, Any]], bool],
    time_group: Callable[[threading.Event], None],
    room: Callable[[], Callable[[int], bool]] | None = None,
    time_early: bool = False,
) -> int:
    """Check ``jobs`` on ``parallel`` threads; ``check(job)`` says whether the job passed and waits to be
    timed. A group closes at ``cap`` waiting or running candidates, or when ``room()`` (made afresh per
    group) says no more fit; ``time_group(checked)`` then times the group's passed candidates until
    ``checked`` is set (every check of the group ended) and none waits. It is called once every check of
    the group has ended, or with ``time_early`` as soon as the group is closed (its last checks, often one
    slow compile, then run beside the timings). Every group takes at least one job. Returns the number of
    groups."""
    pending, groups = deque(jobs), 0
    while pending:
        groups += 1
        fits = room() if room is not None else (lambda _alive: True)
        alive, slots = _Alive(), threading.Semaphore(parallel)
        futures: list[Future] = []
        checked = threading.Event()
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            while pending:
                slots.acquire()
                if alive.count >= cap or (alive.count and not fits(alive.count)):
                    slots.release()
                    break
                alive.add(1)
                futures.append(pool.submit(_run, check, pending.popleft(), alive, slots))
            _set_when_done(futures, checked)
            if time_early:
                time_group(checked)
            for future in futures:
                future.result()
        if not time_early:
            checked.wait()
            time_group(checked)
    return groups


def _set_when_done(futures: list[Future], event: threading.Event) -> None:
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_future: Future) -> None:
        with lock:
            left[0] -= 1
            if left[0] == 0:
                event.set()

    if not futures:
        event.set()
    for future in futures:
        future.add_done_callback(one_done)


def _run(
    check: Callable[[dict[str, Any]], bool], job: dict[str, Any], alive: _Alive, slots: threading.Semaphore
) -> None:
    try:
        if not check(job):
            alive.add(-1)  # its worker is gone: it holds nothing while the group waits
    finally:
        slots.release()
