"""The human's answers, parsed and checked against the task before any is taken.

    continue                                  resume the search as it is
    stop                                      write the report and end
    widen [MODULE:]KEY=V1,V2 ...              add values to the search space
    constrain forbid=CONSTRUCT[,...]          forbid constructs in new code
    constrain [MODULE:]KEY=V1,V2 ...          keep only these values of a key
    candidate PATH [MODULE] [CONFIG-JSON]     evaluate your own kernel file (through the critic)
    approve N [N ...]                         accept candidates held for review (suspicious speedups)

An answer that cannot be applied raises ``AnswerError`` saying why, before it reaches the checkpoint:
a value of another type than the key's values (``widen num_warps=abc``), a block size that is not a
power of two where a kernel's ``tl.arange`` needs one (tools.kernel_roles), a file that does not exist,
a construct that does not parse, a config outside the space.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from loop.records import Attempt
from tools.kernel_roles import block_size_keys
from tools.task import Task

CHOICES = [
    "continue: resume the search as it is",
    "stop: write the report and end",
    "widen [MODULE:]KEY=V1,V2: add values to the search space (e.g. widen num_warps=32)",
    "constrain forbid=CONSTRUCT | constrain [MODULE:]KEY=V1,V2: forbid a construct, or keep only these",
    "candidate PATH [MODULE] [CONFIG-JSON]: evaluate your own kernel file (it goes through the critic)",
    "approve N [N ...]: accept candidates held for review (more than the suspicious-speedup limit faster "
    "than the baseline, within the roofline) as results, after you checked them",
]
ACTIONS = ("continue", "stop", "widen", "constrain", "candidate", "approve")
CANDIDATE_ARGS = re.compile(
    r"""^(?P<path>"[^"]+"|'[^']+'|\S+)(?:\s+(?P<module>[^\s{]+\.py))?\s*(?P<config>\{.*\})?\s*$"""
)
CONSTRUCT = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
# Triton's launch options: what each takes.
POWER_OF_TWO_OPTIONS = {"num_warps"}
POSITIVE_OPTIONS = {"num_stages", "num_ctas"}


class AnswerError(ValueError):
    """The human's answer cannot be applied; the message says why and what would work."""


def parse_answer(
    answer: Any, spaces: dict[str, dict[str, list]], attempts: list[Attempt], task: Task
) -> dict[str, Any]:
    """The answer as {action, ...}, checked against the run's search spaces, attempts and task."""
    if isinstance(answer, dict):
        answer = answer.get("answer", "")
    if not isinstance(answer, str) or not answer.strip():
        raise AnswerError(f"an answer is one of: {', '.join(ACTIONS)}")
    tokens = answer.split()
    action, args = tokens[0].lower(), tokens[1:]
    if action in ("continue", "stop"):
        if args:
            raise AnswerError(f"{action} takes no arguments")
        return {"action": action}
    if action == "widen":
        return _parse_widen(args, spaces, task)
    if action == "constrain":
        return _parse_constrain(args, spaces)
    if action == "candidate":
        return _parse_candidate(answer.strip()[len(tokens[0]) :].strip(), spaces, task)
    if action == "approve":
        return _parse_approve(args, attempts)
    raise AnswerError(f"unknown answer {tokens[0]!r}; choose one of: {', '.join(ACTIONS)}")


# -- the search space ------------------------------------------------------------------------------
def _assignment(token: str, spaces: dict[str, dict[str, list]]) -> tuple[list[str], str, list[Any]]:
    if "=" not in token:
        raise AnswerError(f"{token!r}: expected KEY=V1,V2 (optionally MODULE:KEY=...)")
    lhs, raw = token.split("=", 1)
    module, key = lhs.split(":", 1) if ":" in lhs else (None, lhs)
    if module is not None and module not in spaces:
        raise AnswerError(f"{token!r}: unknown module {module!r} (modules: {', '.join(spaces)})")
    modules = [module] if module else [m for m, space in spaces.items() if key in space]
    if not modules or any(key not in spaces[m] for m in modules):
        known = sorted({k for space in spaces.values() for k in space})
        raise AnswerError(f"{token!r}: unknown search-space key {key!r} (keys: {', '.join(known)})")
    values = [yaml.safe_load(v) for v in raw.split(",") if v.strip()]
    if not values:
        raise AnswerError(f"{token!r}: no values given, e.g. {key}=V1,V2")
    for m in modules:
        _check_types(token, key, values, spaces[m][key])
    return modules, key, values


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int):
        return "whole numbers"
    if isinstance(value, float):
        return "numbers"
    if isinstance(value, str):
        return "words"
    return type(value).__name__


def _check_types(token: str, key: str, values: list[Any], current: list[Any]) -> None:
    """Each new value must be of the kind the key's values are (a float key takes whole numbers too)."""
    kinds = {_kind(v) for v in current}
    if kinds == {"numbers", "whole numbers"}:
        kinds = {"numbers"}
    for value in values:
        kind = _kind(value)
        if kind in kinds or (kind == "whole numbers" and "numbers" in kinds):
            continue
        raise AnswerError(
            f"{token!r}: {key} takes {' or '.join(sorted(kinds))} (its values are {current}); {value!r} is not one"
        )


def _power_of_two(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0 and value & (value - 1) == 0


def _check_launch_values(token: str, key: str, values: list[Any], block_modules: list[str]) -> None:
    """Values Triton would refuse: launch options out of range, block sizes that are not powers of two."""
    if key in POWER_OF_TWO_OPTIONS or block_modules:
        bad = [v for v in values if not _power_of_two(v)]
        if bad:
            where = (
                f"Triton runs {key} warps in powers of two"
                if key in POWER_OF_TWO_OPTIONS
                else f"{key} sizes a block (tl.arange) in {', '.join(block_modules)}, and blocks are powers of two"
            )
            raise AnswerError(f"{token!r}: {bad} refused: {where}")
    if key in POSITIVE_OPTIONS:
        bad = [v for v in values if not isinstance(v, int) or isinstance(v, bool) or v < 1]
        if bad:
            raise AnswerError(f"{token!r}: {bad} refused: {key} is a whole number >= 1")


def _parse_widen(args: list[str], spaces: dict[str, dict[str, list]], task: Task) -> dict[str, Any]:
    if not args:
        raise AnswerError("widen needs KEY=V1,V2, e.g. widen num_warps=32")
    changes = []
    for token in args:
        modules, key, values = _assignment(token, spaces)
        sized = [m for m in modules if key in _block_keys(task, m)]
        _check_launch_values(token, key, values, sized)
        changes.append({"modules": modules, "key": key, "values": values})
    return {"action": "widen", "changes": changes}


def _block_keys(task: Task, module: str) -> set[str]:
    try:
        return block_size_keys(task.source(module))
    except OSError:
        return set()


def _parse_constrain(args: list[str], spaces: dict[str, dict[str, list]]) -> dict[str, Any]:
    if not args:
        raise AnswerError("constrain needs forbid=CONSTRUCT or KEY=V1,V2")
    forbid, changes = [], []
    for token in args:
        if token.startswith("forbid="):
            forbid += _constructs(token)
            continue
        modules, key, values = _assignment(token, spaces)
        for m in modules:
            outside = [v for v in values if v not in spaces[m][key]]
            if outside:
                raise AnswerError(
                    f"{token!r}: {outside} not in {m}'s {key} values {spaces[m][key]}; constrain only keeps "
                    "values (use widen to add)"
                )
        changes.append({"modules": modules, "key": key, "values": values})
    return {"action": "constrain", "forbid": forbid, "changes": changes}


def _constructs(token: str) -> list[str]:
    """``forbid=tl.dot,tl.atomic_add``: dotted names, as the static check matches them."""
    named = [c.strip() for c in token.split("=", 1)[1].split(",") if c.strip()]
    if not named:
        raise AnswerError(f"{token!r} names no construct, e.g. constrain forbid=tl.dot")
    bad = [c for c in named if not CONSTRUCT.match(c)]
    if bad:
        raise AnswerError(f"{token!r}: {bad} is not a dotted name such as tl.dot or tl.atomic_add")
    return named


# -- approvals and candidates ----------------------------------------------------------------------
def _parse_approve(args: list[str], attempts: list[Attempt]) -> dict[str, Any]:
    """``approve N [N ...]`` (``#N`` or comma lists too): every N must be a candidate held as a speedup."""
    numbers = [t.strip().lstrip("#") for arg in args for t in arg.split(",") if t.strip()]
    if not numbers:
        raise AnswerError("approve needs the number of a held candidate, e.g. approve 12")
    by_number = {a.n: a for a in attempts}
    chosen = []
    for raw in numbers:
        if not raw.isdigit() or int(raw) not in by_number:
            raise AnswerError(f"approve {raw}: no evaluated candidate #{raw}")
        attempt = by_number[int(raw)]
        if attempt.held == "roofline":
            raise AnswerError(
                f"approve {raw}: #{raw} measured faster than the copy bandwidth, so the measurement "
                "itself is wrong; it cannot be approved"
            )
        if attempt.held != "speedup":
            raise AnswerError(f"approve {raw}: #{raw} was not held for review ({attempt.verdict})")
        chosen.append(int(raw))
    return {"action": "approve", "attempts": chosen}


def _parse_candidate(text: str, spaces: dict[str, dict[str, list]], task: Task) -> dict[str, Any]:
    """``PATH [MODULE] [CONFIG-JSON]``; a PATH with spaces is quoted. The config must lie in the space."""
    match = CANDIDATE_ARGS.match(text)
    if not match:
        raise AnswerError("candidate needs a file: candidate path/to/kernel.py [MODULE] [CONFIG-JSON]")
    path = Path(match["path"].strip("'\"")).expanduser().resolve()
    if not path.is_file():
        raise AnswerError(f"candidate file not found: {path}")
    module = match["module"] or task.default_module
    if module not in spaces:
        raise AnswerError(f"unknown module {module!r} (modules: {', '.join(spaces)})")
    if match["config"]:
        try:
            config = json.loads(match["config"])
        except json.JSONDecodeError as exc:
            raise AnswerError(f"candidate config is not JSON: {exc}") from None
        if not isinstance(config, dict):
            raise AnswerError("candidate config must be a JSON object, e.g. '{\"num_warps\": 8}'")
    else:
        config = task.default_config(module)
    problems = task.config_problems(config, module)
    if problems:
        raise AnswerError(f"candidate config {config} is outside {module}'s space: {'; '.join(problems)}")
    return {"action": "candidate", "path": str(path), "module": module, "config": config}
