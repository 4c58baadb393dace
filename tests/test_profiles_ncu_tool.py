"""tools/ncu.py on a machine without Nsight Compute: kernel selection, the command line, error reports.

ncu cannot run on a CPU-only machine, so the process handling is exercised against a stand-in
executable that replays a real H200 report (tests/fixtures/ncu); the GPU tests run the real ncu.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from profiles.snapshot import snapshots_from_csv
from tools import ncu
from tools.ncu import EXTRA_METRICS, SECTIONS, NcuError, kernel_names, ncu_command, profile_candidate, run_ncu

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "ncu" / "h200_add_rmsnorm_16384x8192_raw.csv"


def test_kernel_names_are_the_jit_functions_of_the_module() -> None:
    assert kernel_names((REPO / "tests" / "gpu_kernels.py").read_text()) == [
        "spill_rownorm_kernel",
        "small_grid_rmsnorm_kernel",
        "strided_gather_kernel",
        "atomic_hotspot_kernel",
    ]
    split_kv = REPO / "tasks" / "gqa_decode" / "split_kv.py"
    if split_kv.exists():
        assert len(kernel_names(split_kv.read_text())) >= 2  # partials + combine


def test_command_line_profiles_only_our_kernels_after_warm_up() -> None:
    cmd = ncu_command(["python", "-m", "tools.profile_target", "T", "C.py"], ["k1", "k_2"], page="details")
    line = " ".join(cmd)
    assert "--clock-control none" in line and "--profile-from-start off" in line
    assert "-k regex:^(k1|k_2)$" in line
    assert all(f"--section {s}" in line for s in SECTIONS) and len(SECTIONS) == 8
    assert "--csv --page details" in line and line.endswith("python -m tools.profile_target T C.py")
    assert ",".join(EXTRA_METRICS) in line
    recorded = ncu_command(["prog"], ["k"], report=Path("/tmp/out/x"))
    assert recorded[-4:-1] == ["-f", "-o", "/tmp/out/x"] and "--csv" not in recorded


@pytest.fixture
def no_ncu(monkeypatch: pytest.MonkeyPatch) -> None:
    if Path("/usr/local/cuda/bin/ncu").exists() or list(Path("/opt/nvidia").glob("nsight-compute/*/ncu")):
        pytest.skip("ncu is installed here")
    monkeypatch.delenv("NCU", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")


def test_missing_ncu_is_reported_once_with_a_reason(no_ncu: None, tmp_path: Path) -> None:
    assert ncu.ncu_available() == "ncu not found (set $NCU or put Nsight Compute on PATH)"
    task = REPO / "tasks" / "add_rmsnorm"
    if not task.exists():
        pytest.skip("tasks/add_rmsnorm not written yet")
    with pytest.raises(NcuError, match="ncu not found"):
        profile_candidate(task, task / "baseline.py", {}, {"M": 1, "N": 8}, "bfloat16", tmp_path / "x.csv")


STAND_IN = """#!/bin/sh
# Replays a recorded report the way ncu prints it; logs its arguments.
echo "$@" >> "{log}"
case "$*" in *--version*) echo "NVIDIA (R) Nsight Compute Command Line Profiler 2025.3"; exit 0;; esac
if [ -n "$REJECT_METRICS" ] && echo "$*" | grep -q -- "--metrics"; then
  echo "==ERROR== Failed to find metric sm__pipe_tensor_cycles_active"; exit 1
fi
if [ -n "$NO_KERNELS" ]; then echo "==WARNING== No kernels were profiled."; exit 0; fi
cat "{fixture}"
"""


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "args.log"
    script = tmp_path / "ncu"
    script.write_text(STAND_IN.format(log=log, fixture=FIXTURE))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("NCU", str(script))
    return log


def test_report_is_written_with_its_command_and_parses(stand_in: Path, tmp_path: Path) -> None:
    out = run_ncu(["python", "prog.py"], ["add_rmsnorm"], tmp_path / "r" / "k_raw.csv")
    assert out.read_text().startswith("==WARNING==")  # kept exactly as ncu printed it
    assert "--clock-control none" in (tmp_path / "r" / "k_raw.cmd").read_text()
    assert snapshots_from_csv(out)[0]["bottleneck"] == "memory_bound"


def test_an_ncu_without_the_extra_metrics_falls_back_to_the_sections(
    stand_in: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REJECT_METRICS", "1")
    out = run_ncu(["python", "prog.py"], ["add_rmsnorm"], tmp_path / "k_raw.csv")
    runs = stand_in.read_text().splitlines()
    assert len(runs) == 2 and "--metrics" in runs[0] and "--metrics" not in runs[1]
    assert "--metrics" not in out.with_suffix(".cmd").read_text()


def test_no_matching_kernel_is_a_clear_error(
    stand_in: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_KERNELS", "1")
    with pytest.raises(NcuError, match="no kernel matched the -k filter") as info:
        run_ncu(["python", "prog.py"], ["nothing_like_this"], tmp_path / "k.csv")
    assert "No kernels were profiled" in str(info.value)  # ncu's own output travels with the error
    with pytest.raises(NcuError, match="no @triton.jit kernel name"):
        run_ncu(["python", "prog.py"], [], tmp_path / "k.csv")
