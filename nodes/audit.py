"""The audit trail: one JSON line per decision in the run folder's log.jsonl.

A node may run twice for one step (resumed after a crash, or a human interrupt re-running it), so a
line whose (round, node, key) was already written is not written again.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tools.run_folder import LOG, RunFolder

_seen: dict[tuple[Path, int], set[str]] = {}


def _keys(path: Path) -> set[str]:
    """Keys already in the file (read once per file; a file replaced under the same name is read anew)."""
    path.touch()
    ident = (path, path.stat().st_ino)
    if ident not in _seen:
        keys: set[str] = set()
        for line in path.read_text().splitlines():
            try:
                keys.add(json.loads(line)["key"])
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # a line cut short by a kill
        _seen[ident] = keys
    return _seen[ident]


def audit(
    folder: RunFolder, node: str, message: str, *, round: int, key: str | None = None, **fields: Any
) -> None:
    """Append one decision to the trail (once per round, node and key; the key defaults to the message)."""
    path = folder.path(LOG)
    full_key = f"{round}/{node}/{key or message}"
    keys = _keys(path)
    if full_key in keys:
        return
    entry = {"t": round_time(), "round": round, "node": node, "message": message, "key": full_key, **fields}
    with path.open("a") as fh:
        fh.write(json.dumps(entry, default=str) + "\n")
    keys.add(full_key)


def read_trail(folder: RunFolder) -> list[dict[str, Any]]:
    path = folder.path(LOG)
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return entries


def round_time() -> float:
    return round(time.time(), 3)
