"""Shared test setup: GPU tests skip cleanly on machines without CUDA."""

from __future__ import annotations

import glob
import os

# Without a GPU every in-process kernel runs in Triton's interpreter. This must be decided before
# anything imports triton: triton.language's own @jit helpers are built once, at import.
if not glob.glob("/dev/nvidia[0-9]*"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.fixture(autouse=True)
def _private_memory_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's case library and validation cache live in a fresh folder, never the user's."""
    monkeypatch.setenv("KERNEL_AGENT_HOME", str(tmp_path_factory.mktemp("ka-home")))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
