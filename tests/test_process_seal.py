"""The kernel's half of the judge's boundary on CPU: a process of the same user that holds no capability
(what a worker is) cannot read the memory of a sealed process (the judge, a sealed worker), with or
without any audit hook of ours in the way."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tools.candidate import Candidate
from tools.evaluate import EvalSettings, Evaluator
from tools.task import load_task

HERE = Path(__file__).parent
REPO = HERE.parent
GOOD = (HERE / "fixtures" / "candidates" / "good.py").read_text()

# A stranger as a worker is: same user, every capability dropped, no audit hook. It reads the first
# page of the target's heap (or of its first writable mapping) through /proc/PID/mem.
READER = textwrap.dedent(
    """
    import sys
    from tools import process_seal
    process_seal.drop_capabilities()
    pid = int(sys.argv[1])
    try:
        with open(f"/proc/{pid}/maps") as f:
            rows = [line.split() for line in f]
        row = next(r for r in rows if r[1].startswith("rw"))
        start = int(row[0].split("-")[0], 16)
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            mem.seek(start)
            mem.read(4096)
        print("read")
    except (PermissionError, OSError) as exc:
        print("refused", type(exc).__name__)
    """
)


def _read_as_a_worker(pid: int) -> str:
    out = subprocess.run([sys.executable, "-c", READER, str(pid)], capture_output=True, text=True, cwd=REPO,
                         timeout=60, check=True)  # fmt: skip
    return out.stdout.strip()


def _sleeper(sealed: bool) -> subprocess.Popen:
    """A process as a worker is (no capability), sealed or not."""
    code = "from tools import process_seal\nprocess_seal.drop_capabilities()\n"
    code += "process_seal.seal()\n" if sealed else ""
    code += "print('up', flush=True)\nimport time\ntime.sleep(60)\n"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    return proc


@pytest.fixture(scope="module")
def kernel_allows_same_user_reads() -> None:
    """Where the kernel already refuses a same-user read of an unsealed process (Yama, a container's
    policy), there is nothing for sealing to add and the tests below cannot tell it apart."""
    proc = _sleeper(sealed=False)
    try:
        if _read_as_a_worker(proc.pid) != "read":
            pytest.skip("this kernel refuses same-user memory reads of unsealed processes already")
    finally:
        proc.kill()
        proc.wait()


def test_a_worker_cannot_read_the_memory_of_the_judge(kernel_allows_same_user_reads, tmp_path):
    task = load_task(HERE / "fixtures" / "tasks" / "axpy")
    with Evaluator(task, "cpu", EvalSettings(hidden_seed=7, workdir=str(tmp_path))) as evaluator:
        result = evaluator.evaluate(Candidate(source=GOOD, config={"BLOCK": 128, "num_warps": 4}))
        assert result.passed, result.message  # the judge has made its references by now
        got = _read_as_a_worker(evaluator.judge.proc.pid)
        sealed = evaluator.judge.ready.get("sealed")
    assert got.startswith("refused"), got
    assert sealed is True  # run as root, the judge's capabilities alone would refuse the read above


def test_a_sealed_worker_is_out_of_reach_of_the_other_workers(kernel_allows_same_user_reads):
    proc = _sleeper(sealed=True)
    try:
        got = _read_as_a_worker(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert got.startswith("refused"), got


def test_a_worker_holds_no_capability(tmp_path):
    """Run as root, a worker with its capabilities could read any process (CAP_SYS_PTRACE)."""
    task = load_task(HERE / "fixtures" / "tasks" / "axpy")
    source = (HERE / "fixtures" / "candidates" / "reports_capabilities.py").read_text()
    settings = EvalSettings(hidden_seed=7, workdir=str(tmp_path), static_checks=False)  # it opens a file
    with Evaluator(task, "cpu", settings) as evaluator:
        result = evaluator.evaluate(Candidate(source=source, config={"BLOCK": 128, "num_warps": 4}))
    assert result.error_type == "runtime_error", result.message
    for name in ("CapEff", "CapPrm", "CapInh", "CapBnd"):
        assert f"{name}:\t0000000000000000" in result.message, result.message


def test_sealing_is_what_the_kernel_reports():
    code = "from tools import process_seal as s; print(s.sealed(), s.seal(), s.sealed())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.split() == ["False", "True", "True"]
