"""Evaluation on a real Dask cluster on 127.0.0.1 (a scheduler and worker processes started by the test):
two workers share a batch, and a worker killed in the middle loses no candidate."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed")

from process_support import running  # noqa: E402

from tools.candidate import Candidate  # noqa: E402
from tools.cluster import chunk_size, parse_cluster, worker_gpus  # noqa: E402
from tools.evaluate import EvalSettings, Evaluator  # noqa: E402
from tools.task import load_task  # noqa: E402

HERE = Path(__file__).parent
TASK = HERE / "fixtures" / "tasks" / "axpy"
GOOD = (HERE / "fixtures" / "candidates" / "good.py").read_text()
BAD = (HERE / "fixtures" / "candidates" / "partial_write.py").read_text()


def _batch(n: int) -> list[Candidate]:
    configs = [{"BLOCK": b, "num_warps": w} for b in (64, 128, 256) for w in (1, 2, 4)]
    return [Candidate(source=GOOD if i % 4 else BAD, config=configs[i % len(configs)]) for i in range(n)]


def test_cluster_specs_are_checked():
    assert parse_cluster("local:2") == ("local", 2)
    assert parse_cluster("tcp://10.0.0.1:8786") == ("tcp", "tcp://10.0.0.1:8786")
    for wrong in ("local:0", "local:x", "10.0.0.1:8786", "tcp://nohost"):
        with pytest.raises(ValueError, match="--cluster"):
            parse_cluster(wrong)


@pytest.mark.timeout(420)
def test_two_workers_share_a_batch_and_a_killed_worker_loses_nothing(tmp_path):
    task = load_task(TASK)
    settings = EvalSettings(cluster="local:2", workdir=str(tmp_path), check_timeout_s=120)
    batch = _batch(12)
    arrived: list[str] = []
    killed_after: list[int] = []

    def kill_the_first_worker_to_answer() -> None:
        while not arrived:
            time.sleep(0.05)
        name = arrived[0].split(" ")[0]  # "w0" or "w1"
        worker = evaluator.backend.local.procs[1 + int(name[1:])]  # procs[0] is the scheduler
        killed_after.append(len(arrived))
        os.killpg(worker.pid, signal.SIGKILL)  # the worker, mid-batch
        killed.append(worker)

    killed: list = []
    with Evaluator(task, "cpu", settings) as evaluator:
        killer = threading.Thread(target=kill_the_first_worker_to_answer, daemon=True)
        killer.start()
        results = evaluator.evaluate_many(batch, on_result=lambda i, r: arrived.append(r.worker))
        workers = {r.worker.split(" ")[0] for r in results}
    assert len(results) == len(batch)
    for cand, r in zip(batch, results, strict=True):
        if cand.source == BAD:
            assert r.error_type == "unwritten_output", (r.error_type, r.message)
        else:
            assert r.passed, (r.error_type, r.message)
    assert killed_after and killed_after[0] < len(batch)  # it died with candidates still open
    assert killed[0].poll() is not None
    assert workers == {"w0", "w1"}, workers  # both judged some: the other finished what the dead one left


def test_a_batch_is_spread_over_every_gpu_in_one_chunk_each():
    """One GPU: the whole batch in one chunk, so its checks overlap its timings as in a local batch;
    eight GPUs: a 24-candidate round keeps all eight busy, never three chunks of eight."""
    assert chunk_size(24, 1) == 24
    assert chunk_size(24, 8) == 3 and chunk_size(25, 8) == 4
    assert chunk_size(3, 8) == 1 and chunk_size(0, 2) == 1


RUN_THAT_IS_KILLED = """
import json, sys
from pathlib import Path
from tools.cluster import DaskBackend
from tools.task import load_task
task = load_task(sys.argv[2])
backend = DaskBackend("local:1", task, "cpu", {"check_timeout_s": 60, "timing_timeout_s": 60}, [], Path(sys.argv[1]))
print(json.dumps([p.pid for p in backend.local.procs]), flush=True)
sys.stdin.read()
"""


@pytest.mark.timeout(180)
def test_a_run_killed_with_a_local_cluster_leaves_no_scheduler_or_worker_behind(tmp_path):
    """The cluster's processes live in sessions of their own (a Ctrl-C is the run's to handle): a run that is
    killed instead must not leave them, and the GPU memory their judges hold, to the next run."""
    import json
    import subprocess
    import sys

    run = subprocess.Popen([sys.executable, "-c", RUN_THAT_IS_KILLED, str(tmp_path), str(TASK)],
                           cwd=HERE.parent, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    pids = json.loads(run.stdout.readline())
    assert all(running(pid) for pid in pids)
    run.kill()
    run.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(running(pid) for pid in pids):
        time.sleep(0.5)
    left = [pid for pid in pids if running(pid)]
    for pid in left:
        os.killpg(pid, signal.SIGKILL)
    assert not left, "the scheduler or a worker outlived the run that started it"


def test_local_workers_stay_inside_the_gpus_this_process_may_use():
    """A cluster started with CUDA_VISIBLE_DEVICES=4,5,6,7 (another run has GPUs 0-3) pins its workers
    to 4-7, not to 0-3; asking for more workers than visible GPUs is refused with the count."""
    assert worker_gpus(2, "cuda", visible="4,5,6,7") == ["4", "5"]
    assert worker_gpus(3, "cuda", visible="") == ["0", "1", "2"]
    assert worker_gpus(2, "cpu", visible="4,5") == ["", ""]
    with pytest.raises(ValueError, match="only 2 GPU"):
        worker_gpus(3, "cuda", visible="6,7")
