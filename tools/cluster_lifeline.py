"""Loaded into a local cluster's scheduler and each worker's nanny (Dask's ``--preload`` and
``--preload-nanny``): they end when the run that started them is gone.

    dask scheduler --preload tools.cluster_lifeline        (``KA_CLUSTER_PARENT``: the run's pid)

They are started in sessions of their own, so that a Ctrl-C meant for the run does not kill them before
it has stopped them in order. A run that is killed instead (a time limit, SIGKILL) can stop nothing: its
scheduler and workers would stay, and the workers' judges with the GPU memory they hold. Within a few
seconds of the run's end, each process group is terminated, then killed; a worker's judge sees its
parent end and ends with its own workers.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

PARENT_ENV = "KA_CLUSTER_PARENT"
POLL_S = 1.0
GRACE_S = 10.0  # after SIGTERM, before SIGKILL


def dask_setup(_server: Any) -> None:
    parent = os.environ.get(PARENT_ENV)
    if parent and parent.isdigit():
        threading.Thread(target=_end_with, args=(int(parent),), daemon=True).start()


def _end_with(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_S)
    group = os.getpgid(0)
    os.killpg(group, signal.SIGTERM)
    time.sleep(GRACE_S)
    os.killpg(group, signal.SIGKILL)
