"""Run Nsight Compute on one candidate at one shape and keep its CSV report.

Tools side: needs only the standard library here (torch/triton run in the profiled child process).
The child (``python -m tools.profile_target``) warms the kernels up, then launches once between
cudaProfilerStart/Stop; ncu runs with ``--profile-from-start off`` so only that launch is measured,
whatever number of kernels each ``launch()`` call issues, and ``-k regex:`` keeps only the module's own
``@triton.jit`` kernels (Triton kernels keep their Python function name).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SECTIONS = (
    "SpeedOfLight",
    "Occupancy",
    "MemoryWorkloadAnalysis",
    "WarpStateStats",
    "LaunchStats",
    "SchedulerStats",
    "ComputeWorkloadAnalysis",
    "InstructionStats",
)
STALL_REASONS = (
    "barrier",
    "branch_resolving",
    "dispatch_stall",
    "drain",
    "gmma",
    "imc_miss",
    "lg_throttle",
    "long_scoreboard",
    "math_pipe_throttle",
    "membar",
    "mio_throttle",
    "misc",
    "no_instruction",
    "not_selected",
    "selected",
    "short_scoreboard",
    "sleeping",
    "tex_throttle",
    "wait",
)
# Requested by name so the details page carries them too (the sections' details page only shows the
# top stall and the busiest pipe in rule text), plus sector-use counters that expose strided access.
EXTRA_METRICS = (
    "smsp__average_warp_latency_per_inst_issued.ratio",
    *(f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in STALL_REASONS),
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_elapsed",
    "lts__d_atomic_input_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
)
MAX_KERNELS = 16  # kernels profiled per launch() call (a launch may issue several)


class NcuError(RuntimeError):
    """ncu could not profile the candidate; the message carries ncu's own output."""


def ncu_binary() -> str | None:
    """The ncu executable: $NCU, then PATH, then the usual CUDA install folders."""
    candidates = [os.environ.get("NCU"), shutil.which("ncu")]
    candidates += ["/usr/local/cuda/bin/ncu", *sorted(Path("/opt/nvidia").glob("nsight-compute/*/ncu"))]
    return next((str(c) for c in candidates if c and Path(c).is_file() and os.access(c, os.X_OK)), None)


def ncu_available() -> str | None:
    """None when ncu can profile here, else the reason it cannot (one line, for a report)."""
    binary = ncu_binary()
    if binary is None:
        return "ncu not found (set $NCU or put Nsight Compute on PATH)"
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{binary} --version failed: {exc}"
    if out.returncode != 0:
        return f"{binary} --version exited {out.returncode}: {(out.stderr or out.stdout).strip()[:200]}"
    if not Path("/dev/nvidiactl").exists() and not shutil.which("nvidia-smi"):
        return "no NVIDIA GPU driver on this machine"
    return None


def kernel_names(source: str) -> list[str]:
    """Names of the ``@triton.jit`` functions of a module (what ncu's -k filter must match)."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef):
            for deco in node.decorator_list:
                target = deco.func if isinstance(deco, ast.Call) else deco
                if ast.unparse(target).split(".")[-1] == "jit":
                    names.append(node.name)
                    break
    return names


def kernel_regex(names: list[str]) -> str:
    return "^(" + "|".join(re.escape(n) for n in names) + ")$"


def ncu_command(
    target: list[str],
    names: list[str],
    page: str = "raw",
    extra_metrics: bool = True,
    report: Path | None = None,
) -> list[str]:
    """The ncu command line profiling ``target`` (argv of the program to run).

    With ``report`` the results go to that .ncu-rep file (export pages later with ``export_command``);
    without it ncu prints the ``page`` as CSV on stdout.
    """
    binary = ncu_binary() or "ncu"
    cmd = [binary, "--clock-control", "none", "--profile-from-start", "off"]
    cmd += ["-k", f"regex:{kernel_regex(names)}", "-c", str(MAX_KERNELS)]
    for section in SECTIONS:
        cmd += ["--section", section]
    if extra_metrics:
        cmd += ["--metrics", ",".join(EXTRA_METRICS)]
    if report is not None:
        cmd += ["-f", "-o", str(_rep_path(report).with_suffix(""))]
    else:
        cmd += ["--csv", "--page", page]
    return cmd + target


def export_command(report: Path, page: str) -> list[str]:
    return [ncu_binary() or "ncu", "--import", str(_rep_path(report)), "--csv", "--page", page]


def _rep_path(report: Path) -> Path:
    report = Path(report)
    return report if report.suffix == ".ncu-rep" else report.with_name(report.name + ".ncu-rep")


def _check_page(page: str) -> None:
    if page not in ("raw", "details"):
        raise ValueError(f"page must be 'raw' or 'details', not {page!r}")


def _profile(
    target: list[str], names: list[str], page: str, report: Path | None, timeout_s: float, cwd: Path
):
    """Run ncu; retried with the sections alone when this ncu lacks one of EXTRA_METRICS."""
    if not names:
        raise NcuError("no @triton.jit kernel name to filter on (-k): nothing to profile")
    if ncu_binary() is None:
        raise NcuError("ncu not found (set $NCU or put Nsight Compute on PATH)")
    for extra in (True, False):
        cmd = ncu_command(target, names, page, extra_metrics=extra, report=report)
        try:
            proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise NcuError(f"ncu timed out after {timeout_s:.0f} s: {' '.join(cmd)}") from exc
        output = proc.stdout + ("\n" + proc.stderr if proc.stderr else "")
        profiled = "No kernels were profiled" not in output
        if proc.returncode == 0 and profiled and (report is not None or '"ID"' in proc.stdout):
            return cmd, proc
        if extra and proc.returncode != 0 and "metric" in output.lower():
            continue  # an ncu without one of EXTRA_METRICS: the sections alone still work
        break
    hint = "" if profiled else " (no kernel matched the -k filter, or the program failed before launching)"
    raise NcuError(f"ncu exited {proc.returncode}{hint}: {' '.join(cmd)}\n{output[-4000:]}")


def run_ncu(
    target: list[str],
    names: list[str],
    out_csv: Path,
    page: str = "raw",
    timeout_s: float = 300,
    cwd: Path = REPO_ROOT,
) -> Path:
    """Profile ``target`` (a command) with ncu and write the ``page`` CSV to ``out_csv``.

    The CSV keeps ncu's own lines exactly as printed (the parser skips them); the command used is
    written beside it as ``<out_csv>.cmd``. Raises NcuError with ncu's output when it fails.
    """
    _check_page(page)
    cmd, proc = _profile(target, names, page, None, timeout_s, cwd)
    out_csv = Path(out_csv)
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    out_csv.write_text(proc.stdout)
    out_csv.with_suffix(".cmd").write_text(shlex.join(cmd) + "\n")
    return out_csv


def record_ncu(
    target: list[str], names: list[str], report: Path, timeout_s: float = 300, cwd: Path = REPO_ROOT
) -> tuple[Path, list[str]]:
    """Profile once into an .ncu-rep file (both pages can then be exported); (report path, command)."""
    report = _rep_path(report)
    report.parent.mkdir(parents=True, exist_ok=True)
    cmd, _ = _profile(target, names, "raw", report, timeout_s, cwd)
    return report, cmd


def export_csv(report: Path, page: str, out_csv: Path, timeout_s: float = 300) -> tuple[Path, list[str]]:
    """Write one page of a recorded .ncu-rep as CSV; (CSV path, command)."""
    _check_page(page)
    cmd = export_command(report, page)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise NcuError(f"ncu --import timed out: {' '.join(cmd)}") from exc
    if proc.returncode != 0 or '"ID"' not in proc.stdout:
        raise NcuError(f"ncu --import exited {proc.returncode}: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    out_csv = Path(out_csv)
    out_csv.write_text(proc.stdout)
    return out_csv, cmd


def profile_target_command(
    task_dir: str | Path, candidate_path: str | Path, config: dict, shape: dict, dtype: str
):
    """argv of the program ncu profiles for one candidate at one shape (tools/profile_target.py)."""
    return [
        sys.executable,
        "-m",
        "tools.profile_target",
        str(Path(task_dir).resolve()),
        str(Path(candidate_path).resolve()),
        "--config",
        json.dumps(config),
        "--shape",
        json.dumps(shape),
        "--dtype",
        dtype,
    ]


def profile_candidate(
    task_dir: str | Path,
    candidate_path: str | Path,
    config: dict,
    shape: dict,
    dtype: str,
    out_csv: Path,
    page: str = "raw",
    timeout_s: float = 300,
) -> Path:
    """Profile one candidate at one shape (its kernels' launches after warm-up) into ``out_csv``."""
    names = kernel_names(Path(candidate_path).read_text())
    target = profile_target_command(task_dir, candidate_path, config, shape, dtype)
    with tempfile.TemporaryDirectory(prefix="ka-profile-") as scratch:  # the sandboxed target's cache
        return run_ncu([*target, "--scratch", scratch], names, out_csv, page=page, timeout_s=timeout_s)
