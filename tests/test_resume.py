"""Durable runs through the real CLI and the real evaluator (CPU, Triton interpreter):
a run killed with SIGKILL mid-evaluation resumes without evaluating a finished candidate again, and a
run paused for a human exits 3, then continues from --resume RUN_DIR --answer TEXT in a new process."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parent
AXPY = HERE / "fixtures" / "tasks" / "axpy"
# One candidate per round, and no round counts as an improvement: the human is asked after round 1.
STALL_AFTER_ONE = ("--set", "budget.candidates_per_round=1", "--set", "routing.stall_rounds=1",
                   "--set", "routing.stall_improvement=10")  # fmt: skip


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "graph.run", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def tiny_task(tmp_path: Path, space: dict) -> Path:
    folder = tmp_path / "task"
    folder.mkdir()
    for f in AXPY.iterdir():
        if f.is_file():
            (folder / f.name).write_text(f.read_text())
    spec = json.loads((AXPY / "task.json").read_text())
    spec["search_space"] = space
    (folder / "task.json").write_text(json.dumps(spec))
    return folder


def descendants(pid: int) -> list[int]:
    """PIDs whose parent chain leads to ``pid`` (the run's worker processes)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = [], [pid]
    while frontier:
        children = [p for p, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


@pytest.mark.slow
def test_sigkill_during_evaluation_then_resume_reuses_every_finished_candidate(tmp_path):
    run_dir = tmp_path / "run"
    args = [str(AXPY), "--device", "cpu", "--rounds", "1", "--run-dir", str(run_dir), "--non-interactive",
            "--set", "budget.candidates_per_round=4"]  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "graph.run", *args], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    results = run_dir / "results"
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if len(list(results.glob("*.json"))) >= 2:  # the baseline and at least one candidate
                break
            time.sleep(0.05)
        workers = descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    for pid in workers:  # the evaluator's workers run in their own sessions: end them by id
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    finished = {p.name: p.stat().st_mtime_ns for p in results.glob("*.json")}
    assert proc.returncode == -signal.SIGKILL and 2 <= len(finished) < 5, finished

    done = cli("--resume", str(run_dir), "--non-interactive")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resuming at evaluate" in done.stdout
    for name, mtime in finished.items():
        assert (results / name).stat().st_mtime_ns == mtime, f"{name} was evaluated again"
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "budget_exhausted" and len(report["attempts"]) == 5
    assert len(list(results.glob("*.json"))) == 5
    trail = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    assert any(e["message"] == f"reused {len(finished) - 1} finished result(s) from results/" for e in trail)


@pytest.mark.slow
def test_a_paused_run_exits_3_and_resumes_in_a_new_process_with_each_answer(tmp_path):
    task = tiny_task(tmp_path, {"BLOCK": [128, 256], "num_warps": [4]})
    run_dir = tmp_path / "run"
    first = cli(
        str(task), "--device", "cpu", "--run-dir", str(run_dir), "--non-interactive", *STALL_AFTER_ONE
    )
    assert first.returncode == 3, first.stdout + first.stderr
    assert f"--resume {run_dir}" in first.stdout
    assert json.loads((run_dir / "report.json").read_text())["status"] == "awaiting_human"

    bad = cli("--resume", str(run_dir), "--answer", "widen nosuchkey=3")
    assert bad.returncode == 2 and "unknown search-space key 'nosuchkey'" in bad.stdout

    # The widened value is tried in the next round, which stalls again: a second question.
    widened = cli("--resume", str(run_dir), "--answer", "widen num_warps=8", "--non-interactive")
    assert widened.returncode == 3, widened.stdout + widened.stderr
    report = json.loads((run_dir / "report.json").read_text())
    configs = [a["config"] for a in report["attempts"]]
    assert configs[:2] == [{"BLOCK": 128, "num_warps": 4}, {"BLOCK": 256, "num_warps": 4}]
    assert len(configs) == 3 and configs[2]["num_warps"] == 8
    assert report["search_spaces"]["baseline.py"]["num_warps"] == [4, 8]

    stopped = cli("--resume", str(run_dir), "--answer", "stop")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "stopped_by_human" and (run_dir / "progress.png").stat().st_size > 0

    again = cli("--resume", str(run_dir))
    assert again.returncode == 0 and "has finished" in again.stdout


def test_bad_input_exits_2_with_a_message_naming_the_problem(tmp_path):
    missing = cli(str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "task file not found" in missing.stdout

    broken = tiny_task(tmp_path, {"BLOCK": [128], "num_warps": [4]})
    spec = json.loads((broken / "task.json").read_text())
    spec["shapes"] = []
    (broken / "task.json").write_text(json.dumps(spec))
    bad_task = cli(str(broken))
    assert bad_task.returncode == 2 and "shapes" in bad_task.stdout

    assert cli(str(AXPY), "--set", "routing.no_such=1").returncode == 2
    assert cli(str(AXPY), "--model", "nosuchprovider:model").returncode == 2
    assert cli("--resume", str(tmp_path)).returncode == 2
    assert cli(str(AXPY), "--answer", "stop").returncode == 2


@pytest.mark.slow
def test_in_a_terminal_the_cli_asks_and_applies_the_answer(tmp_path):
    task = tiny_task(tmp_path, {"BLOCK": [128, 256], "num_warps": [4]})
    run_dir = tmp_path / "run"
    main, child = pty.openpty()
    cmd = [
        sys.executable,
        "-m",
        "graph.run",
        str(task),
        "--device",
        "cpu",
        "--run-dir",
        str(run_dir),
        *STALL_AFTER_ONE,
    ]
    proc = subprocess.Popen(cmd,
                            cwd=REPO, stdin=child, stdout=child, stderr=child, start_new_session=True)  # fmt: skip
    os.close(child)
    seen = b""
    try:
        deadline = time.monotonic() + 240
        while b"answer>" not in seen and time.monotonic() < deadline:
            if select.select([main], [], [], 1)[0]:
                seen += os.read(main, 4096)
        assert b"answer>" in seen, seen.decode(errors="replace")
        os.write(main, b"widen nosuchkey=1\n")  # a wrong answer is explained and asked again
        os.write(main, b"stop\n")
        assert proc.wait(timeout=120) == 0
        with contextlib.suppress(OSError):
            while select.select([main], [], [], 0.2)[0]:
                seen += os.read(main, 4096)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        os.close(main)
    assert b"unknown search-space key" in seen
    assert json.loads((run_dir / "report.json").read_text())["status"] == "stopped_by_human"


def test_fix_mode_reads_the_failing_source_from_the_run_folder(tmp_path):
    """After a resume in a new process the proposer has no memory of what it wrote: the failure handed
    to fix mode carries its source, read back from the run folder."""
    from loop.records import Attempt
    from nodes.records import with_log
    from tools.run_folder import RunFolder

    (tmp_path / "candidates").mkdir()
    (tmp_path / "candidates" / "abc.py").write_text("def launch(x):\n    return x  # broken\n")
    attempt = Attempt(
        n=1, round=1, identity="abc", module="baseline.py", candidate="candidates/abc.py", verdict="fail"
    )
    failure = with_log(attempt, RunFolder(tmp_path)).model_dump()
    assert failure["source"].startswith("def launch(x)") and failure["log"] == ""
    gone = Attempt(n=2, round=1, identity="gone", module="baseline.py", verdict="fail")
    assert with_log(gone, RunFolder(tmp_path)).model_dump()["source"] == ""
