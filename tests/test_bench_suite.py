"""The benchmark suite's non-GPU half: the markdown table, the acceptance checks and the roofline plot,
from a small suite JSON built here. Its numbers are a test fixture, not a measurement."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pytest

from bench.suite import check_acceptance, check_outputs, markdown, speedup, write_outputs

REPO = Path(__file__).resolve().parent.parent
COPY = 4000.0


def timed(us: float, moved: float) -> dict:
    gbps = moved / (us * 1e-6) / 1e9
    return {"median_us": us, "min_us": us, "spread": 1.0, "gbps": gbps, "roofline_pct": 100 * gbps / COPY,
            "method": "cuda_graph"}  # fmt: skip


def row(shape: dict, moved: float, **us: float) -> dict:
    return {
        "shape": shape,
        "dtype": "bfloat16",
        "bytes": moved,
        "methods": {m: timed(t, moved) for m, t in us.items()},
    }


def fixture() -> dict:
    big, small = 4096 * 4096 * 2 * 4 + 8192, 1 * 4096 * 2 * 4 + 8192  # add_rmsnorm: x, r, y, h + w
    kv8, kv1 = 2 * 8 * 8 * 8192 * 128 * 2, 2 * 1 * 8 * 32768 * 128 * 2  # gqa_decode: the KV cache
    rmsnorm_rows = [
        row(
            {"M": 4096, "N": 4096},
            big,
            best=36.0,
            baseline=38.0,
            eager=410.0,
            compile=56.0,
            max_autotune=50.0,
        ),
        row({"M": 1, "N": 4096}, small, best=5.0, baseline=5.4, eager=30.0, compile=6.8, max_autotune=6.0),
    ]
    gqa_rows = [
        row({"B": 1, "S": 32768}, kv1, best=60.0, baseline=900.0, eager=400.0, compile=200.0, sdpa=50.0),
        row({"B": 8, "S": 8192}, kv8, best=70.0, baseline=300.0, eager=700.0, compile=150.0, sdpa=75.0),
    ]
    gqa_rows[0]["methods"]["max_autotune"] = {"error": "InductorError: out of resources"}
    rmsnorm_rows[0]["copy_same_size_us"] = 34.2  # the ceiling at 134 MB; older suites lack the field
    common = {"date": "fixture", "gpu": "fixture GPU", "torch": "x", "triton": "y", "copy_gbps": COPY}
    return {
        "tasks": {
            "add_rmsnorm": {**common, "rows": rmsnorm_rows, "search": {"status": "target_met", "wall_s": 312.0,
                            "rounds": 3, "candidates_evaluated": 20, "run_dir": "runs/add_rmsnorm"},
                            "export": {"path": "kernels/add_rmsnorm.py", "dispatch": "single",
                                       "module": "multirow.py", "config": {"ROWS": 4, "num_warps": 8}}},
            "gqa_decode": {**common, "rows": gqa_rows, "search": {"status": "budget_exhausted", "wall_s": 640.0}},
        }
    }  # fmt: skip


def test_acceptance_checks_use_the_shapes_and_targets_of_the_issue():
    report = fixture()
    rms = {c["what"]: c for c in check_acceptance("add_rmsnorm", report["tasks"]["add_rmsnorm"])}
    pct = rms["our best >= 92% of the copy bandwidth at M >= 4096"]
    assert pct["met"] and abs(pct["value"] - timed(36.0, 4096 * 4096 * 8 + 8192)["roofline_pct"]) < 1e-9
    vs = rms["our best >= 1.3x torch.compile at M >= 4096 (geomean)"]
    assert vs["met"] and abs(vs["value"] - 56.0 / 36.0) < 1e-9  # the M=1 row (1.36x) is not counted
    gqa = {c["what"]: c for c in check_acceptance("gqa_decode", report["tasks"]["gqa_decode"])}
    assert gqa["our best >= 85% of the copy bandwidth at B >= 8"]["met"]
    b1 = gqa["our best >= 60% of the copy bandwidth at B = 1"]
    assert b1["met"] is False and 50 < b1["value"] < 60
    assert gqa["the search run took <= 10 minutes"]["met"] is False
    assert check_acceptance("softmax", {"rows": []})[0]["met"] is None  # not measured is not a pass


def test_the_markdown_table_has_every_method_errors_and_the_verdicts():
    report = fixture()
    text = markdown(report)
    assert "| shape | dtype | MB | our best us | baseline us | torch eager us | torch.compile us |" in text
    assert "torch SDPA (enable_gqa) us" in text and "error: InductorError: out of resources" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("| M=4096 N=4096 |"))
    assert "| 36.0 |" in line and f"{56 / 36:.2f}x" in line
    assert f"| 34.2 | {100 * 34.2 / 36:.1f} |" in line  # the same-size copy and our best's share of it
    small = next(ln for ln in text.splitlines() if ln.startswith("| M=1 N=4096 |"))
    assert "| - | - |" in small
    assert "| our best >= 60% of the copy bandwidth at B = 1 |" in text and "**no**" in text
    assert (
        speedup(report["tasks"]["gqa_decode"]["rows"], "sdpa")
        < 1
        < speedup(report["tasks"]["gqa_decode"]["rows"], "compile")
    )
    assert speedup([], "sdpa") is None  # no row timed by both


def test_outputs_and_the_roofline_plot_are_written_from_the_json(tmp_path):
    report = fixture()
    write_outputs(report, tmp_path)
    assert json.loads((tmp_path / "suite.json").read_text()) == report
    assert (tmp_path / "suite.md").read_text() == markdown(report)
    image = matplotlib.image.imread(tmp_path / "roofline.png")
    assert image.shape[0] > 600 and image.shape[1] > 800  # two panels, one per task
    done = subprocess.run(
        [sys.executable, "bench/plot.py", str(tmp_path / "suite.json"), "--out", str(tmp_path / "again.png")],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert matplotlib.image.imread(tmp_path / "again.png").shape == image.shape


def test_every_timed_method_is_checked_by_the_evaluators_rule_first():
    """The suite and the probe time nothing whose output misses the reference (softmax on CPU)."""
    import torch

    from tools.task import load_task

    task = load_task(Path(__file__).resolve().parents[1] / "tasks" / "softmax")
    (x,) = task.make_inputs({"M": 4, "N": 300}, torch.float32, "cpu", 0)
    expected = (task.reference(x),)
    check_outputs((expected[0].clone(),), expected, task, "float32")
    wrong = expected[0].clone()
    wrong[1, 5] += 1.0
    with pytest.raises(AssertionError, match=r"mismatch at \[1, 5\]"):
        check_outputs((wrong,), expected, task, "float32")


def test_an_unattended_search_answers_continue_when_the_run_pauses(tmp_path):
    """Nobody watches a suite run: a stall that asks the human is answered "continue" and the run ends
    on its budget, with a report, instead of stopping the suite at the first question."""
    import argparse

    from bench.suite import search

    args = argparse.Namespace(
        device="cpu", seed=0, rounds=3, minutes=None, search_timeout=600,
        # every round is a stall: nothing can get 99% faster
        set=["routing.stall_rounds=1", "routing.stall_improvement=0.99", "budget.candidates_per_round=2"],
    )  # fmt: skip
    summary = search("axpy", tmp_path, args, task_dir=REPO / "tests" / "fixtures" / "tasks" / "axpy")
    assert summary["answered_continue"] == 2, (tmp_path / "runs" / "axpy.log").read_text()[-3000:]
    assert summary["exit_code"] == 0 and summary["status"] == "budget_exhausted" and summary["rounds"] == 3
    log = (tmp_path / "runs" / "axpy.log").read_text()
    assert log.count("[suite] unattended: answering 'continue'") == 2
    assert "paused 2 time(s) for a human" in markdown({"tasks": {"axpy": {"search": summary}}})
