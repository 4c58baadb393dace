"""A run folder: one run's files, where each lives, written atomically and read back.

    RUN_DIR/
      checkpoints.sqlite        the graph's finished steps (python -m graph.run --resume RUN_DIR)
      candidates/<id>.py        each candidate's source; <id>.json its record (config, module, origin, ...)
      results/<id>.json         each candidate's EvalResult, log included, written the moment it arrives
      profiles/<id>_<shape>_<dtype>.csv   Nsight Compute profiles of a best
      log.jsonl                 the audit trail: one decision a line
      report.json, report.md, progress.png   the report (written too while the run waits for a human)
      kernel.py                 the take-home module (tools.export)
      index.json                every candidate by identity (python -m memory.artifacts)
      reevals/                  re-evaluations of past candidates

Every path a run keeps (the graph's state, report.json, index.json) is relative to the folder, so a
folder can be moved or copied and still be resumed, exported and re-evaluated.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tools.candidate import Candidate
from tools.results import EvalResult

CHECKPOINTS = "checkpoints.sqlite"
CANDIDATES = "candidates"
RESULTS = "results"
PROFILES = "profiles"
REEVALS = "reevals"
LOG = "log.jsonl"
REPORT_JSON = "report.json"
REPORT_MD = "report.md"
PROGRESS = "progress.png"
KERNEL = "kernel.py"
INDEX = "index.json"


class RunFolder:
    """The files of one run under ``root``."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.root)!r})"

    @staticmethod
    def default_root(task_name: str) -> Path:
        """runs/<task>-<time> under the working directory."""
        return Path("runs").resolve() / f"{task_name}-{time.strftime('%Y%m%d-%H%M%S')}"

    def create(self) -> RunFolder:
        for sub in (CANDIDATES, RESULTS):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        return self

    @property
    def is_run(self) -> bool:
        """Whether the folder holds a run's candidates."""
        return (self.root / CANDIDATES).is_dir()

    # -- paths -----------------------------------------------------------------------------------
    def path(self, relative: str | Path) -> Path:
        """Where a relative path of the run lies now (an absolute path is returned as it is)."""
        return self.root / relative

    @staticmethod
    def candidate_file(identity: str) -> str:
        return f"{CANDIDATES}/{identity}.py"

    @staticmethod
    def result_file(identity: str) -> str:
        return f"{RESULTS}/{identity}.json"

    def profile_file(self, identity: str, shape: dict[str, int], dtype: str) -> Path:
        where = "_".join(f"{k}{v}" for k, v in shape.items())
        return self.root / PROFILES / f"{identity}_{where}_{dtype}.csv"

    # -- text ------------------------------------------------------------------------------------
    def write(self, relative: str, text: str) -> Path:
        """Write a file whole or not at all (a kill mid-write leaves the old file or none)."""
        path = self.path(relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        return path

    def read(self, relative: str) -> str | None:
        """A file's text, or None when it is missing."""
        path = self.path(relative)
        return path.read_text() if path.is_file() else None

    def read_json(self, relative: str) -> Any:
        """A JSON file, or None when it is missing or cut short."""
        try:
            return json.loads(self.path(relative).read_text())
        except (OSError, json.JSONDecodeError):
            return None

    # -- candidates and results --------------------------------------------------------------------
    def write_candidate(self, candidate: Candidate) -> str:
        """candidates/<identity>.py (the source, written once) and .json (config, module, origin,
        rationale, parent); returns the source's relative path."""
        relative = self.candidate_file(candidate.identity)
        if not self.path(relative).exists():
            self.write(relative, candidate.source)
        record = candidate.model_dump(exclude={"source"})
        self.write(relative.removesuffix(".py") + ".json", json.dumps(record, indent=2, default=str))
        return relative

    def candidate_record(self, identity: str) -> dict[str, Any]:
        """The candidate's record without its source ({} when it has none)."""
        record = self.read_json(f"{CANDIDATES}/{identity}.json")
        return record if isinstance(record, dict) else {}

    def candidate_identities(self) -> list[str]:
        """Every candidate with a source here, by identity, sorted."""
        return sorted(p.stem for p in (self.root / CANDIDATES).glob("*.py"))

    def save_result(self, identity: str, result: EvalResult) -> str:
        relative = self.result_file(identity)
        self.write(relative, result.model_dump_json(indent=2))
        return relative

    def load_result(self, identity: str) -> EvalResult | None:
        """The stored result, or None when there is none or a kill cut it short (evaluate it again)."""
        text = self.read(self.result_file(identity))
        if text is None:
            return None
        try:
            return EvalResult.model_validate_json(text)
        except ValueError:
            return None

    def results(self) -> Iterator[tuple[str, EvalResult]]:
        """(identity, result) of every readable result, by identity."""
        for path in sorted((self.root / RESULTS).glob("*.json")):
            result = self.load_result(path.stem)
            if result is not None:
                yield path.stem, result

    # -- the report --------------------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        """report.json ({} when there is none yet)."""
        report = self.read_json(REPORT_JSON)
        return report if isinstance(report, dict) else {}

    def best_identity(self) -> str | None:
        """The identity of the run's best as report.json names it (the watchdog may have kept it over a
        faster one)."""
        best = self.report().get("best")
        if not isinstance(best, dict):
            return None
        if best.get("identity"):
            return str(best["identity"])
        candidate = best.get("candidate")
        return Path(candidate).stem if isinstance(candidate, str) else None
