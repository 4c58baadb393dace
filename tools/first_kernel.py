"""A first kernel for a task that has none: torch.compile's own Triton for its reference, as a candidate.

A task without a baseline (``task.json`` without ``baseline``, as ``python -m tools.kernelbench`` writes
them) is copied into the run folder, Inductor's generated code for its reference is captured
(``tools.inductor_capture`` in a process of its own: it changes Inductor's settings; on a CPU it only
generates code, with the interpreter-portable math) and converted (``tools.inductor_import``), and the
copy gets that module as its baseline, with Inductor's block sizes and warps as the search space. Config
1 everywhere is exactly torch.compile's kernel, so the search starts at torch.compile's speed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tools.inductor_import import ConversionError, convert_file
from tools.task import Task, TaskError, load_task

MODULE = "inductor.py"
# A CPU capture is code generation for the CPU: Inductor's Triton templates for matmuls and attention
# exist only for a GPU, so on a CPU those calls stay library calls.
CPU_LIBRARY_HINT = " (on a CPU Inductor leaves matmuls and attention to a library; run such a task on a GPU)"
CAPTURE_TIMEOUT_S = 900.0
REPO_ROOT = Path(__file__).resolve().parent.parent


def with_inductor_baseline(task: Task, into: Path, device: str) -> Task:
    """The task copied into ``into`` with Inductor's kernel as its baseline (reused when it is there)."""
    if (into / "task.json").exists() and (into / MODULE).exists():
        return load_task(into)
    if into.exists():
        shutil.rmtree(into)
    shutil.copytree(task.folder, into, ignore=shutil.ignore_patterns("__pycache__"))
    capture = _capture(into, device)
    try:
        converted = convert_file(capture, portable_math=device != "cuda")
    except ConversionError as exc:
        raise TaskError(f"{task.name}: no baseline, and torch.compile's code could not be made a candidate: {exc}"
                        f"{'' if device == 'cuda' else CPU_LIBRARY_HINT}") from None  # fmt: skip
    (into / MODULE).write_text(converted.source)
    spec = json.loads((into / "task.json").read_text())
    spec["baseline"] = MODULE
    spec["search_space"] = {MODULE: converted.search_space, **_variant_spaces(spec)}
    settings = spec.setdefault("settings", {})
    settings.setdefault("baseline_config", {})[MODULE] = {key: values[0] for key, values in converted.search_space.items()}
    settings["first_kernel"] = {"from": "torch.compile (Inductor)", "notes": converted.notes}
    (into / "task.json").write_text(json.dumps(spec, indent=2) + "\n")
    return load_task(into)


def _variant_spaces(spec: dict) -> dict:
    """A task's own per-module spaces stay; a space not keyed by module was the (missing) baseline's."""
    space = spec.get("search_space") or {}
    return {k: v for k, v in space.items() if k.endswith(".py")}


def _capture(folder: Path, device: str) -> Path:
    out = folder / "inductor_capture"
    argv = [sys.executable, "-m", "tools.inductor_capture", str(folder), "--out", str(out)]
    # every listed shape gets its own static kernels; the general ones cover the shapes drawn near them
    argv += ["--device", "cuda", "--shapes", "all"] if device == "cuda" else ["--codegen-only", "--shapes", "cpu"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=CAPTURE_TIMEOUT_S, cwd=REPO_ROOT)
    captured = list(out.glob("*.json"))
    if done.returncode != 0 or not captured:
        tail = (done.stderr or done.stdout)[-1500:]
        raise TaskError(f"{folder.name}: capturing torch.compile's code failed (exit {done.returncode}): {tail}")
    return captured[0]
