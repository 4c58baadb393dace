"""The evaluator's side of the judge: a judge that dies is seen as dead at once, however it died, so that the
next request starts a new one instead of waiting on a process that will never answer."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

from tools.backend import JudgeClient, JudgeLost

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
