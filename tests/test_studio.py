"""Studio's server: `langgraph dev` loads langgraph.json's graph; a run pauses at the human and resumes.

Starts the real local server (no browser, no reload, analytics and version checks off) on a free port
and drives it with langgraph_sdk, as LangGraph Studio does, then stops the server.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parent
AXPY = HERE / "fixtures" / "tasks" / "axpy"
LANGGRAPH = Path(sys.executable).parent / "langgraph"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not LANGGRAPH.exists(), reason="langgraph-cli is not installed (the studio extra)"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, log: Path, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"langgraph dev exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/ok", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"langgraph dev did not answer within {seconds} s:\n{log.read_text()[-3000:]}")


@pytest.fixture
def server(tmp_path):
    from langgraph_sdk import get_sync_client

    port = free_port()
    log = tmp_path / "server.log"
    env = {**os.environ, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGGRAPH_NO_VERSION_CHECK": "1"}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(LANGGRAPH), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, log)
        yield get_sync_client(url=url)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_studio_runs_the_graph_through_an_interrupt_and_a_resume(server, tmp_path):
    task = tmp_path / "task"
    task.mkdir()
    for f in AXPY.iterdir():
        if f.is_file():
            (task / f.name).write_text(f.read_text())
    spec = json.loads((AXPY / "task.json").read_text())
    spec["search_space"] = {"BLOCK": [128, 256], "num_warps": [4]}
    (task / "task.json").write_text(json.dumps(spec))
    run_dir = tmp_path / "run"
    # One candidate, and no round counts as an improvement: a stall asks the human after round 1.
    overrides = {
        "budget": {"candidates_per_round": 1},
        "routing": {"stall_rounds": 1, "stall_improvement": 10},
    }

    thread = server.threads.create()
    tid = thread["thread_id"]
    inputs = {"task": str(task), "device": "cpu", "run_dir": str(run_dir), "overrides": overrides}
    server.runs.wait(tid, "kernel_agent", input=inputs)
    state = server.threads.get(tid)
    assert state["status"] == "interrupted"
    (question,) = [i["value"] for ints in state["interrupts"].values() for i in ints]
    assert "stall" in question["summary"]["why"] and question["choices"]

    values = server.runs.wait(tid, "kernel_agent", command={"resume": "stop"})
    assert server.threads.get(tid)["status"] == "idle"
    assert values["stop"]["status"] == "stopped_by_human"
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "stopped_by_human"
    assert [a["origin"] for a in report["attempts"]] == ["baseline", "expert"]
