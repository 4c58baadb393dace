"""Probes of each way a candidate could cheat the judge, on CPU: every one rejected with a precise
reason, with the static checks on (as a run has them) and off (the run-time defenses alone), and a
correct candidate still passes afterwards in the same session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.candidate import Candidate
from tools.evaluate import EvalSettings, Evaluator, evaluate
from tools.task import load_task

HERE = Path(__file__).parent
PROBES = HERE / "fixtures" / "probes"
TASKS = HERE / "fixtures" / "tasks"
GOOD = (HERE / "fixtures" / "candidates" / "good.py").read_text()
CONFIG = {"BLOCK": 128, "num_warps": 4}

# probe -> (error_type, a phrase of the message) with the static checks off
AT_RUN_TIME = {
    "patch_compare": ("forbidden_construct", "setting Tensor"),
    "patch_module_dict": ("forbidden_construct", "replaced torch.cuda.synchronize"),
    "patch_module": ("forbidden_construct", "setting torch.isnan"),
    "patch_timer": ("forbidden_construct", "setting Event.elapsed_time"),
    "steal_frames": ("forbidden_construct", "sys._getframe()"),
    "steal_heap": ("forbidden_construct", "gc.get_objects()"),
    "steal_globals": ("forbidden_construct", "__globals__"),
    "count_cheat": ("unwritten_output", "never written"),
    "content_cache": ("stale_output", "kept 2 tensor(s)"),
    "address_cache": ("forbidden_construct", "tensor at module level"),
    "super_batch": ("stale_output", "kept 1 tensor(s)"),
    "write_past_output": ("out_of_bounds_write", "past the end of the tensor it allocated"),
    "write_past_input": ("out_of_bounds_write", "past the end of input 0"),
    "write_before_output": ("out_of_bounds_write", "bytes before the start of the tensor it allocated"),
    "forge_reply": ("forbidden_construct", "channel"),
    "flood_channel": ("crash", "flooded the judge's channel"),
    "read_judge_memory": ("forbidden_construct", "another process's maps"),
    "read_other_candidate": ("forbidden_construct", "other candidates' files"),
    "raw_thread": ("forbidden_construct", "starting a thread"),
    "signal_handler": ("forbidden_construct", "installed a handler for SIGALRM"),
}
# statically refused before anything runs (the rest of the probes have their run-time verdict above)
STATIC = {"capture_cheat": "is_current_stream_capturing", "steal_frames": "sys",
          "steal_heap": "sys", "steal_globals": "__globals__", "forge_reply": "os", "flood_channel": "os",
          "read_judge_memory": "sys", "read_other_candidate": "sys", "raw_thread": "try/except",
          "signal_handler": "sys"}  # fmt: skip


def _run(names: list[str], static: bool) -> dict:
    task = load_task(TASKS / "axpy")
    cands = [Candidate(source=(PROBES / f"{n}.py").read_text(), config=CONFIG) for n in names]
    settings = EvalSettings(parallel=2, hidden_seed=7, static_checks=static, check_timeout_s=120)
    with Evaluator(task, "cpu", settings) as evaluator:
        results = evaluator.evaluate_many([*cands, Candidate(source=GOOD, config=CONFIG)])
    return {"good_after": results[-1], **dict(zip(names, results, strict=False))}


@pytest.fixture(scope="module")
def run_time() -> dict:
    return _run(list(AT_RUN_TIME), static=False)


@pytest.fixture(scope="module")
def static_on() -> dict:
    return _run(sorted(set(AT_RUN_TIME) | set(STATIC)), static=True)


@pytest.mark.parametrize("name", list(AT_RUN_TIME))
def test_probe_is_rejected_at_run_time(run_time, name):
    error_type, phrase = AT_RUN_TIME[name]
    r = run_time[name]
    assert r.verdict == "fail" and r.error_type == error_type, (r.error_type, r.message)
    assert phrase in r.message, r.message


@pytest.mark.parametrize("name", sorted(set(AT_RUN_TIME) | set(STATIC)))
def test_probe_is_rejected_with_the_static_checks_on(static_on, name):
    r = static_on[name]
    assert r.verdict == "fail", r.message
    if name in STATIC:
        assert (r.stage, r.error_type) == ("static", "forbidden_construct") and STATIC[name] in r.message, r.message
    else:
        assert r.error_type == AT_RUN_TIME[name][0], r.message


def test_a_correct_candidate_passes_after_the_probes(run_time, static_on):
    assert run_time["good_after"].passed and static_on["good_after"].passed


def test_the_timed_calls_are_the_checked_calls(run_time):
    """count_cheat is right for every correctness call and cheap from then on: the interpreted timing
    calls' own outputs are checked, so its verdict names a timed call's shape."""
    r = run_time["count_cheat"]
    assert r.details["shape"] == {"M": 4, "N": 300}


def test_a_view_from_its_buffers_start_is_not_an_out_of_bounds_write():
    """Inductor's wrappers view a buffer from storage offset 0; the bands around it must not move that view."""
    source = (HERE / "fixtures" / "candidates" / "reinterpret_view.py").read_text()
    r = evaluate(TASKS / "axpy", source, CONFIG, device="cpu")
    assert r.passed, r.message


def test_a_flood_of_output_stops_the_worker_alone(tmp_path):
    settings = EvalSettings(max_file_bytes=4 << 20, workdir=str(tmp_path), check_timeout_s=120)
    flood = Candidate(source=(PROBES / "flood_output.py").read_text(), config=CONFIG)
    with Evaluator(load_task(TASKS / "axpy"), "cpu", settings) as evaluator:
        flooded, good = evaluator.evaluate_many([flood, Candidate(source=GOOD, config=CONFIG)])
    assert flooded.error_type == "crash" and "SIGXFSZ" in flooded.message, flooded.message
    assert good.passed


def test_a_degenerate_reference_is_a_task_error_not_a_pass():
    r = evaluate(TASKS / "degenerate", (PROBES / "zeros.py").read_text(), CONFIG, device="cpu")
    assert r.verdict == "fail" and r.details.get("task_error"), r.message
    assert "do not depend on its inputs" in r.message


def test_a_module_global_replaced_by_any_path_is_named(monkeypatch):
    """The net behind the refusals: a watched module's global that holds another object is named, however
    it was replaced (here by writing the module's namespace directly); caches of plain data are not."""
    import torch

    from tools import lockdown

    before = lockdown.module_snapshot()
    monkeypatch.setitem(vars(torch.cuda), "synchronize", lambda *a, **k: None)
    monkeypatch.setitem(vars(torch), "_ka_probe_cache", 1)  # a new name: a cache, not a patch
    assert lockdown.changed_modules(before) == ["torch.cuda.synchronize"]


def test_a_judge_that_dies_is_started_again_and_no_candidate_is_lost(tmp_path):
    """The judge killed in the middle of a batch: it is started again (its references made again) and the
    candidates it had not answered are sent once more; every one gets its verdict."""
    import os
    import signal
    import threading

    task = load_task(TASKS / "axpy")
    batch = [Candidate(source=GOOD, config={"BLOCK": b, "num_warps": w}) for b in (64, 128, 256) for w in (1, 2)]
    arrived: list[int] = []
    with Evaluator(task, "cpu", EvalSettings(parallel=1, workdir=str(tmp_path))) as evaluator:

        def kill_the_judge_after_the_first_result() -> None:
            while not arrived:
                threading.Event().wait(0.05)
            os.kill(evaluator.judge.proc.pid, signal.SIGKILL)

        threading.Thread(target=kill_the_judge_after_the_first_result, daemon=True).start()
        results = evaluator.evaluate_many(batch, on_result=lambda i, r: arrived.append(i))
        restarts = evaluator.judge.restarts
    assert restarts == 1
    assert len(results) == len(batch) and all(r.passed for r in results), [r.message for r in results]


def test_a_candidate_sent_again_after_the_judge_died_gets_a_fresh_scratch_folder(tmp_path):
    """The dead judge's workers may still hold the first attempt's channel open: a new judge must never
    open the same folder (it would talk to them, and wait on answers that never come)."""
    from tools.backend import JudgeLost, LocalBackend

    class DiesOnce:  # the judge client: the first request dies after answering the first job
        def __init__(self):
            self.sent: list[list[dict]] = []

        def request(self, op, on_message, jobs):
            self.sent.append(jobs)
            on_message({"key": jobs[0]["key"], "result": {"verdict": "pass"}})
            if len(self.sent) == 1:
                raise JudgeLost("killed")
            for job in jobs[1:]:
                on_message({"key": job["key"], "result": {"verdict": "pass"}})

        ready: dict = {}

    backend = LocalBackend.__new__(LocalBackend)
    backend.root, backend.device, backend.judge = tmp_path, "cpu", DiesOnce()
    jobs = [{"key": k, "source": GOOD, "config": {}, "identity": f"c{k}"} for k in range(3)]
    done: list[int] = []
    backend.evaluate(jobs, lambda key, raw: done.append(key))
    first, again = backend.judge.sent
    assert sorted(done) == [0, 1, 2] and [j["key"] for j in again] == [1, 2]
    assert not {j["scratch"] for j in first} & {j["scratch"] for j in again}
