"""The evaluator's side of the judge: a judge that dies is seen as dead at once, however it died, so that the
next request starts a new one instead of waiting on a process that will never answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from process_support import running

from tools.backend import JudgeClient, JudgeLost

REPO = Path(__file__).resolve().parent.parent
READ = "sys.stdin.readline()\n"  # the first request
SETTINGS = {"check_timeout_s": 60, "timing_timeout_s": 60}  # a quiet judge is given 240 s


def fake_judge(tmp_path: Path, after_ready: str) -> type[JudgeClient]:
    """A judge client whose process says ready, then runs ``after_ready``."""
    script = tmp_path / "fake_judge.py"
    script.write_text(
        textwrap.dedent("""
        import json, os, sys, time
        sys.stdin.readline()
        print(json.dumps({"ready": True}), flush=True)
    """)
        + textwrap.dedent(after_ready)
    )

    class Client(JudgeClient):
        COMMAND = [sys.executable, str(script)]

    return Client


def test_a_judge_whose_pipe_closed_is_dead_for_the_next_request(tmp_path):
    """The pipe closes a moment before the process can be reaped: the client must not take that moment for
    a live judge (it would send the batch to the dead one and wait on it)."""
    client = fake_judge(tmp_path, READ + "os.close(1)\ntime.sleep(2)\n")(
        "task", "cpu", SETTINGS, [], tmp_path
    )
    try:
        with pytest.raises(JudgeLost, match="died"):
            client.request("evaluate", lambda message: None, jobs=[])
        assert not client.alive()
    finally:
        client.close()


def test_a_judge_that_died_while_a_child_holds_its_pipe_is_seen_dead_within_seconds(tmp_path):
    client = fake_judge(tmp_path, READ + "if os.fork() == 0:\n    time.sleep(60)\nos._exit(1)\n")(
        "task", "cpu", SETTINGS, [], tmp_path
    )
    started = time.monotonic()
    try:
        with pytest.raises(JudgeLost, match="died"):
            client.request("evaluate", lambda message: None, jobs=[])
        assert time.monotonic() - started < 20
    finally:
        client.close()


def test_the_request_after_a_dead_judge_starts_a_new_one(tmp_path):
    client = fake_judge(tmp_path, READ + "os.close(1)\ntime.sleep(2)\n")(
        "task", "cpu", SETTINGS, [], tmp_path
    )
    try:
        with pytest.raises(JudgeLost):
            client.request("evaluate", lambda message: None, jobs=[])
        with pytest.raises(JudgeLost):  # the new one dies the same way: what matters is that it was started
            client.request("evaluate", lambda message: None, jobs=[])
        assert client.restarts == 1
    finally:
        client.close()


def test_a_judge_that_stopped_reading_is_dead_for_the_next_request(tmp_path):
    client = fake_judge(tmp_path, "os.close(0)\ntime.sleep(2)\n")("task", "cpu", SETTINGS, [], tmp_path)
    try:
        client.ensure()
        time.sleep(0.5)  # its stdin is closed
        with pytest.raises(JudgeLost, match="stopped reading"):
            client.request("evaluate", lambda message: None, jobs=[])
        assert not client.alive()
    finally:
        client.close()


CLIENT_THAT_IS_KILLED = """
import json, sys
from pathlib import Path
from tools.backend import LocalBackend
root, HANG = Path(sys.argv[1]), Path(sys.argv[3])
backend = LocalBackend(sys.argv[2], "cpu", {"check_timeout_s": 120, "timing_timeout_s": 60}, [], root)
backend.judge.ensure()
source = HANG.read_text()
job = backend.job({"key": 0, "source": source, "config": {}, "identity": "0" * 16})
print(json.dumps({"judge": backend.judge.proc.pid, "scratch": job["scratch"]}), flush=True)
backend.judge.request("evaluate", lambda message: None, jobs=[job])
"""


def _processes_in(folder: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.readlink(entry / "cwd").startswith(folder):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_judge_whose_client_was_killed_mid_batch_ends_with_its_workers(tmp_path):
    """Killed mid-batch (a run stopped by a time limit, a lost Dask worker), the client leaves a judge that
    would judge on for nobody, holding its workers and their GPU memory: it must end, and they with it."""
    client = subprocess.Popen([sys.executable, "-c", CLIENT_THAT_IS_KILLED, str(tmp_path), str(REPO / "tests/fixtures/tasks/tiny_scale"),
                               str(REPO / "tests/fixtures/candidates/hang.py")], cwd=REPO,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    started = json.loads(client.stdout.readline())
    deadline = time.monotonic() + 60
    while not _processes_in(started["scratch"]) and time.monotonic() < deadline:
        time.sleep(0.2)  # the worker is running the candidate that never returns
    assert _processes_in(started["scratch"]), "the worker never started"
    client.kill()
    client.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (running(started["judge"]) or _processes_in(started["scratch"])):
        time.sleep(0.2)
    assert not running(started["judge"]), "the judge outlived its client"
    assert not _processes_in(started["scratch"]), "the candidate's worker outlived the judge"


def test_a_dead_judge_says_how_it_ended_and_what_its_log_said(tmp_path):
    """A judge killed by the kernel's out-of-memory killer and one that crashed read alike on its pipe: the
    message must tell them apart (the signal) and carry its last words (judge.log, where its stderr goes)."""
    dies = READ + "print('CUDA error: out of memory at the reference', file=sys.stderr, flush=True)\n"
    dies += "os.kill(os.getpid(), 9)\n"
    client = fake_judge(tmp_path, dies)("task", "cpu", SETTINGS, [], tmp_path)
    try:
        with pytest.raises(JudgeLost) as lost:
            client.request("retime", lambda message: None, jobs=[])
    finally:
        client.close()
    text = str(lost.value)
    assert "killed by signal 9" in text and "out of memory at the reference" in text
    assert str(tmp_path / "judge.log") in text


def test_a_retime_whose_judge_died_is_asked_again_of_a_new_judge(tmp_path):
    """The watchdog's re-time of a new best, its judge killed mid-request: the judge is started again and the
    re-time asked once more, instead of the run ending on the error."""
    from tools.backend import LocalBackend

    script = tmp_path / "fake_judge.py"
    script.write_text(
        textwrap.dedent("""
        import json, os, sys
        sys.stdin.readline()
        print(json.dumps({"ready": True}), flush=True)
        request = json.loads(sys.stdin.readline())
        marker = os.path.join(os.getcwd(), "died_once")
        if not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), 9)
        results = {str(job["key"]): {"verdict": "pass", "scratch": job["scratch"]} for job in request["jobs"]}
        print(json.dumps({"id": request["id"], "results": results, "done": True}), flush=True)
        sys.stdin.readline()
    """)
    )

    class Client(JudgeClient):
        COMMAND = [sys.executable, str(script)]

    backend = LocalBackend.__new__(LocalBackend)
    backend.root, backend.device = tmp_path, "cpu"
    backend.judge = Client("task", "cpu", SETTINGS, [], tmp_path)
    jobs = [{"key": k, "source": "", "config": {}, "identity": f"{k:016x}"} for k in range(2)]
    try:
        answers = backend.retime(jobs)
    finally:
        backend.close()
    assert backend.judge.restarts == 1
    assert sorted(answers) == [0, 1] and all(a["verdict"] == "pass" for a in answers.values())
