"""A GPU batch keeps few candidate workers alive: a passed candidate holds its worker (a CUDA context,
its inputs and outputs) until it is timed, so checks that outrun the timing must wait, not pile up."""

import contextlib
import threading
import time

from tools.batch_groups import MemoryRoom
from tools.judge import Judge
from tools.judge_settings import JudgeSettings


class SlowTimingJudge:
    """Judge._check_while_timing's collaborators: quick checks that always pass, a slow timer."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.alive = 0
        self.most_alive = 0
        self.gate = self
        self.device = "cpu"

    def exclusive(self):
        return contextlib.nullcontext()

    def evaluate_one(self, job: dict, timed: bool):
        with self.lock:
            self.alive += 1
            self.most_alive = max(self.most_alive, self.alive)
        return {"key": job["key"], "verdict": "pass"}, object()

    def time_one(self, session: object, checked: dict) -> dict:
        time.sleep(0.02)
        with self.lock:
            self.alive -= 1
        return checked


def test_checks_that_outrun_the_timing_wait_for_it_instead_of_piling_up_workers():
    judge = SlowTimingJudge()
    said: list[dict] = []
    Judge._check_while_timing(judge, [{"key": i} for i in range(24)], 2, "r", said.append)
    assert sorted(s["key"] for s in said) == list(range(24))
    assert judge.most_alive <= 3, f"{judge.most_alive} candidate workers alive at once"


class OverlapJudge(SlowTimingJudge):
    """A GPU of ``total_memory`` whose every live worker holds ``worker_memory`` of it."""

    def __init__(self, total_memory: int, worker_memory: int) -> None:
        super().__init__()
        self.device = "cuda"
        self.total_memory, self.worker_memory = total_memory, worker_memory

    def _memory_room(self) -> MemoryRoom:
        return MemoryRoom(lambda: self.total_memory - self.alive * self.worker_memory, self.total_memory)


def test_checks_timed_as_they_pass_keep_no_more_workers_alive_than_the_gpu_holds():
    # 100 units, 10 a worker, 10% kept free and room for two more: at most 7 alive, though 16 could be
    judge = OverlapJudge(total_memory=100, worker_memory=10)
    said: list[dict] = []
    Judge._check_while_timing(judge, [{"key": i} for i in range(24)], 15, "r", said.append)
    assert sorted(s["key"] for s in said) == list(range(24))
    assert judge.most_alive == 7, f"{judge.most_alive} candidate workers alive at once"


class BatchJudge(SlowTimingJudge):
    """Judge.evaluate's collaborators, without overlap: checks first, then timings."""

    def __init__(self, max_waiting: int) -> None:
        super().__init__()
        self.overlapping = self.timing_beside_checks = False
        self.device = "cuda"
        self._zygote = None
        self.settings = JudgeSettings(max_waiting=max_waiting)
        self.total_memory, self.worker_memory = 10**12, 1

    def _memory_room(self) -> MemoryRoom:
        # each live worker holds worker_memory of the device
        return MemoryRoom(lambda: self.total_memory - self.alive * self.worker_memory, self.total_memory)


def test_a_batch_checked_before_its_timings_keeps_at_most_max_waiting_workers_alive():
    judge = BatchJudge(max_waiting=8)
    said: list[dict] = []
    Judge.evaluate(judge, {"id": "r", "jobs": [{"key": i} for i in range(24)], "parallel": 2}, said.append)
    assert [s["key"] for s in said if "key" in s] == list(range(24))
    assert said[-1]["done"]
    assert judge.most_alive <= 8, f"{judge.most_alive} candidate workers alive at once"


def test_a_batch_group_closes_early_when_its_workers_fill_the_gpu():
    # 100 units, 10 a worker, 10% kept free and room for two more: at most 7 waiting workers at once
    judge = BatchJudge(max_waiting=32)
    judge.total_memory, judge.worker_memory = 100, 10
    said: list[dict] = []
    Judge.evaluate(judge, {"id": "r", "jobs": [{"key": i} for i in range(24)], "parallel": 1}, said.append)
    assert [s["key"] for s in said if "key" in s] == list(range(24))
    assert judge.most_alive == 7, f"{judge.most_alive} candidate workers alive at once"
