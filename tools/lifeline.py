"""A process that ends when the one that started it is gone.

A judge started by a run, and a local cluster's scheduler and workers' nannies (loaded through Dask's
``--preload`` and ``--preload-nanny``, the run's pid in ``KA_CLUSTER_PARENT``), live in sessions of their
own, so that a Ctrl-C meant for the run does not kill them before it has stopped them in order. A run that
is killed instead (a time limit, SIGKILL) can stop nothing: they would judge on for nobody, holding their
workers and the GPU memory of their judges. Each watches its parent and ends within a second of it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

PARENT_ENV = "KA_CLUSTER_PARENT"
POLL_S = 1.0
GRACE_S = 10.0  # after SIGTERM, before SIGKILL


def end_with_parent(parent: int, end: Callable[[], None]) -> None:
    """Call ``end`` (in a thread of its own) once this process's parent is no longer ``parent``."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(POLL_S)
        end()

    threading.Thread(target=watch, daemon=True).start()


def dask_setup(_server: Any) -> None:
    """Dask's preload hook: the scheduler's or nanny's process group ends with the run."""
    parent = os.environ.get(PARENT_ENV)
    if parent and parent.isdigit():
        end_with_parent(int(parent), _end_group)


def _end_group() -> None:
    group = os.getpgid(0)
    os.killpg(group, signal.SIGTERM)
    time.sleep(GRACE_S)
    os.killpg(group, signal.SIGKILL)
