"""Where kernel-agent keeps what outlives a run: the case store and the validation cache."""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "KERNEL_AGENT_HOME"


def kernel_agent_home() -> Path:
    """``$KERNEL_AGENT_HOME`` when set, else ``~/.cache/kernel-agent`` (not created here)."""
    configured = os.environ.get(HOME_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "kernel-agent"


def default_case_store() -> Path:
    """Folder of the chromadb case library."""
    return kernel_agent_home() / "cases"


def default_validation_cache() -> Path:
    """SQLite file of the validation cache."""
    return kernel_agent_home() / "validation_cache.sqlite"
