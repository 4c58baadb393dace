"""The search space as the expert policy walks it: points, random draws, one-step neighbours.

A point is (module, config). Variants are one more dimension: switching module keeps every value
the other module's space allows and takes that space's first value for the rest.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Callable
from typing import Any, Literal

Space = dict[str, list]
Role = Literal["tile", "split", "warps", "stages", "tensor_cores", "other"]

ENUMERATE_LIMIT = 50_000


def point_key(module: str, config: dict[str, Any]) -> str:
    return json.dumps([module, config], sort_keys=True, default=str)


def key_role(key: str) -> Role:
    """What a key does to a program, guessed from its name (the usual Triton spellings)."""
    upper = key.upper()
    if "WARPS" in upper:  # num_warps, or a scale of each kernel's own (an Inductor module's WARPS_SCALE)
        return "warps"
    if upper == "NUM_STAGES":
        return "stages"
    if "TF32" in upper:  # an fp32 dot on the tensor cores (an Inductor module's DOT_TF32X3)
        return "tensor_cores"
    if "SPLIT" in upper or "PARTITION" in upper:
        return "split"
    if any(word in upper for word in ("BLOCK", "TILE", "ROWS", "CHUNK", "PER_PROG", "GROUP")):
        return "tile"
    return "other"


def ordered(values: list) -> list:
    """Numeric values ascending (so a neighbour is one step up or down); others as the human wrote them."""
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return sorted(values)
    return list(values)


def space_size(spaces: dict[str, Space], modules: list[str]) -> int:
    return sum(math.prod(len(v) for v in spaces[m].values()) for m in modules)


def all_points(spaces: dict[str, Space], modules: list[str]) -> list[tuple[str, dict[str, Any]]]:
    points = []
    for module in modules:
        keys = list(spaces[module])
        for values in itertools.product(*(spaces[module][k] for k in keys)):
            points.append((module, dict(zip(keys, values, strict=True))))
    return points


def random_points(
    rng: random.Random,
    spaces: dict[str, Space],
    modules: list[str],
    n: int,
    exclude: Callable[[str, dict[str, Any]], bool],
) -> list[tuple[str, dict[str, Any]]]:
    """Up to n distinct points not excluded: first one from each module (in random order), then drawn
    uniformly over the union of the modules' spaces.

    The variant is a dimension of the space: a small variant space (a 12-config kernel beside two of
    96) would otherwise be drawn one time in twenty, and a round could pass without trying it at all.
    """
    if space_size(spaces, modules) <= ENUMERATE_LIMIT:
        fresh = [p for p in all_points(spaces, modules) if not exclude(*p)]
        firsts = []
        for module in rng.sample(modules, len(modules)):
            own = [p for p in fresh if p[0] == module]
            if own:
                firsts.append(rng.choice(own))
        firsts = firsts[:n]
        rest = [p for p in fresh if p not in firsts]
        return firsts + rng.sample(rest, min(n - len(firsts), len(rest)))
    picked: dict[str, tuple[str, dict[str, Any]]] = {}
    for module in rng.sample(modules, len(modules)):
        for _ in range(50):
            config = {k: rng.choice(v) for k, v in spaces[module].items()}
            if len(picked) < n and not exclude(module, config):
                picked[point_key(module, config)] = (module, config)
                break
    weights = [math.prod(len(v) for v in spaces[m].values()) for m in modules]
    for _ in range(n * 50):
        if len(picked) >= n:
            break
        module = rng.choices(modules, weights)[0]
        config = {k: rng.choice(v) for k, v in spaces[module].items()}
        if not exclude(module, config):
            picked[point_key(module, config)] = (module, config)
    return list(picked.values())


def carry_over(config: dict[str, Any], space: Space) -> dict[str, Any]:
    """A config for another module's space: shared values kept, the rest at that space's first value."""
    return {k: config[k] if config.get(k) in values else values[0] for k, values in space.items()}


def neighbours(
    module: str, config: dict[str, Any], spaces: dict[str, Space], modules: list[str]
) -> list[dict[str, Any]]:
    """One-step moves: each key one value up or down, or the same config on another module.

    Each move: {module, config, key, old, new, step (+1/-1, 0 for a module switch)}.
    """
    moves = []
    for key, values in spaces[module].items():
        values = ordered(values)
        if config.get(key) not in values:
            continue
        i = values.index(config[key])
        for step in (-1, 1):
            if 0 <= i + step < len(values):
                new = {**config, key: values[i + step]}
                moves.append(
                    {
                        "module": module,
                        "config": new,
                        "key": key,
                        "old": config[key],
                        "new": values[i + step],
                        "step": step,
                    }
                )
    for other in modules:
        if other != module:
            moves.append(
                {
                    "module": other,
                    "config": carry_over(config, spaces[other]),
                    "key": "module",
                    "old": module,
                    "new": other,
                    "step": 0,
                }
            )
    return moves
