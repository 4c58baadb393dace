"""Processes seen from /proc, for tests that check that nothing outlives what started it."""

from __future__ import annotations

from pathlib import Path


def running(pid: int) -> bool:
    """The process exists and is not a zombie (one that ended but was not reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
