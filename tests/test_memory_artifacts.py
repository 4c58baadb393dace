"""Run-folder index: candidates found by identity, the best re-evaluated by the real evaluator CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memory.artifacts import ArtifactError, find_candidate, index_run, main, reeval_command
from tools.candidate import candidate_identity

REPO = Path(__file__).resolve().parents[1]
RMSNORM = REPO / "tasks" / "add_rmsnorm"


def write_candidate(
    run: Path, source: str, config: dict, *, module: str | None = "baseline.py", result: dict | None = None
) -> str:
    identity = candidate_identity(source, config)
    (run / "candidates").mkdir(parents=True, exist_ok=True)
    (run / "results").mkdir(exist_ok=True)
    (run / "candidates" / f"{identity}.py").write_text(source)
    if module is not None:
        record = {"config": config, "module": module, "origin": "expert", "rationale": "test"}
        (run / "candidates" / f"{identity}.json").write_text(json.dumps(record))
    if result is not None:
        (run / "results" / f"{identity}.json").write_text(json.dumps(result))
    return identity


def passed(us: float) -> dict:
    return {"verdict": "pass", "stage": "done", "metrics": {"geomean_us": us}}


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    run = tmp_path / "run"
    ids = {
        "slow": write_candidate(run, "# a\n", {"ROWS": 1}, result=passed(20.0)),
        "fast": write_candidate(run, "# a\n", {"ROWS": 2}, result=passed(10.0)),
        "broken": write_candidate(
            run,
            "# b\n",
            {"ROWS": 4},
            result={"verdict": "fail", "stage": "compile", "error_type": "compile_error"},
        ),
        # No record file: its config comes from report.json's attempts.
        "from_report": write_candidate(run, "# c\n", {"ROWS": 8}, module=None),
    }
    report = {
        "task": str(RMSNORM),
        "status": "budget_exhausted",
        "attempts": [
            {"candidate": f"candidates/{ids['from_report']}.py", "config": {"ROWS": 8}, "verdict": "pass"}
        ],
    }
    (run / "report.json").write_text(json.dumps(report))
    return run, ids


def test_index_lists_every_candidate(run: tuple[Path, dict[str, str]]) -> None:
    folder, ids = run
    index = index_run(folder)
    assert json.loads((folder / "index.json").read_text()) == index
    entries = {e["identity"]: e for e in index["candidates"]}
    assert set(entries) == set(ids.values())
    fast = entries[ids["fast"]]
    assert fast["source"] == f"candidates/{ids['fast']}.py"
    assert fast["result"] == f"results/{ids['fast']}.json"
    assert (fast["config"], fast["verdict"], fast["geomean_us"], fast["module"]) == (
        {"ROWS": 2},
        "pass",
        10.0,
        "baseline.py",
    )
    assert entries[ids["broken"]]["error_type"] == "compile_error"
    assert entries[ids["from_report"]]["config"] == {"ROWS": 8}
    assert entries[ids["from_report"]]["result"] is None
    # Without a best in report.json, the fastest pass is the best.
    assert index["best"] == ids["fast"] and index["task"] == str(RMSNORM)


def test_report_best_wins_and_prefixes_resolve(run: tuple[Path, dict[str, str]]) -> None:
    folder, ids = run
    report = json.loads((folder / "report.json").read_text())
    report["best"] = {"candidate": f"candidates/{ids['slow']}.py", "geomean_us": 20.0, "config": {"ROWS": 1}}
    (folder / "report.json").write_text(json.dumps(report))
    assert find_candidate(folder, "best")["identity"] == ids["slow"]
    assert find_candidate(folder, ids["broken"][:6])["identity"] == ids["broken"]
    with pytest.raises(ArtifactError, match="no candidate"):
        find_candidate(folder, "zzzz")
    with pytest.raises(ArtifactError, match="matches 4 candidates"):
        find_candidate(folder, "")
    with pytest.raises(ArtifactError, match="not a run folder"):
        index_run(folder / "candidates")


def test_reeval_command_follows_the_evaluator_contract(run: tuple[Path, dict[str, str]]) -> None:
    folder, ids = run
    entry = find_candidate(folder, ids["fast"])
    command = reeval_command(folder, entry, device="cpu")
    assert command[:4] == [sys.executable, "-m", "tools.evaluate", str(RMSNORM)]
    assert command[4] == str((folder / entry["source"]).resolve())
    assert json.loads(command[command.index("--config") + 1]) == {"ROWS": 2}
    assert "--json" in command and command[command.index("--device") + 1] == "cpu"
    assert command[command.index("--module") + 1] == "baseline.py"


def test_show_prints_the_table(
    run: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, ids = run
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["show", str(folder)]) == 0
    printed = capsys.readouterr().out
    assert ids["fast"] in printed and "compile_error" in printed and "4 candidates" in printed
    assert main(["reeval", str(folder / "nowhere")]) == 2


def test_a_piped_table_is_not_cut_to_80_columns(run: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    folder, ids = run
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run([sys.executable, "-m", "memory.artifacts", "show", str(folder)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert all(identity in done.stdout for identity in ids.values()) and "…" not in done.stdout
    assert str(folder) in done.stdout  # the title too


@pytest.mark.slow
def test_reeval_runs_the_evaluator_on_the_best(tmp_path: Path) -> None:
    if not (REPO / "tools" / "evaluate.py").is_file() or not RMSNORM.is_dir():
        pytest.skip("needs tools/evaluate.py and tasks/add_rmsnorm")
    folder = tmp_path / "run"
    config = {"ROWS": 2, "num_warps": 4, "num_stages": 1}
    identity = write_candidate(folder, (RMSNORM / "baseline.py").read_text(), config, result=passed(5.0))
    (folder / "report.json").write_text(json.dumps({"task": str(RMSNORM), "best": {"identity": identity}}))
    command = ["reeval", str(folder), "best", "--device", "cpu", "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "memory.artifacts", *command],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr  # pass or rejected: either way a verdict came back
    result = json.loads(done.stdout)
    assert result["verdict"] in ("pass", "fail") and result["device"]["interpreted"] is True
    # The evaluator saw exactly the stored source and config.
    assert result["identity"] == identity
    assert len(list((folder / "reevals").glob(f"{identity}-cpu-*.json"))) == 1
