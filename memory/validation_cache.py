"""Validation cache: an identical candidate on the same task, device and software is evaluated once.

SQLite (stdlib) in WAL mode with a busy timeout, so several processes (parallel runs, worker pools)
can read and write one file. The key hashes everything that can change a verdict:

- the candidate identity (source + config, ``tools.candidate.candidate_identity``),
- the task: name, dtypes, shapes, check/CPU shapes, tolerance, constraints, search space and the text
  of the reference/inputs files,
- the device name, Triton and torch versions and whether the interpreter ran it,
- how times are taken (``tools.timing.TIMING_METHOD``): a result timed another way is not comparable.

Transient failures (timeout, crash, unstable timing) are not stored: running again may well differ.

Pattern for the graph::

    cache = ValidationCache()                                  # $KERNEL_AGENT_HOME/validation_cache.sqlite
    device = current_device_info("cuda")
    result, hit = cached_evaluate(cache, lambda: evaluate(task, cand), identity=cand.identity,
                                  task=task, device_info=device)
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Callable, Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

from memory.home import default_validation_cache

TRANSIENT_ERRORS = frozenset({"timeout", "crash", "unstable_timing"})

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key TEXT PRIMARY KEY,
    identity TEXT NOT NULL,
    task TEXT NOT NULL,
    device TEXT NOT NULL,
    triton TEXT NOT NULL,
    torch TEXT NOT NULL,
    result TEXT NOT NULL,
    created REAL NOT NULL
)
"""


def _plain(value: Any) -> Any:
    return value.model_dump(mode="json") if hasattr(value, "model_dump") else value


def task_fingerprint(task: Any) -> tuple[str, str]:
    """(task name, hash of what decides a verdict) for a ``tools.task.Task`` or a task dict."""
    if hasattr(task, "spec") and hasattr(task, "path"):
        spec = task.spec
        files = {}
        for relative in {spec.reference, spec.inputs.split(":", 1)[0]}:
            path = task.path(relative)
            files[relative] = path.read_text() if path.is_file() else ""
        tolerance = {dtype: task.tolerance(dtype) for dtype in task.dtypes}
        blob: Any = {
            "name": spec.name,
            "dtypes": task.dtypes,
            "shapes": spec.shapes,
            "check_shapes": spec.check_shapes,
            "cpu_shapes": spec.cpu_shapes,
            "tolerance": tolerance,
            "constraints": spec.constraints.model_dump(),
            "search_space": spec.search_space,
            "files": files,
        }
        name = spec.name
    elif isinstance(task, Mapping):
        blob, name = dict(task), str(task.get("name", ""))
        if not name:
            raise ValueError("a task dict for the validation cache needs a 'name'")
    else:
        raise TypeError(f"task must be a tools.task.Task or a dict, not {type(task).__name__}")
    digest = hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()
    return name, digest


def _device_fields(device_info: Any) -> dict[str, Any]:
    info = _plain(device_info) or {}
    return {
        "name": str(info.get("name", "")),
        "triton": str(info.get("triton", "")),
        "torch": str(info.get("torch", "")),
        "interpreted": bool(info.get("interpreted", False)),
    }


def cache_key(identity: str, task: Any, device_info: Any) -> str:
    from tools.timing import TIMING_METHOD

    _, task_digest = task_fingerprint(task)
    blob = {
        "identity": identity,
        "task": task_digest,
        "device": _device_fields(device_info),
        "timing": TIMING_METHOD,
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()


def current_device_info(device: str = "cuda") -> dict[str, Any]:
    """The DeviceInfo fields (``tools.results.DeviceInfo``) of this process's device and software."""
    import torch
    import triton

    if device == "cpu":
        name, interpreted = "cpu", True
    else:
        name, interpreted = torch.cuda.get_device_name(), False
    return {
        "name": name,
        "triton": triton.__version__,
        "torch": torch.__version__,
        "interpreted": interpreted,
    }


class ValidationCache:
    """identity + task + device -> EvalResult dict, in one SQLite file."""

    def __init__(self, path: str | Path | None = None, timeout_s: float = 30.0):
        self.path = Path(path) if path is not None else default_validation_cache()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.timeout_s = timeout_s
        self.hits = 0
        self.misses = 0
        with closing(self._connect()) as db, db:
            db.execute("PRAGMA journal_mode=WAL")  # stays set in the file
            db.execute(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        # One short-lived connection per operation: nothing is shared across forks or threads;
        # the timeout makes a writer wait for another process's lock instead of failing.
        db = sqlite3.connect(self.path, timeout=self.timeout_s)
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    def get(self, identity: str, task: Any, device_info: Any) -> dict[str, Any] | None:
        key = cache_key(identity, task, device_info)
        with closing(self._connect()) as db:
            row = db.execute("SELECT result FROM results WHERE key = ?", (key,)).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return json.loads(row[0])

    def put(self, identity: str, task: Any, device_info: Any, result: Any) -> bool:
        """Store a result; returns False (and stores nothing) for a transient failure."""
        result = _plain(result)
        if result.get("verdict") == "fail" and result.get("error_type") in TRANSIENT_ERRORS:
            return False
        name, _ = task_fingerprint(task)
        device = _device_fields(device_info)
        row = (
            cache_key(identity, task, device_info),
            identity,
            name,
            device["name"],
            device["triton"],
            device["torch"],
            json.dumps(result, default=str),
            time.time(),
        )
        with closing(self._connect()) as db, db:
            db.execute("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
        return True

    def __len__(self) -> int:
        with closing(self._connect()) as db:
            return int(db.execute("SELECT COUNT(*) FROM results").fetchone()[0])

    def stats(self) -> dict[str, Any]:
        """This object's hits and misses, and the entries in the file."""
        return {"hits": self.hits, "misses": self.misses, "entries": len(self), "path": str(self.path)}


def cached_evaluate(
    cache: ValidationCache | None,
    evaluate_fn: Callable[[], Any],
    *,
    identity: str,
    task: Any,
    device_info: Any,
) -> tuple[dict[str, Any], bool]:
    """(EvalResult dict, True when it came from the cache). ``evaluate_fn()`` runs only on a miss and
    may return an ``EvalResult`` or its dict; ``cache=None`` (memory off) always evaluates."""
    if cache is not None:
        stored = cache.get(identity, task, device_info)
        if stored is not None:
            return stored, True
    result = _plain(evaluate_fn())
    if cache is not None:
        cache.put(identity, task, device_info, result)
    return result, False
