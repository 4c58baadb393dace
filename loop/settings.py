"""Run settings: configs/default.yaml < task.json budget < task.json settings < command line.

The merged settings are validated here (a typo in a threshold is an error naming the key, not a
silently ignored value) and travel in the graph state as ``Settings``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tools.task import EvaluatorOverrides, Task, unknown_fixed_dims

DEFAULTS_FILE = Path(__file__).resolve().parent.parent / "configs" / "default.yaml"


class SettingsError(ValueError):
    """A setting is wrong; the message names the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BudgetSettings(_Strict):
    rounds: int = Field(ge=1)
    candidates_per_round: int = Field(ge=1)
    minutes: float = Field(gt=0)
    candidates: int | None = Field(default=None, ge=1)


class RoutingSettings(_Strict):
    compile_error_types: list[str]
    compile_failures_to_reflect: int = Field(ge=1)
    same_error_to_reflect: int = Field(ge=1)
    same_error_to_human: int = Field(ge=1)
    failed_validations_to_human: int = Field(ge=1)
    stall_rounds: int = Field(ge=1)
    stall_improvement: float = Field(ge=0)
    held_to_human: bool = True


class SearchSettings(_Strict):
    explore_rounds: int = Field(ge=0)
    top_k: int = Field(ge=1)
    prune_below_baseline: float = Field(ge=0, le=1)
    restart_fraction: float = Field(ge=0, le=1)
    plateau_restart_fraction: float = Field(ge=0, le=1)
    plateau_improvement: float = Field(default=0.01, ge=0, lt=1)
    fill_llm_rounds: bool = True
    near_roofline_pct: float = Field(gt=0)
    converge_top: int = Field(default=2, ge=1)
    converge_rounds: int = Field(default=2, ge=1)
    converge_gain: float = Field(default=0.01, ge=0, lt=1)


class WatchdogSettings(_Strict):
    max_regression: float = Field(default=0.03, ge=0, lt=1)


class ProfilerSettings(_Strict):
    ncu: bool
    timeout_s: float = Field(gt=0)
    launch_bound_below_pct: float = Field(default=50, gt=0, le=100)


class MemorySettings(_Strict):
    enabled: bool = True
    validation_cache: bool = True
    model_path: str | None = None


class DeviceLimits(_Strict):
    max_threads_per_block: int = Field(ge=32)
    max_registers_per_thread: int = Field(ge=16)
    shared_memory_bytes: int = Field(ge=1024)
    sm_count: int = Field(ge=1)


class Settings(BaseModel):
    # task.json "settings" may carry keys for other parts of the project (baseline_config, llm).
    model_config = ConfigDict(extra="allow")
    budget: BudgetSettings
    critic_rounds: int = Field(ge=0)
    routing: RoutingSettings
    search: SearchSettings
    profiler: ProfilerSettings
    device_limits: DeviceLimits
    evaluator: EvaluatorOverrides = EvaluatorOverrides()
    watchdog: WatchdogSettings = WatchdogSettings()
    memory: MemorySettings = MemorySettings()


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` wins; nested dicts merge key by key; None in ``over`` keeps the base value."""
    merged = dict(base)
    for key, value in over.items():
        if value is None:
            continue
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def default_settings() -> dict[str, Any]:
    return yaml.safe_load(DEFAULTS_FILE.read_text())


def load_settings(task: Task, overrides: dict[str, Any] | None = None) -> Settings:
    """Merge the layers and validate them, the budget's candidates filled in."""
    merged = deep_merge(default_settings(), {"budget": task.spec.budget.model_dump()})
    merged = deep_merge(merged, task.spec.settings)
    merged = deep_merge(merged, overrides or {})
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise SettingsError(f"setting {key}: {err['msg']}") from None
    if problem := unknown_fixed_dims(settings.evaluator.hidden_fixed_dims, task.spec.shapes[0]):
        raise SettingsError(f"setting evaluator.{problem}")  # a run's --set, checked before it starts
    if settings.budget.candidates is None:
        settings.budget.candidates = settings.budget.rounds * settings.budget.candidates_per_round
    return settings


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """``["routing.stall_rounds=2", "budget.minutes=5"]`` -> nested overrides (values parsed as YAML).

    Keys must exist in configs/default.yaml, so a typo fails loudly.
    """
    defaults = default_settings()
    overrides: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise SettingsError(f"--set {item!r}: expected KEY=VALUE, e.g. routing.stall_rounds=2")
        dotted, raw = item.split("=", 1)
        path = dotted.strip().split(".")
        node: Any = defaults
        for part in path:
            if not isinstance(node, dict) or part not in node:
                raise SettingsError(f"--set {dotted}: no such setting in {DEFAULTS_FILE.name}")
            node = node[part]
        target = overrides
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = yaml.safe_load(raw)
    return overrides
