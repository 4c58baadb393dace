"""A candidate: a module's source text plus one config (docs/CONTRACTS.md, "The candidate module")."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, field_validator

# Where an exported module's candidate part ends (tools/export.py): what follows is its host side (the
# replay of its launches, tools/fast_launch.py), which patches Triton's classes and is no candidate code.
HOST_SIDE_MARKER = "# === host side: an exported module given as a candidate ends above this line ==="


def candidate_identity(source: str, config: dict[str, Any]) -> str:
    """Stable identity of source + config: the same kernel with the same config is one candidate."""
    blob = source.strip() + "\n#config " + json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class Candidate(BaseModel):
    source: str
    config: dict[str, Any] = {}
    rationale: str = ""
    parent: str | None = None
    origin: str = "baseline"  # baseline | variant:<file> | expert | llm:<spec> | human
    module: str = "baseline.py"  # which task module's search space the config lives in

    @field_validator("source")
    @classmethod
    def _candidate_part(cls, source: str) -> str:
        """An exported module given as a candidate is its candidate part: the host side is dropped."""
        return candidate_part(source)

    @property
    def identity(self) -> str:
        return candidate_identity(self.source, self.config)


def candidate_part(source: str) -> str:
    """``source`` up to the host-side marker of an exported module (all of it when there is none)."""
    head, marker, _ = source.partition("\n" + HOST_SIDE_MARKER)
    return head + "\n" if marker else source
