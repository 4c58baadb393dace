"""A case: one evaluated candidate, remembered with what it was for and how it went.

Successes and failures are both cases: a failure tells the next run what not to try again.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field, model_validator

from tools.candidate import candidate_identity

# Checked in order: the first family whose pattern matches the task's name + description wins, so
# "fused add + RMSNorm" is normalization (not elementwise) and attention beats its inner softmax.
OP_FAMILY_PATTERNS: tuple[tuple[str, str], ...] = (
    ("attention", r"attention|attn|sdpa|\bgqa\b|\bmqa\b|\bmha\b|kv[ _-]?cache|flash"),
    ("normalization", r"norm\b|normali[sz]|rmsnorm|layernorm|groupnorm|batchnorm"),
    ("softmax", r"softmax|logsumexp|log_softmax"),
    ("matmul", r"matmul|\bgemm|\bgemv|\bmm\b|\bbmm\b|linear layer|tl\.dot|matrix multipl"),
    ("convolution", r"\bconv"),
    ("scan", r"cumsum|cumprod|\bscan\b|prefix sum"),
    ("reduction", r"reduc|\bsum\b|\bmean\b|argmax|argmin|\bmax over\b|histogram"),
    ("elementwise", r"elementwise|element-wise|\badd\b|\bmul\b|gelu|silu|swiglu|relu|activation|\bcopy\b"),
)

# The snapshot metrics worth remembering: enough to tell two bottlenecks apart, small enough to read.
SNAPSHOT_METRICS = (
    "dram_pct",
    "sm_pct",
    "achieved_occupancy_pct",
    "registers_per_thread",
    "spill_requests",
    "l2_hit_pct",
    "waves_per_sm",
    "roofline_pct",
)


def guess_op_family(name: str, description: str = "") -> str:
    text = f"{name} {description}".lower().replace("_", " ")
    for family, pattern in OP_FAMILY_PATTERNS:
        if re.search(pattern, text):
            return family
    return "other"


def source_digest(source: str) -> str:
    """Short hash of a source text: tells whether two cases ran the same code."""
    return hashlib.sha256(source.strip().encode()).hexdigest()[:12]


class TaskSignature(BaseModel):
    """What the workload was (``Task.signature()`` plus the op family used for filtering)."""

    name: str
    description: str = ""
    op_family: str = ""
    dtypes: list[str] = []
    shapes: list[dict[str, int]] = []

    @model_validator(mode="after")
    def _family(self) -> TaskSignature:
        if not self.op_family:
            self.op_family = guess_op_family(self.name, self.description)
        return self


class SnapshotSummary(BaseModel):
    """The profile of the kernel the change started from, cut down to its verdict and a few metrics."""

    bottleneck: str | None = None
    confidence: float | None = None
    source: str = ""
    metrics: dict[str, float | int | str] = {}

    @classmethod
    def from_snapshot(cls, snapshot: dict[str, Any] | None) -> SnapshotSummary:
        if not snapshot:
            return cls()
        raw = snapshot.get("metrics") or {}
        metrics = {k: raw[k] for k in SNAPSHOT_METRICS if isinstance(raw.get(k), int | float | str)}
        return cls(
            bottleneck=snapshot.get("bottleneck"),
            confidence=snapshot.get("confidence"),
            source=str(snapshot.get("source", "ncu")),
            metrics=metrics,
        )


class Change(BaseModel):
    """What the candidate changed relative to its module."""

    module: str = "baseline.py"
    config: dict[str, Any] = {}
    new_source: bool = Field(default=False, description="the candidate brought its own source text")
    source_digest: str = ""
    source_path: str | None = Field(default=None, description="candidates/<identity>.py in the run folder")
    parent: str | None = None


class Outcome(BaseModel):
    verdict: Literal["pass", "fail"]
    stage: str | None = None
    error_type: str | None = None
    message: str = ""
    speedup: float | None = Field(default=None, description="baseline geomean_us / this geomean_us")
    geomean_us: float | None = None
    baseline_us: float | None = None
    interpreted: bool = Field(default=False, description="timed under the Triton interpreter: no speed claim")
    device: str = ""


class Case(BaseModel):
    task: TaskSignature
    snapshot: SnapshotSummary = SnapshotSummary()
    diagnosis: str = ""
    change: Change
    rationale: str = ""
    outcome: Outcome
    kept: bool = Field(default=False, description="the search kept it (it improved on the best so far)")
    best_of_run: bool = Field(default=False, description="it was the run's final best")
    origin: str = ""
    identity: str
    run_id: str = ""
    created: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def id(self) -> str:
        """One case per candidate per task: the deduplication key."""
        return case_id(self.task.name, self.identity)

    @property
    def failed(self) -> bool:
        return self.outcome.verdict == "fail"

    def headline(self) -> str:
        """One line for prompts and tables."""
        config = ", ".join(f"{k}={v}" for k, v in self.change.config.items())
        what = f"{self.change.module}[{config}]" + (" +new source" if self.change.new_source else "")
        if self.failed:
            result = f"FAILED {self.outcome.error_type or ''}: {self.outcome.message}".strip()
        else:
            speed = f"{self.outcome.speedup:.2f}x" if self.outcome.speedup is not None else "passed"
            result = f"{speed}{' kept' if self.kept else ''}"
        return f"{self.task.name} ({self.snapshot.bottleneck or 'no profile'}): {what} -> {result}"


def case_id(task_name: str, identity: str) -> str:
    return f"{task_name}:{identity}"


def case_from_attempt(
    *,
    task_signature: dict[str, Any],
    candidate: Any,
    result: Any,
    kept: bool,
    run_id: str,
    baseline_us: float | None = None,
    snapshot: dict[str, Any] | None = None,
    diagnosis: str = "",
    source: str | None = None,
    module_source: str | None = None,
    source_path: str | None = None,
    best_of_run: bool = False,
) -> Case:
    """Build a case from what the graph holds after ``evaluate``.

    ``candidate``: a ``tools.candidate.Candidate``, its dict, or the graph's attempt record (identity,
    config, module/space_module, rationale, origin, parent, candidate path). ``result``: an
    ``EvalResult``, its dict, or the same attempt record (verdict, stage, error_type, message,
    geomean_us, interpreted, device_name). ``source``: the candidate's text when ``candidate`` has
    none; ``module_source``: the text of the module its config belongs to, to tell whether the
    candidate brought new source.
    """
    cand = candidate.model_dump() if hasattr(candidate, "model_dump") else dict(candidate)
    res = result.model_dump() if hasattr(result, "model_dump") else dict(result)
    text = cand.get("source") or source or ""
    config = dict(cand.get("config") or {})
    identity = cand.get("identity") or res.get("identity") or candidate_identity(text, config)
    geomean = (res.get("metrics") or {}).get("geomean_us", res.get("geomean_us"))
    device = res.get("device") or {"name": res.get("device_name", ""), "interpreted": res.get("interpreted")}
    passed = res.get("verdict") == "pass"
    speedup = baseline_us / geomean if baseline_us and geomean and passed else None
    new_source = module_source is not None and bool(text) and text.strip() != module_source.strip()
    return Case(
        task=TaskSignature(**task_signature),
        snapshot=SnapshotSummary.from_snapshot(snapshot),
        diagnosis=diagnosis,
        change=Change(
            module=cand.get("space_module") or cand.get("module") or "baseline.py",
            config=config,
            new_source=new_source,
            source_digest=source_digest(text) if text else "",
            source_path=source_path or cand.get("candidate"),
            parent=cand.get("parent"),
        ),
        rationale=cand.get("rationale") or "",
        outcome=Outcome(
            verdict=res.get("verdict", "fail"),
            stage=res.get("stage"),
            error_type=res.get("error_type"),
            message=res.get("message") or "",
            speedup=speedup,
            geomean_us=geomean,
            baseline_us=baseline_us,
            interpreted=bool(device.get("interpreted") or False),
            device=str(device.get("name") or ""),
        ),
        kept=kept and passed,
        best_of_run=best_of_run,
        origin=cand.get("origin") or "",
        identity=identity,
        run_id=run_id,
    )


def read_cases(path: str | Path) -> list[Case]:
    """Cases of a JSON-lines file; ValueError names the first line that is not a case."""
    cases = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            cases.append(Case.model_validate_json(line))
        except ValueError as exc:
            first = str(exc).splitlines()
            raise ValueError(f"{path}:{number}: not a case ({' '.join(first[:3])})") from None
    return cases
