"""The GPU session scripts of the unseen tasks, run with parts that need no GPU (the replays)."""

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BRUTE = REPO / "bench" / "results" / "unseen_h200" / "brute"


def test_parallel_groups_each_run_their_parts_on_their_own_gpus(tmp_path):
    out = tmp_path / "out"
    (out / "brute").mkdir(parents=True)
    for name in ("colsum_cpu_gen", "stencil_cpu_gen"):
        shutil.copy(BRUTE / f"{name}.json", out / "brute")
    done = subprocess.run(["bash", "bench/unseen_parallel.sh", str(out), "0-1:replay-colsum_cpu_gen",
                           "2:replay-stencil_cpu_gen"], cwd=REPO, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "group 0-1 (CUDA_VISIBLE_DEVICES=0,1): replay-colsum_cpu_gen" in done.stdout
    assert "group 2 (CUDA_VISIBLE_DEVICES=2): replay-stencil_cpu_gen" in done.stdout
    for name, log in (("colsum_cpu_gen", "group_0-1.log"), ("stencil_cpu_gen", "group_2.log")):
        replay = (out / "brute" / f"{name}.replay.txt").read_text()
        assert replay.startswith(f"{name}: ") and "median:" in replay
        assert f"=== replay-{name}" in (out / log).read_text()


def test_parallel_sessions_need_a_group(tmp_path):
    done = subprocess.run(["bash", "bench/unseen_parallel.sh", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "usage:" in done.stderr
