"""A candidate: a module's source text plus one config (docs/CONTRACTS.md, "The candidate module")."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel


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

    @property
    def identity(self) -> str:
        return candidate_identity(self.source, self.config)
