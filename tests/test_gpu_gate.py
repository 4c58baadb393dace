"""The judge's GPU gate: checks share the GPU, a timed run has it alone, and a waiting timing goes first."""

from __future__ import annotations

import threading
import time

from tools.gpu_gate import GpuGate


def _later(fn) -> threading.Thread:
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    return thread


def test_checks_share_the_gpu():
    gate, inside = GpuGate(), []
    with gate.shared(), gate.shared():  # a second check does not wait for the first
        inside.append(True)
    assert inside == [True]


def test_a_timing_waits_for_the_checks_running_and_a_check_asked_meanwhile_waits_for_the_timing():
    gate, events = GpuGate(), []
    check_running = threading.Event()
    release_check = threading.Event()

    def running_check() -> None:
        with gate.shared():
            check_running.set()
            release_check.wait(5)
            events.append("check ends")

    def timing() -> None:
        with gate.exclusive():
            events.append("timing starts")
            time.sleep(0.2)
            events.append("timing ends")

    def late_check() -> None:
        with gate.shared():
            events.append("late check starts")

    first = _later(running_check)
    check_running.wait(5)
    timer = _later(timing)
    time.sleep(0.1)  # the timing now waits for the running check
    late = _later(late_check)
    time.sleep(0.1)
    assert events == []  # the late check does not slip in ahead of the waiting timing
    release_check.set()
    for thread in (first, timer, late):
        thread.join(5)
    assert events == ["check ends", "timing starts", "timing ends", "late check starts"]


def test_two_timings_never_overlap():
    gate, alone, overlap = GpuGate(), [0], []

    def timing() -> None:
        with gate.exclusive():
            alone[0] += 1
            overlap.append(alone[0])
            time.sleep(0.05)
            alone[0] -= 1

    threads = [_later(timing) for _ in range(4)]
    for thread in threads:
        thread.join(5)
    assert overlap == [1, 1, 1, 1]


def test_with_overlap_each_candidate_is_timed_as_it_passes_and_never_beside_a_check_on_the_gpu():
    """The judge's schedule with ``overlap_timing`` (its checks and timings stand-ins): every job answered
    once, a candidate timed before the batch's last check ended, and no check on the GPU during a timing."""

    judge, timing_now, log, said = _stand_in_judge(overlap=True)
    jobs = [{"key": k} for k in range(9)]
    judge._check_while_timing(jobs, 3, 1, said.append)
    assert sorted(m["key"] for m in said) == list(range(9))
    assert sum(m["result"].get("stage") == "timing" for m in said) == 6
    first_timing = min(t for kind, _, t in log if kind == "timed")
    last_check = max(t for kind, _, t in log if kind == "checked")
    assert first_timing < last_check


def _stand_in_judge(overlap: bool = False, early: bool = False):
    """A judge whose checks and timings are stand-ins that log when they ran and fail the test if a check
    is on the GPU while a shape is being timed. Each timing times two shapes, as Timing.run does."""
    from tools.judge import Judge
    from tools.judge_settings import JudgeSettings

    judge = Judge.__new__(Judge)
    judge.gate, judge.device = GpuGate(), "cpu"
    judge.settings = JudgeSettings(overlap_timing=overlap, early_timing=early, max_waiting=32)
    judge.overlapping, judge.timing_beside_checks = overlap, overlap or early
    judge._zygote = None
    timing_now, log, said = [False], [], []

    def evaluate_one(job, time_it):
        time.sleep(0.02 * job["key"] + (0.4 if job["key"] == 0 else 0))  # compiling, off the GPU; 0 is slow
        with judge.gate.shared():  # the checks that run kernels
            assert not timing_now[0], "a check ran on the GPU during a timing"
            time.sleep(0.03)
        log.append(("checked", job["key"], time.monotonic()))
        passed = job["key"] % 3 != 1
        return ({"verdict": "pass" if passed else "fail"}, object() if passed else None)

    def time_one(session, checked):
        log.append(("timed", None, time.monotonic()))
        for _shape in range(2):
            with judge.alone_on_gpu():
                timing_now[0] = True
                time.sleep(0.025)
                timing_now[0] = False
        return {**checked, "stage": "timing"}

    judge.evaluate_one, judge.time_one = evaluate_one, time_one
    return judge, timing_now, log, said


def test_early_timing_times_a_group_while_its_slowest_check_still_runs_and_never_beside_it_on_the_gpu():
    """Checked then timed in groups, with ``early_timing``: the group's passed candidates are timed once the
    group is closed, before its slowest check (job 0) ended, and no check shares the GPU with a timed shape."""
    judge, _, log, said = _stand_in_judge(early=True)
    judge.evaluate({"id": 1, "jobs": [{"key": k} for k in range(9)], "parallel": 3}, said.append)
    results = [m for m in said if "key" in m]
    assert sorted(m["key"] for m in results) == list(range(9)) and said[-1]["done"]
    assert sum(m["result"].get("stage") == "timing" for m in results) == 6
    first_timing = min(t for kind, _, t in log if kind == "timed")
    slowest_checked = next(t for kind, key, t in log if kind == "checked" and key == 0)
    assert first_timing < slowest_checked


def test_without_early_timing_a_group_is_timed_only_after_every_check():
    judge, _, log, said = _stand_in_judge()
    judge.evaluate({"id": 1, "jobs": [{"key": k} for k in range(9)], "parallel": 3}, said.append)
    assert sum(m["result"].get("stage") == "timing" for m in said if "key" in m) == 6
    first_timing = min(t for kind, _, t in log if kind == "timed")
    assert first_timing > max(t for kind, _, t in log if kind == "checked")


def test_a_thread_holding_the_gate_takes_it_again_without_waiting_for_a_timing_queued_behind_it():
    """A check making a reference it needs (references.py holds the gate too) while a timing waits: it
    goes on instead of waiting for the timing that waits for it."""
    gate, done = GpuGate(), threading.Event()
    holding = threading.Event()

    def check() -> None:
        with gate.shared():
            holding.set()
            time.sleep(0.1)  # the timing is queued now
            with gate.shared():
                done.set()

    first = _later(check)
    holding.wait(5)
    timer = _later(lambda: gate.exclusive().__enter__())
    first.join(5)
    assert done.is_set()
    timer.join(5)


def test_with_overlap_a_timing_that_raises_fails_that_candidate_alone():
    from types import SimpleNamespace

    from tools.judge import Judge

    judge = Judge.__new__(Judge)
    judge.gate, judge.device = GpuGate(), "cpu"
    said = []
    judge.evaluate_one = lambda job, time_it: ({"verdict": "pass"}, SimpleNamespace(key=job["key"], kill=lambda: None))

    def time_one(session, checked):
        if session.key == 1:
            raise RuntimeError("the judge's own fault")
        return {**checked, "stage": "timing"}

    judge.time_one = time_one
    judge._check_while_timing([{"key": k} for k in range(3)], 2, 1, said.append)
    by_key = {m["key"]: m["result"] for m in said}
    assert sorted(by_key) == [0, 1, 2]
    assert by_key[1]["verdict"] == "fail" and "the judge's own fault" in by_key[1]["message"]
    assert by_key[0]["stage"] == by_key[2]["stage"] == "timing"


def test_a_check_waiting_for_another_candidates_timed_run_counts_that_wait_apart(tmp_path):
    """Checking cost is the checks' own seconds: the wait for the gate while another candidate is timed is
    kept apart (``correctness_gate``), not mixed into the stage's work."""
    from types import SimpleNamespace

    from tools.judge_settings import JudgeSettings
    from tools.session import Session

    judge = SimpleNamespace(gate=GpuGate(), settings=JudgeSettings())
    session = Session(judge, {"scratch": str(tmp_path)})
    timing_started = threading.Event()

    def timed_run():
        with judge.gate.exclusive():
            timing_started.set()
            time.sleep(0.3)

    thread = _later(timed_run)
    timing_started.wait(5)
    with session.phase("correctness"), session.on_gpu():
        pass
    thread.join(5)
    assert session.seconds["correctness_gate"] >= 0.2
    assert session.seconds["correctness"] >= session.seconds["correctness_gate"]
