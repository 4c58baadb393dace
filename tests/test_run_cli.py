"""A run that survives its user, through the real CLI and evaluator (CPU, Triton interpreter): answers
are checked before they are taken, ``stop`` ends a run from any state, a finished run takes no other
answer, a copied run folder resumes as itself, and --unattended never asks."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from langgraph.types import Command

from graph.run import THREAD, open_graph, pending_question
from nodes.runtime import RunContext

HERE = Path(__file__).parent
REPO = HERE.parent
AXPY = HERE / "fixtures" / "tasks" / "axpy"
# One candidate per round, and no round counts as an improvement: the run pauses after round 1; its
# space holds two configs, so the baseline and round 1 exhaust it.
STALL_AFTER_ONE = ("--set", "budget.candidates_per_round=1", "--set", "routing.stall_rounds=1",
                   "--set", "routing.stall_improvement=10", "--no-memory")  # fmt: skip

pytestmark = pytest.mark.slow


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "graph.run", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip


def strings(value) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


@pytest.fixture(scope="module")
def paused(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("paused")
    task = root / "task"
    shutil.copytree(AXPY, task)
    spec = json.loads((task / "task.json").read_text())
    spec["search_space"] = {"BLOCK": [128, 256], "num_warps": [4]}
    (task / "task.json").write_text(json.dumps(spec))
    first = cli(str(task), "--device", "cpu", "--run-dir", str(root / "run"), "--non-interactive", *STALL_AFTER_ONE)
    assert first.returncode == 3, first.stdout + first.stderr
    return root / "run"


@pytest.fixture
def run(paused: Path, tmp_path: Path) -> Path:
    """A fresh copy of the paused run for each test."""
    shutil.copytree(paused, tmp_path / "run")
    return tmp_path / "run"


def test_a_refused_answer_exits_2_and_leaves_the_question_open(run):
    before = digests(run)
    for answer, why in [
        ("widen num_warps=abc", "num_warps takes whole numbers"),
        ("widen BLOCK=100", "BLOCK sizes a block (tl.arange) in baseline.py"),
        ("constrain forbid=", "names no construct"),
        (f"candidate {run / 'nowhere.py'}", "candidate file not found"),
        ("carry on", "unknown answer 'carry'"),
    ]:
        refused = cli("--resume", str(run), "--answer", answer)
        assert refused.returncode == 2 and why in refused.stdout, (answer, refused.stdout)
    assert digests(run) == before  # nothing was written: not the checkpoint, not the trail
    with open_graph(run) as app:
        assert pending_question(app) is not None


def killed(*args, **kwargs):
    raise KeyboardInterrupt("killed while evaluating")


def test_stop_ends_a_run_stopped_mid_step_with_a_report(run):
    with open_graph(run) as app, pytest.raises(KeyboardInterrupt):  # the process dies inside evaluate
        for _ in app.stream(Command(resume="widen num_warps=8"), THREAD, durability="sync",
                            context=RunContext(run_dir=str(run), evaluator=killed)):  # fmt: skip
            pass
    with open_graph(run) as app:  # as a kill leaves it: a step to run, no question waiting
        assert app.get_state(THREAD).next == ("evaluate",) and pending_question(app) is None
    before = digests(run)
    widen = cli("--resume", str(run), "--answer", "widen num_warps=16")
    assert widen.returncode == 2 and "takes no 'widen'" in widen.stdout, widen.stdout
    assert digests(run) == before
    stopped = cli("--resume", str(run), "--answer", "stop")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    report = json.loads((run / "report.json").read_text())
    assert report["status"] == "stopped_by_human" and "stopped during evaluate" in report["reason"]
    assert report["pauses"][-1] == {"round": 1, "why": "the run was stopped during evaluate", "answer": "stop",
                                    "by": "human", "evaluated": 1}  # fmt: skip
    assert len(report["attempts"]) == 2  # the candidate whose evaluation died is not a result
    assert len(report["resumed"]) == 1  # the resume is on record; the refused answer wrote nothing
    markdown = (run / "report.md").read_text()
    assert "- stopped mid-step and resumed 1 time(s)" in markdown and "r1 resume: the run was stopped" in markdown
    assert (run / "kernel.py").is_file()


def test_a_finished_run_takes_no_answer_but_stop(run):
    assert cli("--resume", str(run), "--answer", "stop").returncode == 0
    gibberish = cli("--resume", str(run), "--answer", "blah blah")
    assert gibberish.returncode == 2 and "unknown answer 'blah'" in gibberish.stdout
    again = cli("--resume", str(run), "--answer", "continue")
    assert again.returncode == 2 and "has finished (stopped_by_human)" in again.stdout
    assert cli("--resume", str(run), "--answer", "stop").returncode == 0


def test_a_copied_run_resumes_as_itself_and_never_touches_the_original(run, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    original = digests(run)
    with open_graph(copy) as app:
        state = app.get_state(THREAD)
        inside = [s for s in strings(state.values) + strings(pending_question(app)) if str(run) in s]
    assert inside == []  # no absolute path into the folder in the checkpointed state or the question

    resumed = cli("--resume", str(copy), "--answer", "widen num_warps=8", "--non-interactive")
    assert resumed.returncode == 3, resumed.stdout + resumed.stderr  # round 2 stalls too
    assert digests(run) == original
    report = json.loads((copy / "report.json").read_text())
    assert report["run_dir"] == str(copy) and [a["config"]["num_warps"] for a in report["attempts"]][-1] == 8
    assert (copy / report["attempts"][-1]["result"]).is_file()
    assert f"--resume {copy}" in resumed.stdout


def test_unattended_answers_the_open_question_and_stops_once_the_search_has_converged(run):
    done = cli("--resume", str(run), "--unattended")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((run / "report.json").read_text())
    # the two configs of the space are evaluated: the proposer has converged, so the policy stops
    assert report["status"] == "converged" and "every config of the search space" in report["reason"]
    assert [(p["by"], p["answer"].split(" ", 1)[0]) for p in report["pauses"]] == [("policy", "stop")]
    assert "## Pauses" in (run / "report.md").read_text()


def test_unattended_never_asks_and_exits_0_with_every_pause_in_the_report(tmp_path):
    args = ("--set", "budget.candidates_per_round=1", "--set", "routing.stall_rounds=1",
            "--set", "routing.stall_improvement=10", "--no-memory")  # fmt: skip
    done = cli(str(AXPY), "--device", "cpu", "--rounds", "3", "--run-dir", str(tmp_path / "run"), "--unattended", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["status"] == "budget_exhausted" and report["rounds"] == 3
    assert [(p["round"], p["by"]) for p in report["pauses"]] == [(1, "policy"), (2, "policy")]
    assert all(p["answer"].startswith("continue (unattended: ") for p in report["pauses"])


def test_the_main_job_runs_without_the_memory_extra_and_says_memory_is_off(tmp_path):
    """scripts/setup.sh installs no chromadb (the test command adds it): the run says memory is off."""
    shadow = tmp_path / "shadow" / "chromadb"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "shadow"), "KERNEL_AGENT_HOME": str(tmp_path / "home")}
    cmd = [sys.executable, "-m", "graph.run", str(AXPY), "--device", "cpu", "--rounds", "1", "--non-interactive",
           "--run-dir", str(tmp_path / "run"), "--set", "budget.candidates_per_round=1"]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "memory off: chromadb cannot be imported" in done.stdout
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["memory"]["enabled"] is False and report["status"] == "budget_exhausted"
