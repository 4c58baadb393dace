"""Check a task folder: ``python -m tools.task TASK [--run]``.

Validates task.json and the files it names, then prints a summary: modules and search-space sizes,
shapes, dtypes, target, tolerance, budget. With ``--run`` it also runs the reference at the CPU shapes
and evaluates the baseline there (through the evaluator, in the Triton interpreter), as a run's setup
would. Exit 0: the task is fine; 2: it is not, and the message says why.
"""

from __future__ import annotations

import argparse
import sys
import time

from tools.dispatch import shape_label
from tools.task import (
    CPU_SHAPE_PRODUCT,
    DEFAULT_TOLERANCE,
    Task,
    TaskError,
    load_task,
    meets_min_dims,
    torch_dtype,
)


def summary(task: Task) -> list[str]:
    spec = task.spec
    modules = [
        f"{m}{' (baseline)' if m == task.baseline_name else ''}: {task.space_size(m)} config(s)"
        for m in task.module_names
    ]
    total = sum(task.space_size(m) for m in task.module_names)
    lines = [
        f"task {task.name}: {spec.description.split('. ')[0].rstrip('.')}",
        f"folder: {task.folder}",
        f"modules: {', '.join(modules) or 'none (no baseline, no variants)'}; {total} config(s) in all",
    ]
    if not task.has_baseline:
        lines.append("baseline: none (speedups are measured against the reference itself)")
    for label, shapes in (("shapes", spec.shapes), ("check shapes", spec.check_shapes),
                          ("CPU shapes", spec.cpu_shapes)):  # fmt: skip
        if shapes:
            lines.append(f"{label}: {len(shapes)}: {', '.join(shape_label(s) for s in shapes)}")
    if task.derived_cpu_shapes:
        lines.append(f"CPU shapes: none given, each shape shrunk to at most {CPU_SHAPE_PRODUCT} by the product of "
                     f"its dims: {', '.join(shape_label(s) for s in task.derived_cpu_shapes)}")  # fmt: skip
    lines += [f"dtype: {', '.join(task.dtypes)}", f"target: {target_text(task)}", f"tolerance: {tolerance_text(task)}"]
    budget = spec.budget
    lines.append(f"budget: {budget.rounds} rounds x {budget.candidates_per_round} candidates, {budget.minutes:g} min")
    return lines


def target_text(task: Task) -> str:
    target = task.spec.target
    parts = [f"{target.speedup:g}x the baseline"] if target.speedup else []
    if target.roofline_pct:
        judged = [s for s in task.spec.shapes if meets_min_dims(s, target.min_dims)]
        where = ", ".join(f"{d} >= {v}" for d, v in (target.min_dims or {}).items()) or "every shape"
        parts.append(f"{target.roofline_pct:g}% of the roofline at {where} ({len(judged)} of {len(task.spec.shapes)} shapes)")
    return " or ".join(parts) or "none (the budget ends a run)"


def tolerance_text(task: Task) -> str:
    if task.spec.tolerance is not None:
        t = task.spec.tolerance
        return f"rtol {t.rtol:g}, atol {t.atol:g} ({t.scale})"
    return ", ".join(f"{d}: rtol {DEFAULT_TOLERANCE[d][0]:g}, atol {DEFAULT_TOLERANCE[d][1]:g} (default)" for d in task.dtypes)


def run_reference(task: Task) -> list[str]:
    """The reference on make_inputs at each CPU shape; TaskError when either fails."""
    lines = []
    for shape, dtype in task.workload("cpu"):
        started = time.perf_counter()
        try:
            inputs = task.make_inputs(shape, torch_dtype(dtype), "cpu", 0)
            out = task.reference(*inputs)
        except Exception as exc:
            raise TaskError(f"reference at {shape_label(shape)} {dtype}: {type(exc).__name__}: {exc}") from None
        outs = out if isinstance(out, tuple | list) else (out,)
        shapes = ", ".join(str(tuple(o.shape)) for o in outs if hasattr(o, "shape"))
        lines.append(f"reference {shape_label(shape)} {dtype}: {shapes} in {time.perf_counter() - started:.2f} s")
    return lines


def run_baseline(task: Task) -> list[str]:
    """The baseline evaluated on the CPU as a run's setup evaluates it; TaskError when it fails."""
    from tools.candidate import Candidate
    from tools.evaluate import Evaluator

    config = task.default_config()
    problems = task.config_problems(config)
    if problems:
        raise TaskError(f"settings.baseline_config: {'; '.join(problems)}")
    candidate = Candidate(source=task.baseline_source or "", config=config, module=task.baseline_name)
    with Evaluator(task, "cpu") as evaluator:
        result = evaluator.evaluate(candidate)
    if not result.passed:
        raise TaskError(
            f"baseline {task.baseline_name} {config} fails on the CPU ({result.stage}/{result.error_type}): "
            f"{result.message}"
        )
    return [f"baseline {task.baseline_name} {config}: pass, {result.metrics.geomean_us:.2f} us geomean "
            "(Triton interpreter: ranks only)"]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.task", description=__doc__.split("\n\n")[0])
    parser.add_argument("task", help="task folder or its task.json")
    parser.add_argument("--run", action="store_true", help="also run the reference and the baseline at the CPU shapes")
    args = parser.parse_args(argv)
    try:
        task = load_task(args.task)
        print("\n".join(summary(task)))
        if args.run:
            for line in run_reference(task):
                print(line)
            if task.has_baseline:
                print("\n".join(run_baseline(task)))
    except TaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("ok")
    return 0
