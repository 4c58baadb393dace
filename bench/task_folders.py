"""Where the benchmarks find a task by name: the example tasks, then the test tasks written as a user
would (tests/fixtures/tasks: CPU-generator inputs, no min_dims, nobody tuned for them)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TASK_FOLDERS = (REPO / "tasks", REPO / "tests" / "fixtures" / "tasks")


def task_folder(name: str) -> Path | None:
    """The first of TASK_FOLDERS holding NAME/task.json, or None."""
    return next((f / name for f in TASK_FOLDERS if (f / name / "task.json").exists()), None)
