"""A resource estimate of a config against the device's limits, before it is compiled, that learns from
what the compiler reported for the module's earlier candidates.

The tile is read from the module's source (``tools/kernel_roles.py``): per launched kernel, the
product of the config keys that size its blocks, the largest over the kernels; a loop-count constexpr
(``range(ROWS)``) never enters it. Without a readable source, the key names decide (BLOCK_*, ROWS, ...).

The rules (``resource_findings`` returns what they say as ``Findings``):
- threads per program (num_warps x 32) over the device's limit: a hard limit, always an objection;
- the compiler's own word: a compiled candidate of the module with no more tile elements per thread
  and no more stages that spilled registers, or one that failed with resource_limit with tiles no larger
  and at least as many warps: an objection;
- registers: about ``slope x elements per thread + base``; shared memory: ``bytes x stages x tile``.
  Both start from a prior (two live fp32 values per element, 24 registers of overhead; bf16 staging)
  and are fitted to the registers and shared memory of every compiled candidate of the module
  (``Attempt.resources``: the maximum over its kernels; a spilled one only says "over the limit").
  Over the limit, such an estimate objects only once it is validated against compiled kernels of the
  module (at least ``MIN_VALIDATED`` of them, one near the limit, ``NEAR_LIMIT`` of it or spilled, and
  each predicted by the fit to the others on the side of the limit it fell on) and only beyond the
  limit by more than its error (``MARGIN``). Otherwise it is a warning the candidate is evaluated
  with, and the compiler has the last word.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from nodes.expert.space import key_role
from tools.kernel_roles import tile_key_sets

LIVE_VALUES_PER_ELEMENT = 2.0
REGISTER_OVERHEAD = 24.0
STAGED_BYTES_PER_ELEMENT = 2.0
MIN_VALIDATED = 3
NEAR_LIMIT = 0.75
# The estimate's error: compiled with ptxas for sm_90 (tests/sm90_resources.py), the registers of bf16
# kernels with 1-D and 2-D blocks of 4-64 elements per thread (scale_shift, colsum) sit up to about 30%
# off a line fitted to the others: configs of the same elements per thread took 153-211 registers.
MARGIN = 0.3


@dataclass
class Findings:
    """``objections`` send the proposal back; ``warnings`` ride along with an approved one."""

    objections: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Compiled:
    """What the compiler reported for one earlier candidate of the module."""

    n: int
    config: dict[str, Any]
    per_thread: float
    stages_tile: float
    registers: int
    spills: int
    shared: int | None


class Tiles:
    """The tile of a config of one module: the largest product of one kernel's block-sizing keys."""

    def __init__(self, source: str | None, keys: list[str]):
        sets = tile_key_sets(source) if source else None
        self.sets = sets if sets is not None else [{k for k in keys if key_role(k) == "tile"}]
        self.keys = sorted({k for s in self.sets for k in s} & set(keys))

    def elements(self, config: dict[str, Any]) -> float:
        return max(math.prod(float(config[k]) for k in s if _numeric(config.get(k))) for s in self.sets)


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _threads(config: dict[str, Any]) -> int:
    return int(config.get("num_warps", 4)) * 32


def _thread_count(config: dict[str, Any]) -> float:
    """Threads per program; for a module whose keys scale its kernels' own blocks and warps (an Inductor
    module's XBLOCK_SCALE, WARPS_SCALE) a figure relative to its own kernels', comparable only with its
    other configs, which is all the spill and failure rules compare it with."""
    scales = [
        float(v) for k, v in config.items() if k != "num_warps" and key_role(k) == "warps" and _numeric(v)
    ]
    return _threads(config) * math.prod(scales)


def _per_thread(tiles: Tiles, config: dict[str, Any]) -> float:
    return tiles.elements(config) / _thread_count(config)


def _relative(config: dict[str, Any]) -> bool:
    return any(k.upper().endswith("_SCALE") for k in config)


def _stages(config: dict[str, Any]) -> int:
    return int(config.get("num_stages", 1))


def compiled_of(module: str, history: list[dict[str, Any]], tiles: Tiles) -> list[Compiled]:
    points = []
    for past in history:
        resources = past.get("resources") or {}
        if past.get("module") != module or resources.get("n_regs") is None or not past.get("config"):
            continue
        config = past["config"]
        points.append(
            Compiled(
                n=past.get("n", 0),
                config=config,
                per_thread=_per_thread(tiles, config),
                stages_tile=_stages(config) * tiles.elements(config),
                registers=int(resources["n_regs"]),
                spills=int(resources.get("n_spills") or 0),
                shared=resources.get("shared_bytes"),
            )
        )
    return points


class LinearEstimate:
    """``y = slope x + base`` from a prior, fitted to the compiled (x, y) points of the module that fit
    the limit; ``over`` are the x of compiled candidates that did not (spilled)."""

    def __init__(self, slope: float, base: float, points: list[tuple[float, float]], over: list[float] = ()):
        self.prior = (slope, base)
        self.points, self.over = points, list(over)
        self.slope, self.base = self._fit(points)

    def _fit(self, points: list[tuple[float, float]]) -> tuple[float, float]:
        slope, base = self.prior
        if not points:
            return slope, base
        xs = [x for x, _ in points]
        if len(set(xs)) >= 2:
            mx, my = statistics.fmean(xs), statistics.fmean(y for _, y in points)
            var = sum((x - mx) ** 2 for x in xs)
            slope = max(0.0, sum((x - mx) * (y - my) for x, y in points) / var)
            return slope, my - slope * mx
        return slope, statistics.fmean(y - slope * x for x, y in points)

    def predict(self, x: float) -> float:
        return self.slope * x + self.base

    def validated(self, limit: float) -> bool:
        """Checked against the compiled candidates, each predicted by the fit to the others (leave one
        out): see the module's docstring."""
        if len(self.points) + len(self.over) < MIN_VALIDATED:
            return False
        if not self.over and max(y for _, y in self.points) < NEAR_LIMIT * limit:
            return False  # all far below the limit: nothing says how it extrapolates there
        for i, (x, _) in enumerate(self.points):
            if LinearEstimate(*self.prior, self.points[:i] + self.points[i + 1 :]).predict(x) > limit:
                return False
        return all(self.predict(x) > limit for x in self.over)

    def describe(self, module: str, unit: str, limit: float) -> str:
        n = len(self.points) + len(self.over)
        if not n:
            return "no compiled candidate of this module yet to validate it"
        state = "validated" if self.validated(limit) else "not yet validated"
        return f"fitted to {n} compiled candidate(s) of {module}: {unit} ~ {self.slope:.2f} x + {self.base:.0f}, {state}"


def resource_findings(
    module: str,
    config: dict[str, Any],
    limits: dict[str, Any],
    history: list[dict[str, Any]] = (),
    source: str | None = None,
) -> Findings:
    """What the estimate says of ``config`` of ``module`` (whose source is ``source`` when known)."""
    found = Findings()
    if not limits:
        return found
    tiles = Tiles(source, list(config))
    threads = _threads(config)
    if threads > limits["max_threads_per_block"]:
        found.objections.append(
            f"num_warps={config.get('num_warps')} means {threads} threads per program > "
            f"{limits['max_threads_per_block']}"
        )
    history = list(history)
    compiled = compiled_of(module, history, tiles)
    for rule in (_spilled_before, _failed_before):
        said = rule(module, config, tiles, compiled, history)
        if said:
            found.objections.append(said)
            return found
    if tiles.keys and not _relative(config):  # the estimates' priors are in absolute elements per thread
        _estimates(module, config, tiles, compiled, limits, found)
    return found


def _spilled_before(module, config, tiles: Tiles, compiled: list[Compiled], history) -> str:
    per_thread = _per_thread(tiles, config)
    unit = (
        "tile elements per thread, relative to its kernels' own"
        if _relative(config)
        else "tile elements per thread"
    )
    for past in compiled:
        if past.spills and past.per_thread <= per_thread and _stages(past.config) <= _stages(config):
            return (
                f"attempt #{past.n} ({past.config}) of {module} spilled {past.spills} registers with "
                f"{past.per_thread:g} {unit}; this config holds {per_thread:g}"
            )
    return ""


def _failed_before(module, config, tiles: Tiles, compiled, history: list[dict[str, Any]]) -> str:
    for past in history:
        if past.get("error_type") != "resource_limit" or past.get("module") != module:
            continue
        same_other = all(
            past["config"].get(k) == v
            for k, v in config.items()
            if k not in tiles.keys and key_role(k) not in ("warps", "stages")
        )
        if (
            tiles.keys
            and same_other
            and tiles.elements(config) >= tiles.elements(past["config"])
            and _thread_count(config) <= _thread_count(past["config"])
        ):
            return (
                f"attempt #{past['n']} ({past['config']}) already hit resource_limit with tiles no larger "
                "and at least as many warps"
            )
    return ""


def _estimates(module, config, tiles: Tiles, compiled: list[Compiled], limits, found: Findings) -> None:
    tile, threads, stages = tiles.elements(config), _threads(config), _stages(config)
    reg_limit, shared_limit = limits["max_registers_per_thread"], limits["shared_memory_bytes"]
    registers = LinearEstimate(
        LIVE_VALUES_PER_ELEMENT,
        REGISTER_OVERHEAD,
        [(p.per_thread, p.registers) for p in compiled if not p.spills],
        [p.per_thread for p in compiled if p.spills],
    )
    predicted = registers.predict(tile / threads)
    if predicted > reg_limit:
        _say(
            found,
            registers.validated(reg_limit) and predicted > (1 + MARGIN) * reg_limit,
            f"about {predicted:.0f} registers/thread ({tile} tile elements of {'/'.join(tiles.keys)} over "
            f"{threads} threads; {registers.describe(module, 'registers', reg_limit)}) > {reg_limit}: it "
            f"would spill; use smaller {'/'.join(tiles.keys)} or more num_warps",
        )
    staged = [p for p in compiled if p.shared is not None and _stages(p.config) > 1]
    shared = LinearEstimate(STAGED_BYTES_PER_ELEMENT, 0.0, [(p.stages_tile, p.shared) for p in staged])
    need = shared.predict(stages * tile)
    if stages > 1 and need > shared_limit:
        _say(
            found,
            shared.validated(shared_limit) and need > (1 + MARGIN) * shared_limit,
            f"about {need:.0f} bytes of shared memory for {stages} stages "
            f"({shared.describe(module, 'bytes', shared_limit)}) > {shared_limit}: use fewer num_stages "
            "or smaller tiles",
        )


def _say(found: Findings, validated: bool, text: str) -> None:
    (found.objections if validated else found.warnings).append(text)


def resource_problems(
    module: str,
    config: dict[str, Any],
    limits: dict[str, Any],
    history: list[dict[str, Any]] = (),
    source: str | None = None,
) -> list[str]:
    """The objections alone (what a revision must answer)."""
    return resource_findings(module, config, limits, history, source).objections
