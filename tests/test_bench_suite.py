"""The benchmark suite without a GPU: the report (markdown, acceptance checks, roofline plot) from a small
suite JSON built here, whose numbers are a test fixture, not a measurement; and the time stage run on
the CPU (kernels in Triton's interpreter, torch.compile through Inductor's C++ backend, a wall clock in
place of the GPU's two clocks)."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import matplotlib.image
import pytest
import torch

from bench.anchors import AnchorError, task_anchors
from bench.suite_report import check_acceptance, markdown, speedup, strongest_anchor, write_outputs
from bench.suite_time import Clocks, check_outputs, time_task
from tools.task import load_task

REPO = Path(__file__).resolve().parent.parent
COPY = 4000.0


def timed(us: float, moved: float, user: float | None = None) -> dict:
    """A method's record: device-clock ``us``, user's clock ``user`` (default: 4 us of host work more)."""
    gbps = moved / (us * 1e-6) / 1e9
    return {"median_us": us, "min_us": us, "spread": 1.0, "gbps": gbps, "roofline_pct": 100 * gbps / COPY,
            "method": "cuda_graph", "user_us": user or us + 4.0}  # fmt: skip


def row(shape: dict, moved: float, **us: float | tuple[float, float]) -> dict:
    """us: method -> device-clock us, or (device us, user's-clock us)."""
    return {
        "shape": shape,
        "dtype": "bfloat16",
        "bytes": moved,
        "methods": {
            m: timed(t[0], moved, t[1]) if isinstance(t, tuple) else timed(t, moved) for m, t in us.items()
        },
    }


def fixture() -> dict:
    big, small = 4096 * 4096 * 2 * 4 + 8192, 1 * 4096 * 2 * 4 + 8192  # add_rmsnorm: x, r, y, h + w
    kv8, kv1 = 2 * 8 * 8 * 8192 * 128 * 2, 2 * 1 * 8 * 32768 * 128 * 2  # gqa_decode: the KV cache
    liger = "liger.fused_add_rms_norm"
    rmsnorm_rows = [
        row({"M": 4096, "N": 4096}, big, best=(36.0, 40.0), baseline=38.0, eager=410.0, compile=(56.0, 42.0),
            max_autotune=50.0, compile_dynamic=70.0, **{liger: (37.0, 45.0)}),
        row({"M": 1, "N": 4096}, small, best=5.0, baseline=5.4, eager=30.0, compile=6.8, max_autotune=6.0),
    ]  # fmt: skip
    gqa_rows = [
        row({"B": 1, "S": 32768}, kv1, best=60.0, baseline=900.0, eager=400.0, compile=200.0, sdpa=50.0),
        row({"B": 8, "S": 8192}, kv8, best=70.0, baseline=300.0, eager=700.0, compile=150.0, sdpa=75.0),
    ]
    gqa_rows[0]["methods"]["max_autotune"] = {"refused": "InductorError: out of resources"}
    rmsnorm_rows[1]["methods"][liger] = {"error": "AssertionError: mismatch at [0, 3]: got 1.0, expected 2.0"}
    rmsnorm_rows[0]["copy_same_size_us"] = 34.2  # the ceiling at 134 MB; older suites lack the field
    common = {"date": "fixture", "gpu": "fixture GPU", "torch": "x", "triton": "y", "copy_gbps": COPY,
              "compilers": ["default", "max-autotune", "dynamic"]}  # fmt: skip
    return {
        "tasks": {
            "add_rmsnorm": {**common, "rows": rmsnorm_rows, "libraries": {"liger-kernel": "0.8.5"},
                            "search": {"status": "target_met", "wall_s": 312.0,
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
    vs = rms["our best >= 1.3x torch.compile (static, per shape) at M >= 4096 (geomean)"]
    assert vs["met"] and abs(vs["value"] - 56.0 / 36.0) < 1e-9  # the M=1 row (1.36x) is not counted
    gqa = {c["what"]: c for c in check_acceptance("gqa_decode", report["tasks"]["gqa_decode"])}
    assert gqa["our best >= 85% of the copy bandwidth at B >= 8"]["met"]
    b1 = gqa["our best >= 60% of the copy bandwidth at B = 1"]
    assert b1["met"] is False and 50 < b1["value"] < 60
    assert gqa["the search run took <= 10 minutes"]["met"] is False
    assert check_acceptance("softmax", {"rows": []})[0]["met"] is None  # not measured is not a pass


def _line(text: str, start: str, after: str) -> str:
    """The first line starting with ``start`` below the line ``after``."""
    lines = text.splitlines()
    return next(ln for ln in lines[lines.index(after) :] if ln.startswith(start))


def test_the_strongest_anchor_per_shape_and_clock_is_the_one_our_best_is_compared_against():
    """Liger is the strongest on the device clock at 4096x4096, the static compile on the user's; our
    best is compared against each (and against every anchor, on both clocks)."""
    report = fixture()
    big = report["tasks"]["add_rmsnorm"]["rows"][0]
    assert (
        strongest_anchor(big) == "liger.fused_add_rms_norm" and strongest_anchor(big, "user_us") == "compile"
    )
    assert strongest_anchor({"methods": {"best": timed(1.0, 1)}}) is None  # ours are never an anchor
    text = markdown(report)
    device = _line(text, "| M=4096 N=4096 |", "Device clock:")
    assert f"| Liger fused add+RMSNorm | {37 / 36:.2f}x |" in device
    assert f"| 34.2 | {100 * 34.2 / 36:.1f} |" in device  # the same-size copy and our best's share of it
    user = _line(text, "| M=4096 N=4096 |", "User's clock:")
    assert "| 40.0 |" in user and f"| torch.compile static | {42 / 40:.2f}x |" in user
    each = _line(text, "| M=4096 N=4096 |", "Our best over each anchor (device / user's clock):")
    assert f"| {56 / 36:.2f}x / {42 / 40:.2f}x |" in each and f"| {70 / 36:.2f}x / {74 / 40:.2f}x |" in each
    small = _line(text, "| M=1 N=4096 |", "Device clock:")
    assert "error: AssertionError: mismatch at [0, 3]" in small  # a wrong anchor is shown, not timed
    assert strongest_anchor(report["tasks"]["add_rmsnorm"]["rows"][1]) == "max_autotune"
    rows = report["tasks"]["gqa_decode"]["rows"]
    assert speedup(rows, "strongest") == pytest.approx(((50 / 60) * (75 / 70)) ** 0.5)
    assert speedup(rows, "sdpa") < 1 < speedup(rows, "compile")
    assert speedup([], "sdpa") is None  # no row timed by both
    assert "- Liger-Kernel 0.8.5" not in text and "liger-kernel 0.8.5" in text


def test_the_markdown_has_every_method_refusals_with_their_message_and_the_verdicts():
    text = markdown(fixture())
    header = "| shape | dtype | MB | our best us | baseline us | torch eager us | torch.compile static us |"
    assert header in text and "torch.compile dynamic us" in text and "torch SDPA (enable_gqa) us" in text
    assert (
        "- torch.compile max-autotune static refused B=1 S=32768 bfloat16: InductorError: out of resources"
        in text
    )
    assert "| our best >= 60% of the copy bandwidth at B = 1 |" in text and "**no**" in text
    assert "- device clock, geomean speedup of our best over the strongest anchor" in text
    assert "- user clock, geomean speedup of our best over the strongest anchor" in text
    assert "timed before torch.compile was compiled per shape" not in text
    older = fixture()
    del older["tasks"]["gqa_decode"]["compilers"]  # a suite.json written before the per-shape compiles
    assert markdown(older).count("**timed before torch.compile was compiled per shape**") == 1


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
    task = load_task(REPO / "tasks" / "softmax")
    (x,) = task.make_inputs({"M": 4, "N": 300}, torch.float32, "cpu", 0)
    expected = (task.reference(x),)
    check_outputs((expected[0].clone(),), expected, task, "float32")
    wrong = expected[0].clone()
    wrong[1, 5] += 1.0
    with pytest.raises(AssertionError, match=r"mismatch at \[1, 5\]"):
        check_outputs((wrong,), expected, task, "float32")


def test_an_unattended_search_has_the_policy_answer_every_pause(tmp_path):
    """Nobody watches a suite run: it runs graph.run --unattended, so a stall is answered by the policy
    (continue) and the run ends on its budget with a report that lists each pause, instead of stopping
    the suite at the first question."""
    import argparse

    from bench.suite import search

    args = argparse.Namespace(
        device="cpu", seed=0, rounds=3, minutes=None, search_timeout=600,
        # every round is a stall: nothing can get 99% faster; the search may not stop as converged first
        set=["routing.stall_rounds=1", "routing.stall_improvement=0.99", "budget.candidates_per_round=2",
             "search.converge_rounds=100"],
    )  # fmt: skip
    summary = search("axpy", tmp_path, args, task_dir=REPO / "tests" / "fixtures" / "tasks" / "axpy")
    log = (tmp_path / "runs" / "axpy.log").read_text()
    assert summary["exit_code"] == 0 and summary["status"] == "budget_exhausted" and summary["rounds"] == 3, log[-3000:]
    assert [(p["by"], p["answer"].split(" ", 1)[0]) for p in summary["pauses"]] == [("policy", "continue")] * 2
    assert "paused 2 time(s), answered by the unattended policy (continue, continue)" in markdown(
        {"tasks": {"axpy": {"search": summary}}}
    )


# -- the time stage on the CPU ----------------------------------------------------------------------------
def wall_clock(fn) -> dict:
    """The CPU's stand-in for both GPU clocks: the median wall time of three calls."""
    samples = []
    for _ in range(3):
        started = time.perf_counter()
        fn()
        samples.append(1e6 * (time.perf_counter() - started))
    us = statistics.median(samples)
    return {"median_us": us, "min_us": min(samples), "spread": 1.0, "method": "wall", "user_us": us}


CPU = Clocks("cpu", copy_gbps=COPY, time=wall_clock, same_size_us=lambda moved: None)


def test_each_shape_gets_its_own_static_compile_and_the_dynamic_column_one_compile_for_all():
    """Compiled once and called on every shape, Inductor recompiles with dynamic shapes at the second
    shape (the "torch.compile dynamic" column); the static column is a fresh dynamic=False compile per shape,
    one graph each, and no shape is left to eager by Dynamo's recompile limit (8 a function; 2 here, so
    that three shapes would pass it). Real torch.compile (Inductor's C++ backend), counted by Dynamo."""
    from torch._dynamo.utils import counters

    with torch._dynamo.config.patch(recompile_limit=2):  # patched and restored by Dynamo itself
        _one_static_compile_per_shape(counters)


def _one_static_compile_per_shape(counters) -> None:
    task = load_task(REPO / "tasks" / "add_rmsnorm")
    workload = [
        ({"M": 4, "N": 256}, "bfloat16"),
        ({"M": 6, "N": 768}, "bfloat16"),
        ({"M": 8, "N": 512}, "bfloat16"),
    ]
    compiles: list[dict] = []

    def recording_compile(fn, **options):
        compiled = torch.compile(fn, **options)
        record = {"options": options, "graphs": 0}
        compiles.append(record)

        def call(*inputs):
            before = counters["stats"]["unique_graphs"]
            out = compiled(*inputs)
            record["graphs"] += counters["stats"]["unique_graphs"] - before
            return out

        return call

    done = time_task(task, ["default", "dynamic"], None, clocks=CPU, workload=workload,
                     compile_fn=recording_compile)  # fmt: skip
    static, dynamic = compiles[:3], compiles[3:]
    assert [c["options"] for c in static] == [{"dynamic": False, "mode": None}] * 3
    assert [c["graphs"] for c in static] == [1, 1, 1]  # one static graph per shape, never a recompile
    assert [c["options"] for c in dynamic] == [{}] and dynamic[0]["graphs"] == 2  # static, then dynamic
    for r in done["rows"]:
        for label in ("baseline", "eager", "compile", "compile_dynamic"):
            assert r["methods"][label]["median_us"] > 0, (label, r["methods"][label])  # checked, then timed
        # Liger cannot run this op in Triton's interpreter (or is not installed): refused, not dropped
        assert "refused" in r["methods"]["liger.fused_add_rms_norm"]
        assert r["strongest"]["device"] in ("eager", "compile", "compile_dynamic")


def test_a_library_anchor_is_checked_then_timed_and_a_shape_it_refuses_is_reported_with_its_message():
    pytest.importorskip("liger_kernel")
    task = load_task(REPO / "tasks" / "softmax")
    workload = [({"M": 4, "N": 300}, "float32"), ({"M": 1, "N": 131072}, "float32")]
    done = time_task(task, [], None, clocks=CPU, workload=workload)
    fits, wide = (r["methods"]["liger.softmax"] for r in done["rows"])
    assert fits["median_us"] > 0 and fits["bytes"] == 2 * 4 * 300 * 4
    assert wide == {"refused": wide["refused"]} and "n = 131072 exceeds" in wide["refused"]
    assert "liger-kernel" in done["libraries"]
    text = markdown({"tasks": {"softmax": done}})
    assert "- Liger softmax refused M=1 N=131072 float32: RuntimeError: Cannot launch Triton kernel" in text


def test_an_anchor_whose_output_misses_the_reference_is_an_error_and_is_not_timed(tmp_path):
    """SDPA against a task whose reference doubles the attention output: the mismatch is recorded."""
    folder = tmp_path / "doubled_decode"
    shutil.copytree(REPO / "tasks" / "gqa_decode", folder)
    source = (folder / "reference.py").read_text()
    (folder / "reference.py").write_text(source.replace("return o.reshape(b, hq, d).to(q.dtype)",
                                                        "return (2 * o).reshape(b, hq, d).to(q.dtype)"))  # fmt: skip
    task = load_task(folder)
    done = time_task(task, [], None, clocks=CPU, workload=[({"B": 1, "S": 40}, "bfloat16")])
    sdpa = done["rows"][0]["methods"]["sdpa"]
    assert list(sdpa) == ["error"] and sdpa["error"].startswith("AssertionError: mismatch")
    assert done["rows"][0]["strongest"]["device"] == "eager"


def test_a_task_that_names_an_unknown_anchor_or_option_gets_an_error_naming_the_key():
    assert [a.name for a in task_anchors(load_task(REPO / "tasks" / "add_rmsnorm").spec.settings)] == [
        "liger.fused_add_rms_norm"
    ]
    with pytest.raises(
        AnchorError, match=r"unknown anchor 'liger.layer_norm' \(known: liger.fused_add_rms_norm"
    ):
        task_anchors({"anchors": {"liger.layer_norm": {}}})
    with pytest.raises(
        AnchorError, match=r"settings.anchors.liger.rms_norm.eps: Input should be greater than 0"
    ):
        task_anchors({"anchors": {"liger.rms_norm": {"eps": -1}}})
    with pytest.raises(AnchorError, match="settings.anchors.sdpa.scale: Extra inputs are not permitted"):
        task_anchors({"anchors": {"sdpa": {"scale": 2}}})
    with pytest.raises(AnchorError, match="must map anchor names to their options"):
        task_anchors({"anchors": ["sdpa"]})


def test_the_suite_refuses_an_unknown_compiler_before_it_runs_anything(tmp_path):
    done = subprocess.run(
        [sys.executable, "bench/suite.py", "--out", str(tmp_path / "out"), "--stages", "time", "--compile",
         "default,reduce-overhead"], cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "--compile: unknown 'reduce-overhead'" in done.stderr
    assert not (tmp_path / "out").exists()


def test_the_suite_takes_the_unseen_test_tasks_by_name_and_refuses_an_unknown_one(tmp_path):
    from bench.suite import _argument_problem, task_folder

    assert task_folder("colsum_cpu_gen") == REPO / "tests" / "fixtures" / "tasks" / "colsum_cpu_gen"
    assert task_folder("softmax") == REPO / "tasks" / "softmax"
    assert _argument_problem(["colsum_cpu_gen", "softmax"], ["default"]) is None
    assert "no_such_task" in (_argument_problem(["no_such_task"], ["default"]) or "")


def test_the_unseen_summary_sets_each_winner_beside_torch_compile_and_eager(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "suite.json").write_text(json.dumps(fixture()))
    done = subprocess.run([sys.executable, "bench/unseen_summary.py", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = {line.split(" | ")[0][2:]: line for line in done.stdout.splitlines() if line.startswith("| ")}
    # add_rmsnorm: winner 36 and 5 us, compile 56 and 6.8, eager 410 and 30 (device); user clock 40 and 9 us
    # against compile 42 and 10.8, eager 414 and 34
    assert rows["add_rmsnorm"] == "| add_rmsnorm | 2 | 13.42 | 19.51 | 110.91 | 1.45 | 8.27 | 1.12 | 6.25 |"
    assert rows["gqa_decode"].startswith("| gqa_decode | 2 | 64.81 | 173.21 | 529.15 | 2.67 | 8.16 |")


def test_a_killed_time_stage_resumes_with_the_rows_it_had(tmp_path):
    task = load_task(REPO / "tasks" / "softmax")
    workload = [({"M": 4, "N": 300}, "float32"), ({"M": 2, "N": 2500}, "float32")]
    seen: list[int] = []
    first = time_task(
        task, [], None, clocks=CPU, workload=workload[:1], on_row=lambda rows: seen.append(len(rows))
    )
    again = time_task(task, [], None, clocks=CPU, workload=workload, done=first["rows"],
                      on_row=lambda rows: seen.append(len(rows)))  # fmt: skip
    assert seen == [1, 1, 2] and again["rows"][0] is first["rows"][0]  # kept, not timed again
    assert (
        again["rows"][1]["shape"] == {"M": 2, "N": 2500}
        and again["rows"][1]["methods"]["eager"]["median_us"] > 0
    )


def test_the_overhead_bench_refuses_a_missing_kernel_before_it_needs_a_gpu(tmp_path):
    done = subprocess.run(
        [sys.executable, "bench/export_overhead.py", "--kernels", str(tmp_path), "--out", str(tmp_path / "o"),
         "--tasks", "softmax"], cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and f"no exported module {tmp_path / 'softmax.py'}" in done.stderr
