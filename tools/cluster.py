"""Evaluation on a Dask cluster: one judge per worker, one worker per GPU.

    --cluster local:N          N workers on this host (worker i sees GPU i; on a CPU, N interpreter workers)
    --cluster tcp://HOST:PORT  an existing scheduler; start one worker per GPU with
                               CUDA_VISIBLE_DEVICES=i dask worker tcp://HOST:PORT --nthreads 1 --resources GPU=1

A batch is cut into one chunk per worker (``chunk_size``). A chunk runs on one worker, in that worker's
judge (tools/backend.py): its compiles and correctness checks use the worker host's CPUs in parallel and
overlap its timings, which run one at a time on that worker's GPU (each chunk asks for the worker's one
GPU, so chunks on a worker never overlap). At most ceil(1.5 x workers) chunks are in flight. Each finished candidate is published on a Dask queue as it
arrives, so a worker that dies costs only the candidates it had not finished: those are sent once more
to another worker, then failed as ``worker_lost``. A scheduler that goes away raises ``ClusterLost``:
the run stops with its checkpoint kept and resumes on another cluster or locally.

Every result is judged against the copy bandwidth measured by the judge on the same GPU, and carries
the worker that judged it (``EvalResult.worker``).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tools import sandbox
from tools.backend import LocalBackend
from tools.lifeline import PARENT_ENV
from tools.task import Task

START_TIMEOUT_S = 120.0
LOST_AFTER_S = 20.0  # a scheduler unreachable this long is gone


LIFELINE = "tools.lifeline"


class ClusterLost(RuntimeError):
    """The scheduler is gone: the run ends here, its checkpoint kept."""


def parse_cluster(spec: str) -> tuple[str, int | str]:
    """("local", N) or ("tcp", address); ValueError names what is wrong."""
    if spec.startswith("local:"):
        count = spec.split(":", 1)[1]
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"--cluster {spec!r}: local:N needs a worker count N >= 1")
        return "local", int(count)
    if spec.startswith("tcp://") and ":" in spec[6:]:
        return "tcp", spec
    raise ValueError(f"--cluster {spec!r}: use local:N or tcp://HOST:PORT")


def worker_gpus(workers: int, device: str, visible: str | None = None) -> list[str]:
    """The GPU each local worker is pinned to: the i-th of this process's CUDA_VISIBLE_DEVICES (all of
    the machine's when unset), so that a cluster started inside a GPU subset stays inside it; "" on CPU."""
    if device != "cuda":
        return [""] * workers
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if not visible:
        return [str(i) for i in range(workers)]
    ids = [g.strip() for g in visible.split(",") if g.strip()]
    if workers > len(ids):
        raise ValueError(f"--cluster local:{workers}: only {len(ids)} GPU(s) visible (CUDA_VISIBLE_DEVICES={visible})")
    return ids[:workers]


class LocalCluster:
    """A scheduler and N workers on 127.0.0.1, each a process of its own (worker i pinned to the i-th
    visible GPU, ``worker_gpus``)."""

    def __init__(self, workers: int, device: str, folder: Path):
        self.folder = folder
        self.procs: list[subprocess.Popen] = []
        port = _free_port()
        self.address = f"tcp://127.0.0.1:{port}"
        env = _env(None)
        gpus = worker_gpus(workers, device)
        self._start(["scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard",
                     "--preload", LIFELINE], env, "scheduler")  # fmt: skip
        for i, gpu in enumerate(gpus):
            self._start(["worker", self.address, "--nworkers", "1", "--nthreads", "1", "--name", f"w{i}",
                         "--resources", "GPU=1", "--no-dashboard", "--local-directory", str(folder / f"w{i}"),
                         "--preload-nanny", LIFELINE], _env(gpu), f"w{i}")  # fmt: skip

    def _start(self, argv: list[str], env: dict[str, str], name: str) -> None:
        env = {**env, PARENT_ENV: str(os.getpid())}  # they end when this process is gone (tools.lifeline)
        log = open(self.folder / f"{name}.log", "ab")  # noqa: SIM115 - owned by the process
        self.procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_" + argv[0], *argv[1:]],
                                           env=env, stdout=log, stderr=log, start_new_session=True))  # fmt: skip

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(gpu: str | None) -> dict[str, str]:
    env = sandbox.child_env()
    env["DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES"] = "0"  # a lost chunk is ours to send again, once
    env["DASK_DISTRIBUTED__WORKER__DAEMON"] = "False"  # a worker's judge is a process of its own
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return env


def task_files(task: Task) -> dict[str, str]:
    """The task folder's text files, shipped to workers that may not share this file system."""
    files = {}
    for path in sorted(task.folder.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix in {".py", ".json", ".txt", ".md"}:
            files[str(path.relative_to(task.folder))] = path.read_text()
    return files


class DaskBackend:
    """Candidates evaluated by the judges of a Dask cluster's workers."""

    def __init__(self, spec: str, task: Task, device: str, settings: dict[str, Any], hidden: list[dict], root: Path):
        from distributed import Client

        kind, where = parse_cluster(spec)
        self.device, self.settings, self.hidden_shapes, self.root = device, settings, hidden, root
        self.local = LocalCluster(int(where), device, root) if kind == "local" else None
        address = self.local.address if self.local else str(where)
        self.files = task_files(task)
        self.task_key = hashlib.sha256(repr(sorted(self.files.items())).encode()).hexdigest()[:16]
        try:
            self.client = Client(address, timeout=START_TIMEOUT_S, set_as_default=False)
            if self.local is not None:
                self.client.wait_for_workers(int(where), timeout=START_TIMEOUT_S)
        except Exception as exc:
            self.close()
            raise ClusterLost(f"no Dask scheduler answered at {address}: {exc}") from None
        self.seen: dict[str, dict[str, Any]] = {}  # worker address -> what it reported of its GPU
        self.address = address
        self._unreachable_since: float | None = None

    def gpus(self) -> int:
        workers = self.client.scheduler_info(n_workers=-1)["workers"]
        return max(1, sum(1 for w in workers.values() if w.get("resources", {}).get("GPU")))

    def evaluate(self, jobs: list[dict[str, Any]], finished: Callable[[int, dict[str, Any]], None]) -> None:
        with self._lost_as_cluster_lost():
            self._evaluate(jobs, finished)

    @contextmanager
    def _lost_as_cluster_lost(self) -> Iterator[None]:
        """A connection to the scheduler that breaks, or never comes back, ends the run as ClusterLost."""
        from concurrent.futures import CancelledError

        from distributed.comm.core import CommClosedError

        try:
            yield
        except (CommClosedError, OSError, TimeoutError, CancelledError) as exc:
            raise ClusterLost(f"the Dask scheduler at {self.address} went away ({type(exc).__name__}); "
                              "the run is checkpointed") from None  # fmt: skip

    def _evaluate(self, jobs: list[dict[str, Any]], finished: Callable[[int, dict[str, Any]], None]) -> None:
        batch = _Batch(self, jobs, finished)
        batch.submit()
        while batch.in_flight:
            self._alive()
            for future in [f for f in batch.in_flight if f.done()]:
                batch.settle(future)
            batch.drain()
            batch.submit()
            time.sleep(0.05)
        batch.drain()

    def retime(self, jobs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
        """Every candidate re-timed on one GPU, side by side (the watchdog compares them)."""
        with self._lost_as_cluster_lost():
            return self._retime(jobs)

    def _retime(self, jobs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
        future = self.client.submit(retime_chunk, self.files, self.task_key, self.device, self.settings,
                                    self.hidden_shapes, jobs, resources={"GPU": 1}, pure=False, retries=1)  # fmt: skip
        while not future.done():
            self._alive()
            time.sleep(0.05)
        return {int(k): v for k, v in future.result().items()}

    def anchors(self) -> list[dict[str, Any]]:
        with self._lost_as_cluster_lost():
            return self._anchors()

    def _anchors(self) -> list[dict[str, Any]]:
        future = self.client.submit(anchors_on_worker, self.files, self.task_key, self.device, self.settings,
                                    self.hidden_shapes, resources={"GPU": 1}, pure=False)  # fmt: skip
        while not future.done():
            self._alive()
            time.sleep(0.05)
        return future.result()

    def _alive(self) -> None:
        """Raise ClusterLost once the scheduler has been unreachable for LOST_AFTER_S."""
        if self.client.status == "running" and self.client.scheduler_info().get("workers") is not None:
            self._unreachable_since = None
            return
        now = time.monotonic()
        self._unreachable_since = self._unreachable_since or now
        if self.client.status in {"closed", "closing"} or now - self._unreachable_since > LOST_AFTER_S:
            raise ClusterLost(f"the Dask scheduler at {self.address} went away; the run is checkpointed")

    def workers(self) -> list[dict[str, Any]]:
        return list(self.seen.values())

    def close(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            with contextlib.suppress(Exception):
                client.run(_close_judges)
            client.close()
        if self.local is not None:
            self.local.close()


def chunk_size(jobs: int, gpus: int) -> int:
    """Candidates per chunk: the batch spread evenly over the GPUs. Fewer, larger chunks let a judge overlap
    one candidate's checks with another's timing, as a local batch does (chunks of 8 on one H200 judged
    add_rmsnorm at 75% of the local judge's rate); a dead worker costs its chunk's unfinished candidates."""
    return max(1, math.ceil(jobs / max(1, gpus)))


class _Batch:
    """One evaluate call on the cluster: chunks in flight, results as they arrive, a lost chunk's
    unfinished candidates sent once more."""

    def __init__(self, backend: DaskBackend, jobs: list[dict[str, Any]], finished: Callable[[int, dict[str, Any]], None]):
        from distributed import Queue

        self.backend, self.finished = backend, finished
        self.pending = {job["key"]: job for job in jobs}
        self.tries = {job["key"]: 0 for job in jobs}
        self.waiting = list(self.pending)
        self.size = chunk_size(len(jobs), backend.gpus())
        self.in_flight: dict[Any, list[int]] = {}
        self.queue_name = f"ka-results-{uuid.uuid4().hex}"
        self.results = Queue(self.queue_name, client=backend.client)

    def submit(self) -> None:
        b = self.backend
        cap = math.ceil(1.5 * b.gpus())
        while self.waiting and len(self.in_flight) < cap:
            keys, self.waiting = self.waiting[: self.size], self.waiting[self.size :]
            chunk = [self.pending[k] for k in keys]
            future = b.client.submit(run_chunk, b.files, b.task_key, b.device, b.settings, b.hidden_shapes, chunk,
                                     self.queue_name, resources={"GPU": 1}, pure=False, retries=0)  # fmt: skip
            self.in_flight[future] = keys

    def drain(self) -> None:
        while True:
            try:
                item = self.results.get(timeout=0.01)
            except Exception:  # the queue is empty (a timeout)
                return
            key, raw = item["key"], item["result"]
            if key in self.pending:
                del self.pending[key]
                self.backend.seen[raw.get("worker", "?")] = {"worker": raw.get("worker"), "device": raw.get("device"),
                                                             "copy_gbps": raw.get("metrics", {}).get("copy_gbps")}  # fmt: skip
                self.finished(key, raw)

    def settle(self, future: Any) -> None:
        """A chunk ended: what it left unfinished goes back to the queue once, or fails."""
        keys = self.in_flight.pop(future)
        lost = future.status != "finished"
        self.drain()
        for key in [k for k in keys if k in self.pending]:
            self.tries[key] += 1
            if lost and self.tries[key] < 2:
                self.waiting.append(key)
                continue
            why = (f"its worker was lost twice ({_failure_text(future)})" if lost
                   else "its worker finished the chunk without a result for it")  # fmt: skip
            del self.pending[key]
            self.finished(key, {"verdict": "fail", "stage": "correctness", "error_type": "worker_lost",
                                "message": f"no verdict from the cluster: {why}"})  # fmt: skip


def _failure_text(future: Any) -> str:
    try:
        return f"{type(future.exception()).__name__}: {future.exception()}"
    except Exception as exc:  # the scheduler itself went away
        return f"{type(exc).__name__}: {exc}"


# -- on a worker ----------------------------------------------------------------------------------------
_JUDGES: dict[tuple, LocalBackend] = {}
_LOCK = threading.Lock()


def _worker_backend(files: dict[str, str], task_key: str, device: str, settings: dict, hidden: list[dict]) -> LocalBackend:
    """This worker's judge for the task (kept between chunks: its references are made once)."""
    from distributed import get_worker

    name = get_worker().name
    key = (task_key, device, repr(sorted(settings.items())), repr(hidden))
    with _LOCK:
        if key not in _JUDGES:
            root = Path(tempfile.mkdtemp(prefix=f"ka-{name}-"))
            folder = root / "task"
            for rel, text in files.items():
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                (folder / rel).write_text(text)
            (root / "judge").mkdir()
            _JUDGES[key] = LocalBackend(str(folder), device, settings, hidden, root / "judge")
        return _JUDGES[key]


def run_chunk(files: dict, task_key: str, device: str, settings: dict, hidden: list[dict], jobs: list[dict],
              queue_name: str) -> int:  # fmt: skip
    """Evaluate a chunk in this worker's judge, each result published as it arrives; returns how many."""
    from distributed import Queue, get_worker

    backend = _worker_backend(files, task_key, device, settings, hidden)
    results = Queue(queue_name)
    label = f"{get_worker().name} ({get_worker().address})"
    count = [0]

    def finished(key: int, raw: dict) -> None:
        raw["worker"] = f"{label}: {raw.get('worker', '')}"
        results.put({"key": key, "result": raw})
        count[0] += 1

    backend.evaluate(jobs, finished)
    return count[0]


def retime_chunk(files: dict, task_key: str, device: str, settings: dict, hidden: list[dict], jobs: list[dict]) -> dict:
    from distributed import get_worker

    backend = _worker_backend(files, task_key, device, settings, hidden)
    answers = backend.retime(jobs)
    label = f"{get_worker().name} ({get_worker().address})"
    return {str(k): {**v, "worker": f"{label}: {v.get('worker', '')}"} for k, v in answers.items()}


def anchors_on_worker(files: dict, task_key: str, device: str, settings: dict, hidden: list[dict]) -> list:
    return _worker_backend(files, task_key, device, settings, hidden).anchors()


def _close_judges() -> None:
    with _LOCK:
        for backend in _JUDGES.values():
            backend.close()
            shutil.rmtree(backend.root.parent, ignore_errors=True)
        _JUDGES.clear()
