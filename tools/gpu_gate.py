"""Who may use the GPU now: checks share it, a timed run has it alone.

Every worker is its own CUDA context, and contexts on one GPU are time-sliced: a check that runs a kernel
while another candidate is being timed lands in that candidate's events. The judge holds this gate around
every command that may run work on the GPU (``shared``: any number at once), around making an input set or
a reference on the GPU, and around each shape of a candidate's timing (``exclusive``: nothing else). A
waiting timing is served first: no new shared hold starts once it waits, so a stream of checks cannot
starve it. A worker's GPU is idle when its reply arrives (it synchronizes before replying), so a command's
hold ends with its reply.

A thread that holds the gate already (a check making a reference it needs, a timing making its fresh
inputs) goes on without waiting: a second hold of its own would otherwise wait for itself.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class GpuGate:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._sharing = 0
        self._alone = False
        self._waiting = 0  # timings waiting for the GPU
        self._mine = threading.local()  # this thread's holds

    def _held(self) -> bool:
        return getattr(self._mine, "depth", 0) > 0

    @contextlib.contextmanager
    def _inner(self) -> Iterator[None]:
        self._mine.depth += 1
        try:
            yield
        finally:
            self._mine.depth -= 1

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        if self._held():
            with self._inner():
                yield
            return
        with self._cond:
            self._cond.wait_for(lambda: not self._alone and not self._waiting)
            self._sharing += 1
        self._mine.depth = 1
        try:
            yield
        finally:
            self._mine.depth = 0
            with self._cond:
                self._sharing -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        if self._held():
            raise RuntimeError("a timed run asked for the GPU alone while its thread shares it")
        with self._cond:
            self._waiting += 1
            self._cond.wait_for(lambda: not self._alone and not self._sharing)
            self._waiting -= 1
            self._alone = True
        self._mine.depth = 1
        try:
            yield
        finally:
            self._mine.depth = 0
            with self._cond:
                self._alone = False
                self._cond.notify_all()
