"""On a GPU with Nsight Compute: kernels of known bottleneck get their label from real ncu reports.

pytest tests/test_profiles_gpu.py -m gpu -q
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from profiles.render import render_snapshot
from profiles.snapshot import snapshots_from_csv
from tools.ncu import ncu_available, profile_candidate, run_ncu
from tools.task import import_file, load_task

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[1]
GPU_KERNELS = REPO / "tests" / "gpu_kernels.py"


@pytest.fixture(scope="module")
def cases() -> dict:
    reason = ncu_available()
    if reason:
        pytest.skip(reason)
    return import_file(GPU_KERNELS, "_ka_gpu_kernels_test").CASES


def _profile_case(case: str, cases: dict, out: Path) -> dict:
    target = [sys.executable, str(GPU_KERNELS), "run", case]
    csv_path = run_ncu(target, [cases[case]["kernel"]], out / f"{case}_raw.csv", page="raw", cwd=REPO)
    snaps = snapshots_from_csv(csv_path)
    assert len(snaps) == 1, [s["kernel"] for s in snaps]
    return snaps[0]


@pytest.mark.parametrize(
    ("case", "label"),
    [("spills", "register_spills"), ("small_grid", "low_parallelism"), ("strided", "memory_access_pattern")],
)
def test_known_bottleneck_kernels_are_classified(case: str, label: str, cases: dict, tmp_path: Path) -> None:
    snap = _profile_case(case, cases, tmp_path)
    assert cases[case]["label"] == label
    assert snap["bottleneck"] == label, render_snapshot(snap)


def test_atomic_hotspot_is_contention(cases: dict, tmp_path: Path) -> None:
    snap = _profile_case("atomics", cases, tmp_path)
    assert snap["bottleneck"] == "contention", render_snapshot(snap)


def test_task_baseline_profiles_end_to_end(cases: dict, tmp_path: Path) -> None:
    task_dir = REPO / "tasks" / "add_rmsnorm"
    if not task_dir.exists():
        pytest.skip("tasks/add_rmsnorm not written yet")
    task = load_task(task_dir)
    out = profile_candidate(
        task_dir,
        task.path(task.spec.baseline),
        task.default_config(),
        {"M": 4096, "N": 8192},
        task.dtypes[0],
        tmp_path / "add_rmsnorm_details.csv",
        page="details",
    )
    (snap,) = snapshots_from_csv(out)
    assert snap["kernel"] == "add_rmsnorm_kernel" and snap["grid"] == [4096, 1, 1]
    assert snap["metrics"]["top_stalls"], "the --metrics stall counters reach the details page"
