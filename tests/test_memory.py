"""Case library on real chromadb with the real offline MiniLM model, in a temporary KERNEL_AGENT_HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("chromadb")
pytest.importorskip("sentence_transformers")

from memory import open_case_library  # noqa: E402
from memory.cases import Case, Change, Outcome, SnapshotSummary, TaskSignature, case_from_attempt  # noqa: E402
from memory.cases.library import CaseLibrary  # noqa: E402
from memory.embedding import MiniLMEmbedding  # noqa: E402
from memory.home import kernel_agent_home  # noqa: E402
from tools.candidate import candidate_identity  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

RMSNORM = TaskSignature(
    name="add_rmsnorm",
    description="Fused residual add + RMSNorm: h = x + residual; "
    "y = h / sqrt(mean(h^2) + eps) * weight, per row",
    dtypes=["bfloat16"],
    shapes=[{"M": 4096, "N": 4096}],
)
SOFTMAX = TaskSignature(
    name="softmax",
    description="Row-wise softmax over the last dimension: y = exp(x - max(x)) / sum(exp(x - max(x)))",
    dtypes=["bfloat16"],
    shapes=[{"M": 8192, "N": 32768}],
)
GQA = TaskSignature(
    name="gqa_decode",
    description="Grouped-query attention decode: one query token per sequence attends over a KV cache of "
    "length S; 32 query heads share 8 KV heads, head dim 128",
    dtypes=["bfloat16"],
    shapes=[{"B": 1, "S": 32768}],
)
MATMUL = TaskSignature(
    name="matmul_bf16",
    description="Dense matrix multiplication C = A @ B in bf16 with fp32 accumulation",
    dtypes=["bfloat16"],
    shapes=[{"M": 8192, "N": 8192, "K": 8192}],
)
GELU = TaskSignature(
    name="gelu",
    description="GELU activation (tanh approximation) applied to every element of a contiguous tensor",
    dtypes=["float16"],
    shapes=[{"N": 1 << 24}],
)

LAYERNORM_TASK = {
    "name": "layer_norm",
    "description": "LayerNorm forward: y = (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta over each row",
    "dtypes": ["bfloat16"],
    "shapes": [{"M": 4096, "N": 8192}],
}
GQA_TASK = {
    "name": "paged_gqa_decode",
    "description": "Decode step of grouped-query attention: a single new query token attends to a long paged "
    "KV cache; 64 query heads over 8 KV heads",
    "dtypes": ["bfloat16"],
    "shapes": [{"B": 8, "S": 8192}],
}


def make_case(
    task: TaskSignature,
    bottleneck: str,
    config: dict,
    rationale: str,
    *,
    verdict: str = "pass",
    error_type: str | None = None,
    speedup: float | None = 1.2,
    kept: bool = True,
    best: bool = False,
    run_id: str = "run-1",
) -> Case:
    return Case(
        task=task,
        snapshot=SnapshotSummary(bottleneck=bottleneck, metrics={"dram_pct": 80.0}),
        diagnosis=f"{bottleneck.replace('_', ' ')} on the baseline",
        change=Change(config=config),
        rationale=rationale,
        outcome=Outcome(
            verdict=verdict,
            error_type=error_type,
            message="" if verdict == "pass" else f"{error_type} in the candidate",
            speedup=speedup if verdict == "pass" else None,
            geomean_us=100.0 / speedup if verdict == "pass" and speedup else None,
        ),
        kept=kept and verdict == "pass",
        best_of_run=best,
        origin="expert",
        identity=candidate_identity(f"# {task.name}", config),
        run_id=run_id,
    )


RMS_BEST = make_case(
    RMSNORM,
    "memory_bound",
    {"BLOCK_N": 4096, "num_warps": 8},
    "one row per program, the whole row in registers; 8 warps keep enough loads in flight",
    speedup=1.35,
    best=True,
)
RMS_FAIL = make_case(
    RMSNORM,
    "register_spills",
    {"BLOCK_N": 8192, "num_warps": 4},
    "bigger blocks to cover the row at once",
    verdict="fail",
    error_type="resource_limit",
    kept=False,
)
CASES = [
    RMS_BEST,
    RMS_FAIL,
    make_case(SOFTMAX, "memory_bound", {"BLOCK_N": 8192, "num_warps": 16}, "single-pass online softmax"),
    make_case(
        GQA,
        "low_parallelism",
        {"SPLIT_K": 8, "num_warps": 4},
        "split the KV sequence across programs to fill the SMs, then merge the partial softmax",
    ),
    make_case(
        MATMUL,
        "compute_bound",
        {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_stages": 4},
        "larger tiles and deeper pipelining keep the tensor cores busy",
    ),
    make_case(GELU, "memory_bound", {"BLOCK": 4096, "num_warps": 4}, "bigger blocks, fewer programs"),
]


@pytest.fixture(scope="session")
def embedding() -> MiniLMEmbedding:
    """The model loads once per test session (it is cached per process)."""
    return MiniLMEmbedding()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KERNEL_AGENT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def library(home: Path, embedding: MiniLMEmbedding) -> CaseLibrary:
    lib = CaseLibrary(home / "cases", embedding=embedding)
    assert lib.add(CASES) == len(CASES)
    return lib


def ids(hits: list[tuple[Case, float]]) -> list[str]:
    return [case.id for case, _ in hits]


def test_home_follows_the_environment(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert kernel_agent_home() == home
    monkeypatch.delenv("KERNEL_AGENT_HOME")
    assert kernel_agent_home() == Path.home() / ".cache" / "kernel-agent"


def test_layernorm_task_finds_the_rmsnorm_case_and_attention_does_not(library: CaseLibrary) -> None:
    layernorm = library.search_for_task(LAYERNORM_TASK, bottleneck="memory_bound", k=5)
    assert layernorm[0][0].task.name == "add_rmsnorm"
    assert [s for _, s in layernorm] == sorted((s for _, s in layernorm), reverse=True)
    assert all(0.0 <= s <= 1.0 for _, s in layernorm)

    attention = library.search_for_task(GQA_TASK, bottleneck="low_parallelism", k=5)
    assert attention[0][0].task.name == "gqa_decode"
    assert "add_rmsnorm" not in {c.task.name for c, _ in attention[:2]}
    # The same op scores clearly above the other ops.
    assert attention[0][1] > attention[1][1] + 0.1

    # Free text works too, without the task's structure.
    free = library.search("layer normalization of each token's hidden vector", k=3)
    assert free[0][0].task.name == "add_rmsnorm"


def test_filters_on_metadata(library: CaseLibrary) -> None:
    normalization = library.search("a fast kernel", k=10, where={"op_family": "normalization"})
    assert {c.task.name for c, _ in normalization} == {"add_rmsnorm"}
    kept_memory_bound = library.list(where={"kept": True, "bottleneck": "memory_bound"})
    assert {c.task.name for c in kept_memory_bound} == {"add_rmsnorm", "softmax", "gelu"}
    assert all(c.kept for c in kept_memory_bound)


def test_failures_come_back_flagged(library: CaseLibrary) -> None:
    retrieval = library.retrieve(RMSNORM.model_dump(), bottleneck="memory_bound", k=5)
    assert retrieval.avoid, "the failed RMSNorm candidate should be offered as a thing to avoid"
    failed = retrieval.avoid[0][0]
    assert failed.id == RMS_FAIL.id
    assert (failed.kept, failed.outcome.verdict, failed.outcome.error_type) == (
        False,
        "fail",
        "resource_limit",
    )
    assert failed.failed
    # Starting points are passing, kept cases only; the run's best of the same task comes first.
    assert retrieval.starting_points[0][0].id == RMS_BEST.id
    assert all(c.kept and not c.failed for c, _ in retrieval.starting_points)
    assert retrieval.confidence == max(s for _, s in retrieval.hits) > 0.8
    summary = retrieval.to_dicts()
    json.dumps(summary)  # JSON-plain for graph state and report.json
    assert {"id", "score", "config", "verdict", "error_type", "summary"} <= set(summary[0])


def test_add_deduplicates_by_task_and_identity(library: CaseLibrary) -> None:
    assert library.add(CASES) == 0
    again = RMS_BEST.model_copy(update={"run_id": "run-2"})
    other_task = RMS_BEST.model_copy(update={"task": TaskSignature(**LAYERNORM_TASK)})
    assert library.add([again, other_task, other_task]) == 1
    assert library.count() == len(CASES) + 1
    assert library.get(RMS_BEST.id).run_id == "run-1"


def test_a_stored_case_is_promoted_when_a_later_run_keeps_it(library: CaseLibrary) -> None:
    """A config first seen as a plain pass that became a later run's best must rank as a starting point;
    a later run that did not keep it takes nothing back."""
    softmax = CASES[2]
    assert library.get(softmax.id).best_of_run is False
    assert library.add([softmax.model_copy(update={"run_id": "run-2", "best_of_run": True})]) == 0
    promoted = library.get(softmax.id)
    assert promoted.best_of_run and promoted.kept and promoted.run_id == "run-2"
    assert {c.id for c in library.list(where={"best_of_run": True})} >= {softmax.id}
    library.add([softmax.model_copy(update={"run_id": "run-3", "kept": False, "best_of_run": False})])
    assert library.get(softmax.id).best_of_run is True
    # a stored failure (a flaky timeout) that a later run passed and kept: the passing result is stored
    passed = RMS_FAIL.model_copy(
        update={"outcome": RMS_BEST.outcome, "kept": True, "best_of_run": True, "run_id": "run-4"}
    )
    library.add([passed])
    now = library.get(RMS_FAIL.id)
    assert now.kept and not now.failed and now.outcome.verdict == "pass"


def test_export_import_round_trip(library: CaseLibrary, embedding: MiniLMEmbedding, tmp_path: Path) -> None:
    file = tmp_path / "cases.jsonl"
    assert library.export(file) == len(CASES)
    assert len(file.read_text().splitlines()) == len(CASES)
    fresh = CaseLibrary(tmp_path / "other", embedding=embedding)
    assert fresh.count() == 0
    assert fresh.import_(file) == len(CASES)
    assert fresh.import_(file) == 0
    before = {c.id: c.model_dump() for c in library.list()}
    after = {c.id: c.model_dump() for c in fresh.list()}
    assert after == before
    assert fresh.get(RMS_FAIL.id) == library.get(RMS_FAIL.id)


def test_store_persists_and_uses_our_embedding(library: CaseLibrary, embedding: MiniLMEmbedding) -> None:
    reopened = CaseLibrary(library.path, embedding=embedding)
    assert reopened.count() == len(CASES)
    config = reopened._collection.configuration_json
    assert config["embedding_function"]["name"] == "kernel_agent_minilm"
    assert config["hnsw"]["space"] == "cosine"


def test_case_from_attempt_reads_graph_records() -> None:
    source = "@triton.jit\ndef k(x): pass\n"
    candidate = {
        "source": source,
        "config": {"BLOCK_N": 1024},
        "rationale": "smaller block",
        "origin": "expert",
    }
    result = {
        "verdict": "pass",
        "stage": "done",
        "metrics": {"geomean_us": 50.0},
        "device": {"name": "NVIDIA H200", "triton": "3.6.0", "torch": "2.11.0", "interpreted": False},
    }
    case = case_from_attempt(
        task_signature=RMSNORM.model_dump(),
        candidate=candidate,
        result=result,
        kept=True,
        run_id="r",
        baseline_us=75.0,
        snapshot={
            "bottleneck": "memory_bound",
            "confidence": 0.9,
            "metrics": {"dram_pct": 83.6, "top_stalls": []},
        },
        module_source=source,
    )
    assert case.identity == candidate_identity(source, {"BLOCK_N": 1024})
    assert case.outcome.speedup == pytest.approx(1.5)
    assert case.change.new_source is False and case.change.source_digest
    assert case.snapshot.metrics == {"dram_pct": 83.6}
    assert case.task.op_family == "normalization"
    failed = case_from_attempt(
        task_signature=RMSNORM.model_dump(),
        candidate={**candidate, "source": source + "# changed\n"},
        result={"verdict": "fail", "stage": "compile", "error_type": "compile_error", "message": "boom"},
        kept=True,
        run_id="r",
        module_source=source,
    )
    assert (failed.kept, failed.outcome.error_type, failed.change.new_source) == (
        False,
        "compile_error",
        True,
    )


def test_case_from_the_graphs_attempt_record(tmp_path: Path) -> None:
    records = pytest.importorskip("nodes.records")
    from tools.candidate import Candidate
    from tools.results import DeviceInfo, EvalResult, Metrics

    candidate = Candidate(
        source="# multirow\n", config={"ROWS": 4}, rationale="r", origin="expert", module="m.py"
    )
    result = EvalResult(
        verdict="pass", stage="done", metrics=Metrics(geomean_us=40.0), device=DeviceInfo(name="cpu")
    )
    attempt = records.attempt_record(3, 1, candidate, "m.py", result)
    case = case_from_attempt(
        task_signature=RMSNORM.model_dump(),
        candidate=attempt,
        result=attempt,
        kept=True,
        run_id="r",
        baseline_us=80.0,
        source=candidate.source,
    )
    assert case.identity == candidate.identity and case.change.module == "m.py"
    assert (
        case.change.config == {"ROWS": 4} and case.change.source_path == f"candidates/{candidate.identity}.py"
    )
    assert case.outcome.speedup == pytest.approx(2.0) and case.outcome.interpreted and case.kept


def test_open_case_library_reports_a_missing_model(home: Path, tmp_path: Path) -> None:
    empty = tmp_path / "no-model"
    empty.mkdir()
    library, reason = open_case_library(model_path=empty)
    assert library is None
    assert reason is not None and reason.startswith("memory off:") and str(empty) in reason


def test_open_case_library_defaults_to_the_home(home: Path, embedding: MiniLMEmbedding) -> None:
    library, reason = open_case_library()
    assert reason is None and library is not None
    assert library.path == home / "cases"
    assert library.count() == 0


# -- command line ---------------------------------------------------------------------------------
def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KERNEL_AGENT_HOME": str(home), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "memory.cases", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli(library: CaseLibrary, home: Path, tmp_path: Path) -> None:
    listed = cli(home, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {c["id"] for c in json.loads(listed.stdout)} == {c.id for c in CASES}
    failures = cli(home, "list", "--failures")
    assert failures.returncode == 0 and RMS_FAIL.id in failures.stdout and RMS_BEST.id not in failures.stdout

    shown = cli(home, "show", RMS_FAIL.identity[:8], "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["outcome"]["error_type"] == "resource_limit"
    missing = cli(home, "show", "nope")
    assert missing.returncode == 2 and "no case" in missing.stderr

    file = tmp_path / "export.jsonl"
    exported = cli(home, "export", str(file))
    assert exported.returncode == 0 and f"exported {len(CASES)} cases" in exported.stdout

    other = tmp_path / "home2"
    imported = cli(other, "import", str(file))
    assert imported.returncode == 0, imported.stderr
    assert f"imported {len(CASES)} new cases" in imported.stdout
    searched = cli(other, "search", "LayerNorm over rows", "-k", "2", "--json")
    assert searched.returncode == 0, searched.stderr
    assert json.loads(searched.stdout)[0]["case"]["task"]["name"] == "add_rmsnorm"

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"not": "a case"}\n')
    rejected = cli(other, "import", str(bad))
    assert rejected.returncode == 2 and "bad.jsonl:1" in rejected.stderr
    absent = cli(other, "import", str(tmp_path / "absent.jsonl"))
    assert absent.returncode == 2 and "no such file" in absent.stderr
