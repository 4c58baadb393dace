"""EvalResult: the evaluator's verdict on one candidate (docs/CONTRACTS.md, "EvalResult")."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Stage = Literal["static", "compile", "correctness", "timing", "done"]
ErrorType = Literal[
    "syntax_error",
    "forbidden_construct",
    "no_kernel_launched",
    "compile_error",
    "resource_limit",
    "runtime_error",
    "timeout",
    "crash",
    "mismatch",
    "nan",
    "unwritten_output",
    "input_modified",
    "stale_output",
    "nondeterministic",
    "unstable_timing",
    "suspicious_speedup",
    "out_of_search_space",
    "out_of_bounds_write",
    "worker_lost",
]
ERROR_TYPES: tuple[str, ...] = ErrorType.__args__  # type: ignore[attr-defined]


SizeClass = Literal["launch_bound", "bandwidth_bound"]


def size_class(
    roofline_pct: float | None, ceiling_pct: float | None, launch_bound_below_pct: float
) -> SizeClass | None:
    """What a device copy of a shape's bytes reaches of the copy bandwidth (the kernel's % of the copy
    bandwidth over its % of that same-size copy) decides: below ``launch_bound_below_pct``, launch,
    ramp-up and tail dominate the shape's time (launch-bound); None without a ceiling to tell."""
    if roofline_pct is None or ceiling_pct is None or ceiling_pct <= 0:
        return None
    return "launch_bound" if 100 * roofline_pct / ceiling_pct < launch_bound_below_pct else "bandwidth_bound"


class ShapeTiming(BaseModel):
    shape: dict[str, int]
    dtype: str
    median_us: float
    min_us: float
    spread: float = Field(description="median/min over the repeats")
    gbps: float | None = None
    roofline_pct: float | None = None
    tflops: float | None = None
    ceiling_us: float | None = Field(
        default=None, description="a device copy of the same bytes, timed by the judge once per run: this size's ceiling"
    )
    ceiling_pct: float | None = Field(default=None, description="100 x ceiling_us / median_us")
    # "do_bench": records written before timing moved to tools.timing.bench_ms (same meaning as "direct")
    method: Literal["direct", "cuda_graph", "interpreter", "do_bench"] = "direct"


class Metrics(BaseModel):
    per_shape: list[ShapeTiming] = []
    geomean_us: float | None = None
    runs: int = 0
    copy_gbps: float | None = Field(default=None, description="device copy bandwidth measured in this run")


class DeviceInfo(BaseModel):
    name: str = "cpu"
    triton: str = ""
    torch: str = ""
    interpreted: bool = True


class EvalResult(BaseModel):
    verdict: Literal["pass", "fail"]
    stage: Stage
    error_type: ErrorType | None = None
    message: str = ""
    log: str = ""
    details: dict[str, Any] = {}
    resources: dict[str, Any] = {}
    metrics: Metrics = Metrics()
    device: DeviceInfo = DeviceInfo()
    identity: str = ""
    seconds: float = 0.0
    stage_seconds: dict[str, float] = Field(
        default_factory=dict,
        description="wall seconds per phase (startup, compile, correctness, timing); PHASE_worker of it waiting"
        " for the worker's replies (PHASE_COMMAND per command, PHASE_jit Triton compiling as the worker says),"
        " PHASE_sync waiting for the judge's own stream (the rest is the judge's work); worker_cpu: its CPU seconds",
    )
    sandbox: dict[str, str] = Field(default_factory=dict, description="what isolated the candidate here")
    worker: str = Field(default="", description="the evaluation worker and GPU that judged it")

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    @classmethod
    def failure(cls, stage: Stage, error_type: str, message: str, log: str = "", **extra: Any) -> EvalResult:
        return cls(verdict="fail", stage=stage, error_type=error_type, message=message, log=log, **extra)


def merge_launch_resources(grids: list[dict], compiled: list[dict]) -> list[dict]:
    """Per-shape launch entries, each with the compiled kernel's registers/spills/shared memory."""
    by_name = {k["name"]: k for k in compiled}
    merged = []
    for g in grids:
        base = {key: v for key, v in by_name.get(g["name"], {}).items() if key not in {"grid", "shape"}}
        merged.append({**base, **{k: v for k, v in g.items() if v is not None or k not in base}})
    return merged or compiled
