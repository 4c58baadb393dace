"""The search space as the expert policy walks it: points, draws spread over it, one-step neighbours.

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
Point = tuple[str, dict[str, Any]]  # (module, config)
Role = Literal["tile", "split", "warps", "stages", "tensor_cores", "other"]

ENUMERATE_LIMIT = 50_000
POOL = 2_000  # points a draw weighs at once: a spread draw costs POOL x (evaluated + drawn) distances


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


def all_points(spaces: dict[str, Space], modules: list[str]) -> list[Point]:
    points = []
    for module in modules:
        keys = list(spaces[module])
        for values in itertools.product(*(spaces[module][k] for k in keys)):
            points.append((module, dict(zip(keys, values, strict=True))))
    return points


def distance(a: Point, b: Point) -> int:
    """Steps between two points: the keys whose values differ (or that only one has), one more for
    another module."""
    (module_a, config_a), (module_b, config_b) = a, b
    keys = config_a.keys() | config_b.keys()
    differ = sum(1 for k in keys if k not in config_a or k not in config_b or config_a[k] != config_b[k])
    return differ + (module_a != module_b)


def spread_points(
    rng: random.Random,
    spaces: dict[str, Space],
    modules: list[str],
    n: int,
    exclude: Callable[[str, dict[str, Any]], bool],
    near: list[Point] = (),
) -> list[Point]:
    """Up to n distinct points not excluded: first one from each module (in random order), then each drawn
    at random among the points farthest (``distance``) from ``near`` (the points evaluated) and from the
    points drawn before it.

    The variant is a dimension of the space: a small variant space (a 12-config kernel beside two of
    96) would otherwise be drawn one time in twenty, and a round could pass without trying it at all.
    Farthest first, because a few uniform draws often land next to each other and leave a region unseen,
    and with it the configs that are fastest at some shape.
    """
    pool = candidate_pool(rng, spaces, modules, exclude)
    reach = [min((distance(p, q) for q in near), default=math.inf) for p in pool]
    picked: list[Point] = []

    def draw(allowed: list[int]) -> None:
        farthest = max(reach[i] for i in allowed)
        i = rng.choice([i for i in allowed if reach[i] == farthest])
        picked.append(pool[i])
        reach[i] = -1  # drawn
        for j, p in enumerate(pool):
            if reach[j] >= 0:
                reach[j] = min(reach[j], distance(p, pool[i]))

    for module in rng.sample(modules, len(modules)):
        own = [i for i, p in enumerate(pool) if p[0] == module and reach[i] >= 0]
        if own and len(picked) < n:
            draw(own)
    while len(picked) < n and any(r >= 0 for r in reach):
        draw([i for i, r in enumerate(reach) if r >= 0])
    return picked


def candidate_pool(
    rng: random.Random,
    spaces: dict[str, Space],
    modules: list[str],
    exclude: Callable[[str, dict[str, Any]], bool],
) -> list[Point]:
    """The points a draw chooses among: every point not excluded, or a random sample of POOL of them in a
    larger space (each module tried first, the larger ones drawn more often)."""
    if space_size(spaces, modules) <= ENUMERATE_LIMIT:
        fresh = [p for p in all_points(spaces, modules) if not exclude(*p)]
        return fresh if len(fresh) <= POOL else rng.sample(fresh, POOL)
    picked: dict[str, Point] = {}
    weights = [math.prod(len(v) for v in spaces[m].values()) for m in modules]
    for module in [*modules, *rng.choices(modules, weights, k=POOL * 50)]:
        if len(picked) >= POOL:
            break
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
