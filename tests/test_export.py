"""The exported module: the real evaluator accepts it, and it runs standalone (only torch and triton,
the project itself unimportable), with its dispatch table picking per shape.

CPU only: kernels run under the Triton interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import timeit
from pathlib import Path

import torch

from tools.candidate import Candidate
from tools.dispatch import TimedCandidate
from tools.evaluate import EvalSettings, Evaluator, evaluate
from tools.export import build_export, export_candidate, export_to_run, main
from tools.run_folder import RunFolder
from tools.task import Task, load_task

REPO = Path(__file__).resolve().parent.parent
AXPY = REPO / "tests" / "fixtures" / "tasks" / "axpy"
RMSNORM = REPO / "tasks" / "add_rmsnorm"

# Runs the exported file with the project blocked: only the file's folder, the standard library and
# site-packages (torch, triton) can be imported from.
STANDALONE = """
import importlib.abc, json, sys
import torch

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"tools", "nodes", "graph", "profiles", "memory", "bench", "tasks"}:
            raise ImportError(f"{name} is part of the project")
        return None

sys.meta_path.insert(0, Blocked())
sys.path.insert(0, sys.argv[1])
import exported

calls = torch.load(sys.argv[2])
out, picks = [], []
for inputs in calls:
    picks.append(list(exported.choose(*inputs)) if hasattr(exported, "choose") else None)
    result = exported.launch(*inputs)
    out.append(result if isinstance(result, tuple) else (result,))
torch.save(out, sys.argv[3])
print(json.dumps({"picks": picks, "project_loaded": sorted(m for m in sys.modules if m.split(".")[0] in {"tools", "nodes"})}))
"""


def run_standalone(text: str, task: Task, shapes: list[dict], tmp_path: Path) -> tuple[list, list[tuple]]:
    """(choose() per call, outputs per call) from the exported module in a fresh, isolated interpreter."""
    folder = tmp_path / "standalone"
    folder.mkdir()
    (folder / "exported.py").write_text(text)
    calls = [task.make_inputs(dict(s), getattr(torch, task.dtypes[0]), "cpu", 1) for s in shapes]
    torch.save(calls, tmp_path / "calls.pt")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, "-I", "-c", STANDALONE, str(folder), str(tmp_path / "calls.pt"), str(tmp_path / "out.pt")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["project_loaded"] == []
    outs = torch.load(tmp_path / "out.pt")
    for inputs, got in zip(calls, outs, strict=True):
        expected = task.reference(*inputs)
        expected = expected if isinstance(expected, tuple) else (expected,)
        rtol, atol = task.tolerance(task.dtypes[0])
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g.float(), e.float(), rtol=rtol, atol=atol)
    return report["picks"], outs


def test_axpy_exported_from_a_real_run_folder_passes_the_evaluator_and_runs_standalone(tmp_path):
    task = load_task(AXPY)
    run_dir = tmp_path / "run"
    cands = [
        Candidate(source=task.baseline_source, config={"BLOCK": b, "num_warps": w})
        for b, w in ((128, 4), (64, 1))
    ]
    with Evaluator(task, "cpu", EvalSettings(workdir=str(tmp_path / "eval"))) as evaluator:
        results = evaluator.evaluate_many(cands)
    for cand, result in zip(cands, results, strict=True):  # the run folder as the graph writes it
        assert result.passed, result.message
        RunFolder(run_dir).write_candidate(cand)
        RunFolder(run_dir).save_result(cand.identity, result)

    out = tmp_path / "axpy_kernel.py"
    done = subprocess.run(
        [sys.executable, "-m", "tools.export", str(AXPY), "--best", str(run_dir), "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "single" in done.stdout  # interpreted timings rank; they never justify a table
    text = out.read_text()
    fastest = min(zip(cands, results, strict=True), key=lambda cr: cr[1].metrics.geomean_us)[0]
    assert f"CONFIG = {json.dumps(fastest.config)}" in text and "interpreter wall time" in text

    verdict = evaluate(task, text, fastest.config, device="cpu")
    assert verdict.passed, (verdict.error_type, verdict.message, verdict.log[-2000:])
    shapes = [*task.spec.cpu_shapes, *task.spec.check_shapes]
    picks, _ = run_standalone(text, task, shapes, tmp_path)
    assert picks == [None] * len(shapes)

    # The report-time hook writes the same module into the run folder and says what it chose.
    exported = export_to_run(task, run_dir)
    assert exported["path"] == "kernel.py" and (run_dir / "kernel.py").read_text() == text
    assert exported["dispatch"] == "single" and "one config" in exported["markdown"]
    assert export_to_run(task, tmp_path / "empty")["path"] is None


def test_a_winning_add_rmsnorm_table_over_two_sources_passes_the_evaluator_and_dispatches(tmp_path):
    """The table decision from explicit per-shape numbers (a fixture, not a measurement), the module from
    the task's real baseline and multirow sources."""
    task = load_task(RMSNORM)
    for name in ("baseline.py", "multirow.py"):
        (tmp_path / name).write_text(task.source(name))

    def timed(identity: str, module: str, config: dict, us: dict[int, float]) -> TimedCandidate:
        rows = [{"shape": {"M": m, "N": 256}, "dtype": "bfloat16", "median_us": t, "min_us": t, "spread": 1.0}
                for m, t in us.items()]  # fmt: skip
        return TimedCandidate(identity=identity, module=module, config=config, per_shape=rows,
                              source_path=str(tmp_path / module))  # fmt: skip

    one_row = timed("a1", "multirow.py", {"ROWS": 1, "num_warps": 4}, {1: 5.0, 4: 9.0, 16: 30.0})
    two_rows = timed("b2", "baseline.py", {"ROWS": 2, "num_warps": 4}, {1: 6.0, 4: 6.0, 16: 28.0})
    four_rows = timed("c4", "multirow.py", {"ROWS": 4, "num_warps": 8}, {1: 7.0, 4: 8.0, 16: 15.0})
    text, summary, report = build_export(task, [one_row, two_rows, four_rows], device="a test fixture")
    assert report.table_wins and summary.dispatch == "table"
    assert summary.sources == ["baseline.py", "multirow.py"]
    assert [b.choice.identity for b in report.table] == ["a1", "b2", "c4"]
    # The module a user takes home is tidy: imports grouped as isort does, nothing unused.
    (tmp_path / "tidy.py").write_text(text)
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--select", "I,F", str(tmp_path / "tidy.py")],
                          capture_output=True, text=True)  # fmt: skip
    assert lint.returncode == 0, lint.stdout

    # A candidate of the task like any other: the evaluator runs it with the single config.
    verdict = evaluate(task, text, summary.config, device="cpu", module=summary.module)
    assert verdict.passed, (verdict.error_type, verdict.message, verdict.log[-2000:])

    # Standalone, without a config: the nearest row (log2 distance over M) picks source and config.
    shapes = [{"M": 1, "N": 256}, {"M": 5, "N": 1000}, {"M": 9, "N": 4097}, {"M": 17, "N": 96}]
    picks, _ = run_standalone(text, task, shapes, tmp_path)
    assert picks == [
        ["multirow", {"ROWS": 1, "num_warps": 4}],
        ["baseline", {"ROWS": 2, "num_warps": 4}],
        ["multirow", {"ROWS": 4, "num_warps": 8}],
        ["multirow", {"ROWS": 4, "num_warps": 8}],
    ]


def test_a_config_outside_the_search_space_is_refused(tmp_path, capsys):
    code = main([str(AXPY), "--candidate", str(AXPY / "baseline.py"), "--config", '{"BLOCK": 100, "num_warps": 4}',
                 "--out", str(tmp_path / "k.py")])  # fmt: skip
    assert code == 2 and "BLOCK=100" in capsys.readouterr().err and not (tmp_path / "k.py").exists()


# What the module's docstring promises a user without a GPU, run as that user would: a fresh process,
# the file alone on its path, CPU tensors.
ON_THE_CPU = """
import json, sys
import torch
sys.path.insert(0, sys.argv[1])
import exported

torch.manual_seed(0)
x, r, w = (torch.randn(4, 256), torch.randn(4, 256), torch.randn(256))
y, h = exported.launch(x, r, w)
# The docstring's torch.compile form: the call is kept out of the graph and runs as it does here.
compiled = torch.compile(lambda x, r, w: torch.compiler.disable(exported.launch)(x, r, w)[0] * 2.0)
doubled = compiled(x, r, w)
print(json.dumps({"y": y.tolist(), "h": h.tolist(), "doubled": doubled.tolist()}))
"""


def test_an_exported_module_runs_on_a_machine_without_a_gpu_as_its_docstring_says(tmp_path):
    """With TRITON_INTERPRET=1 set before the process imports triton, CPU tensors run through the
    interpreter, called directly and behind torch.compiler.disable inside torch.compile."""
    task = load_task(RMSNORM)
    text, _ = export_candidate(task, task.baseline_source, {"ROWS": 2, "num_warps": 4}, "baseline.py")
    assert "set TRITON_INTERPRET=1 in the environment before triton is first imported" in text
    (tmp_path / "exported.py").write_text(text)

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, "-I", "-c", ON_THE_CPU, str(tmp_path)], cwd=tmp_path, capture_output=True,
        text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    torch.manual_seed(0)  # the same draws as the child process made
    x, r, w = (torch.randn(4, 256), torch.randn(4, 256), torch.randn(256))
    y, h = task.reference(x, r, w)
    torch.testing.assert_close(torch.tensor(got["h"]), h)
    torch.testing.assert_close(torch.tensor(got["y"]), y, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.tensor(got["doubled"]), 2 * y, rtol=1e-4, atol=1e-4)


# A launcher with no kernel, so that a call's cost is the Python around it.
NO_KERNEL = '''"""No kernel: the launcher returns its inputs."""


def launch(x, r, w, *, ROWS: int, num_warps: int):
    return x, r
'''


def test_launch_costs_a_few_python_calls_more_than_the_kernels_own_launcher(tmp_path):
    """The per-shape choice is made once: a later call is a dict lookup and one call of the chosen
    launcher with its config bound in, table or not. Measured against one plain Python call on this
    machine, so the bound holds on a slow CPU too (the table of the earlier release cost 14 such calls)."""
    task = load_task(RMSNORM)
    for name in ("one.py", "two.py"):
        (tmp_path / name).write_text(NO_KERNEL)

    def timed(identity: str, module: str, config: dict, us: dict[int, float]) -> TimedCandidate:
        rows = [{"shape": {"M": m, "N": 256}, "dtype": "bfloat16", "median_us": t, "min_us": t, "spread": 1.0}
                for m, t in us.items()]  # fmt: skip
        return TimedCandidate(identity=identity, module=module, config=config, per_shape=rows,
                              source_path=str(tmp_path / module))  # fmt: skip

    one = timed("a1", "one.py", {"ROWS": 1, "num_warps": 4}, {1: 5.0, 4: 9.0, 16: 30.0})
    two = timed("b2", "two.py", {"ROWS": 2, "num_warps": 8}, {1: 6.0, 4: 6.0, 16: 28.0})
    inputs = (torch.empty(16, 256), torch.empty(16, 256), torch.empty(256))
    own: dict = {}
    exec(NO_KERNEL, own)
    calls = 20000

    def per_call_us(fn) -> float:
        return min(timeit.repeat(fn, number=calls, repeat=7)) / calls * 1e6

    plain = per_call_us(lambda: (lambda *a: a)(*inputs))
    direct = per_call_us(lambda: own["launch"](*inputs, ROWS=2, num_warps=8))
    for candidates, kind in (([one, two], "table"), ([two], "single")):
        text, summary, _ = build_export(task, candidates, device="a test fixture")
        assert summary.dispatch == kind
        module: dict = {}
        exec(compile(text, f"exported_{kind}", "exec"), module)
        assert module["launch"](*inputs) == inputs[:2]
        overhead = per_call_us(lambda m=module: m["launch"](*inputs)) - direct
        assert overhead < 8 * plain, (
            f"{kind}: launch adds {overhead:.3f} us, a plain call takes {plain:.3f} us"
        )


def test_an_exported_module_given_as_a_candidate_is_cut_at_its_host_side(tmp_path):
    from tools.candidate import HOST_SIDE_MARKER
    from tools.static_check import check_source

    task = load_task(AXPY)
    text, _ = export_candidate(task, (AXPY / "baseline.py").read_text(), {"BLOCK": 128, "num_warps": 4}, "baseline.py")
    assert HOST_SIDE_MARKER in text and "class Replayed" in text
    report = check_source(text, task.spec.constraints.forbid)
    assert not report.ok  # the host side patches Triton's classes: no candidate may
    planted = text + "\nraise SystemExit('the host side ran')\n"
    candidate = Candidate(source=planted, config={"BLOCK": 128, "num_warps": 4})
    assert HOST_SIDE_MARKER not in candidate.source and "the host side ran" not in candidate.source
    assert check_source(candidate.source, task.spec.constraints.forbid).ok
    with Evaluator(task, "cpu", EvalSettings(seeds=1)) as evaluator:
        verdict = evaluator.evaluate(candidate)
    assert verdict.passed, (verdict.error_type, verdict.message)
