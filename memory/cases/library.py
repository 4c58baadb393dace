"""The case library: cases in an embedded, persistent chromadb collection (no server).

Each case is one record: its document is ``case_document(case)`` (what gets embedded), its metadata
holds the fields worth filtering on as flat scalars plus the whole case as JSON (``case_json``, the
source of truth when reading back).

Scores: the collection uses cosine distance ``d = 1 - cos(a, b)`` on normalized vectors (range
[0, 2]); a hit's score is the cosine similarity clipped to [0, 1], ``score = clamp(1 - d, 0, 1)``,
1 for the same text. Task queries share their layout with the documents, so even another op scores
about 0.5-0.65 while a case of the same op family scores about 0.85 (measured on the test cases).
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import chromadb
from chromadb.config import Settings

from memory.cases.model import Case, read_cases
from memory.cases.text import case_document, expand_query, task_query
from memory.embedding import MiniLMEmbedding

COLLECTION = "cases"
# Kept cases whose score is within this margin of the best match count as equally relevant and are
# ordered by their speedup: many cases of one task read almost the same.
STARTING_POINT_MARGIN = 0.1


def case_metadata(case: Case) -> dict[str, str | int | float | bool]:
    """Flat scalars for chroma's ``where`` filters (None is left out: chroma stores no nulls)."""
    meta: dict[str, str | int | float | bool] = {
        "case_json": case.model_dump_json(),
        "task_name": case.task.name,
        "op_family": case.task.op_family,
        "dtypes": ",".join(case.task.dtypes),
        "bottleneck": case.snapshot.bottleneck or "",
        "verdict": case.outcome.verdict,
        "error_type": case.outcome.error_type or "",
        "kept": case.kept,
        "best_of_run": case.best_of_run,
        "origin": case.origin,
        "identity": case.identity,
        "run_id": case.run_id,
        "module": case.change.module,
        "new_source": case.change.new_source,
        "device": case.outcome.device,
        "created": case.created.isoformat(),
        "created_ts": case.created.timestamp(),
    }
    for key in ("speedup", "geomean_us"):
        value = getattr(case.outcome, key)
        if value is not None:
            meta[key] = float(value)
    return meta


def _where(where: dict[str, Any] | None) -> dict[str, Any] | None:
    """Accept a plain ``{"kept": True, "op_family": "attention"}``; chroma wants ``$and`` for several keys."""
    if not where:
        return None
    if len(where) == 1 or any(key.startswith("$") for key in where):
        return where
    return {"$and": [{key: value} for key, value in where.items()]}


def _score(distance: float) -> float:
    return min(1.0, max(0.0, 1.0 - distance))


ScoredCase = tuple[Case, float]


@dataclass
class Retrieval:
    """What ``diagnose`` and ``propose`` read for one task.

    hits: top k of every case, best first; ``confidence`` is the best score (0 when the store is empty).
    starting_points: passing, kept cases (configs/changes to try first), most relevant and fastest first.
    avoid: failures of similar cases (changes not to repeat), most relevant first.
    """

    query: str
    hits: list[ScoredCase] = field(default_factory=list)
    starting_points: list[ScoredCase] = field(default_factory=list)
    avoid: list[ScoredCase] = field(default_factory=list)

    @property
    def confidence(self) -> float:
        return max((score for _, score in self.hits), default=0.0)

    def to_dicts(self) -> list[dict[str, Any]]:
        """JSON-plain summary of the hits for graph state, agent context and report.json."""
        return [scored_case_dict(case, score) for case, score in self.hits]


def scored_case_dict(case: Case, score: float) -> dict[str, Any]:
    return {
        "id": case.id,
        "score": round(score, 4),
        "task": case.task.name,
        "op_family": case.task.op_family,
        "bottleneck": case.snapshot.bottleneck,
        "module": case.change.module,
        "config": case.change.config,
        "new_source": case.change.new_source,
        "source_path": case.change.source_path,
        "rationale": case.rationale,
        "verdict": case.outcome.verdict,
        "error_type": case.outcome.error_type,
        "message": case.outcome.message,
        "speedup": case.outcome.speedup,
        "kept": case.kept,
        "best_of_run": case.best_of_run,
        "summary": case.headline(),
    }


class CaseLibrary:
    """Cases stored under ``path`` (a folder; created when missing)."""

    def __init__(self, path: str | Path, embedding: MiniLMEmbedding | None = None):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.embedding = embedding or MiniLMEmbedding()
        self._client = chromadb.PersistentClient(
            path=str(self.path), settings=Settings(anonymized_telemetry=False, allow_reset=False)
        )
        # The embedding function is always passed: chroma's default one would download a model.
        self._collection = self._client.get_or_create_collection(
            COLLECTION,
            embedding_function=self.embedding,
            configuration={"hnsw": {"space": "cosine"}},
        )

    # -- writing ------------------------------------------------------------------------------
    def add(self, cases: Iterable[Case]) -> int:
        """Store the cases not stored yet (one per task + candidate identity); returns how many were new.

        A case stored before is promoted when a later run kept it or ended with it (a config that
        became a run's best must rank as a starting point); flags are never taken back."""
        fresh: dict[str, Case] = {}
        for case in cases:
            fresh.setdefault(case.id, case)
        if not fresh:
            return 0
        # Embedded chroma is not made for several writing processes: runs that finish together take
        # turns through a lock file.
        with (self.path / "write.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            stored = self._collection.get(ids=list(fresh), include=["metadatas"])
            present = set(stored["ids"])
            new = [case for case_id, case in fresh.items() if case_id not in present]
            promoted = []
            for case_id, meta in zip(stored["ids"], stored["metadatas"], strict=True):
                old, incoming = _case(meta), fresh[case_id]
                flags = {
                    "kept": old.kept or incoming.kept,
                    "best_of_run": old.best_of_run or incoming.best_of_run,
                }
                if (flags["kept"], flags["best_of_run"]) != (old.kept, old.best_of_run):
                    # a run that kept it passed it: its result replaces a stored failure or CPU timing
                    base = incoming if incoming.kept or incoming.best_of_run else old
                    promoted.append(base.model_copy(update=flags))
            if promoted:
                self._collection.update(
                    ids=[case.id for case in promoted],
                    metadatas=[case_metadata(case) for case in promoted],  # type: ignore[misc]
                )
            if new:
                self._collection.add(
                    ids=[case.id for case in new],
                    documents=[case_document(case) for case in new],
                    metadatas=[case_metadata(case) for case in new],  # type: ignore[misc]
                )
        return len(new)

    # -- reading ------------------------------------------------------------------------------
    def count(self) -> int:
        return self._collection.count()

    def get(self, case_id: str) -> Case | None:
        got = self._collection.get(ids=[case_id], include=["metadatas"])
        return _case(got["metadatas"][0]) if got["ids"] else None

    def find(self, prefix: str) -> list[Case]:
        """Cases whose id, or whose candidate identity, starts with ``prefix``."""
        ids = self._collection.get(include=[])["ids"]
        matches = [i for i in ids if i.startswith(prefix) or i.split(":", 1)[-1].startswith(prefix)]
        if not matches:
            return []
        got = self._collection.get(ids=matches, include=["metadatas"])
        return [_case(meta) for meta in got["metadatas"]]

    def list(self, limit: int | None = None, where: dict[str, Any] | None = None) -> list[Case]:
        """Newest first."""
        got = self._collection.get(where=_where(where), include=["metadatas"])
        cases = sorted((_case(m) for m in got["metadatas"]), key=lambda c: c.created, reverse=True)
        return cases[:limit] if limit is not None else cases

    def search(self, query: str, k: int = 5, where: dict[str, Any] | None = None) -> list[ScoredCase]:
        """The k cases most similar to free text, best first, each with its score in [0, 1].
        ``where`` filters on metadata, e.g. ``{"op_family": "normalization", "kept": True}``."""
        return self._query(expand_query(query), k, where)

    def _query(self, text: str, k: int, where: dict[str, Any] | None) -> list[ScoredCase]:
        n = min(k, self.count())
        if n <= 0:
            return []
        got = self._collection.query(
            query_texts=[text], n_results=n, where=_where(where), include=["metadatas", "distances"]
        )
        return [
            (_case(meta), _score(dist))
            for meta, dist in zip(got["metadatas"][0], got["distances"][0], strict=True)
        ]

    def search_for_task(
        self,
        task_signature: dict[str, Any],
        bottleneck: str | None = None,
        k: int = 5,
        where: dict[str, Any] | None = None,
    ) -> list[ScoredCase]:
        """Cases similar to a task (``Task.signature()``), with the current bottleneck when known."""
        return self._query(task_query(task_signature, bottleneck), k, where)

    def retrieve(
        self, task_signature: dict[str, Any], bottleneck: str | None = None, k: int = 5
    ) -> Retrieval:
        """Everything ``diagnose``/``propose`` need in one call (see ``Retrieval``)."""
        query = task_query(task_signature, bottleneck)
        hits = self._query(query, k, None)
        kept = self._query(query, 3 * k, {"kept": True})
        if kept:
            top = kept[0][1]
            kept.sort(
                key=lambda hit: (
                    hit[1] >= top - STARTING_POINT_MARGIN,
                    hit[0].best_of_run,
                    hit[0].outcome.speedup or 0.0,
                    hit[1],
                ),
                reverse=True,
            )
        avoid = self._query(query, k, {"verdict": "fail"})
        return Retrieval(query=query, hits=hits, starting_points=kept[:k], avoid=avoid)

    # -- files --------------------------------------------------------------------------------
    def export(self, path: str | Path) -> int:
        """Write every case as one JSON line, oldest first; returns how many."""
        cases = list(reversed(self.list()))
        with Path(path).open("w") as out:
            for case in cases:
                out.write(case.model_dump_json() + "\n")
        return len(cases)

    def import_(self, path: str | Path) -> int:
        """Add the cases of a JSON-lines file (as written by ``export``); returns how many were new.
        Raises ValueError naming the line when a line is not a case."""
        return self.add(read_cases(path))


def _case(metadata: Any) -> Case:
    return Case.model_validate_json(str(metadata["case_json"]))
