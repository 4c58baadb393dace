"""Cases (``model``) and the chromadb case library (``library``).

The models import without chromadb; ``CaseLibrary`` and ``Retrieval`` load chromadb on first use, so a
box without the memory extra can still build and log cases. Open a library through
``memory.open_case_library``, which reports instead of raising when memory is unavailable.
"""

from __future__ import annotations

from typing import Any

from memory.cases.model import (
    Case,
    Change,
    Outcome,
    SnapshotSummary,
    TaskSignature,
    case_from_attempt,
    case_id,
    guess_op_family,
    read_cases,
)

__all__ = [
    "Case",
    "CaseLibrary",
    "Change",
    "Outcome",
    "Retrieval",
    "SnapshotSummary",
    "TaskSignature",
    "case_from_attempt",
    "case_id",
    "guess_op_family",
    "read_cases",
]


def __getattr__(name: str) -> Any:
    if name in ("CaseLibrary", "Retrieval", "scored_case_dict"):
        from memory.cases import library

        return getattr(library, name)
    raise AttributeError(f"module 'memory.cases' has no attribute {name!r}")
