"""A coarse resource estimate of a config against the device's limits, before anything is compiled.

It sees only the config (the kernel's own dimensions, e.g. a head size, are invisible), so it errs
on the side of approving; the evaluator's compile stage has the last word. The rules:
- threads per program (num_warps * 32) over the device's limit;
- registers: tile elements spread over the threads, about two live fp32 values each, over the limit;
- shared memory: num_stages copies of the tile (bf16) over the device's shared memory;
- learned: a config of the same module with no smaller tiles and no more warps than one that already
  failed with resource_limit.
"""

from __future__ import annotations

from typing import Any

from nodes.expert.space import key_role, tile_elements

LIVE_VALUES_PER_ELEMENT = 2
REGISTER_OVERHEAD = 24
STAGED_BYTES_PER_ELEMENT = 2


def resource_problems(
    module: str, config: dict[str, Any], limits: dict[str, Any], history: list[dict[str, Any]] = ()
) -> list[str]:
    """Reasons the config would exceed the device (empty when it fits as far as we can tell)."""
    problems = []
    tile_keys = [k for k in config if key_role(k) == "tile"]
    warps = int(config.get("num_warps", 4))
    threads = warps * 32
    if limits and threads > limits["max_threads_per_block"]:
        problems.append(
            f"num_warps={warps} means {threads} threads per program > {limits['max_threads_per_block']}"
        )
    tile = tile_elements(config)
    if limits and tile_keys:
        registers = LIVE_VALUES_PER_ELEMENT * tile / threads + REGISTER_OVERHEAD
        if registers > limits["max_registers_per_thread"]:
            problems.append(
                f"about {registers:.0f} registers/thread ({tile} tile elements over {threads} threads) > "
                f"{limits['max_registers_per_thread']}: it would spill; use smaller {'/'.join(tile_keys)} "
                "or more num_warps"
            )
        stages = int(config.get("num_stages", 1))
        shared = stages * tile * STAGED_BYTES_PER_ELEMENT
        if stages > 1 and shared > limits["shared_memory_bytes"]:
            problems.append(
                f"about {shared} bytes of shared memory for {stages} stages > "
                f"{limits['shared_memory_bytes']}: "
                "use fewer num_stages or smaller tiles"
            )
    for past in history:
        if past.get("error_type") != "resource_limit" or past.get("module") != module:
            continue
        same_other = all(
            past["config"].get(k) == v for k, v in config.items() if key_role(k) in ("other", "split")
        )
        if (
            tile_keys
            and same_other
            and tile >= tile_elements(past["config"])
            and warps <= int(past["config"].get("num_warps", 4))
        ):
            problems.append(
                f"attempt #{past['n']} ({past['config']}) already hit resource_limit with tiles "
                "no larger and "
                "at least as many warps"
            )
            break
    return problems
