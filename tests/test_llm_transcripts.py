"""Recorded chat-model transcripts driving the real graph and the REAL evaluator on add_rmsnorm (CPU,
Triton interpreter): model-written source is a candidate like any other.

(a) the proposer writes a multi-row Triton variant that passes;
(b) its first source does not compile; the full log goes back in fix mode and the fix passes;
(c) the critic sends an out-of-space config back and the proposer revises it, answering the objection.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from graph_support import Run

from nodes.agents import build_agents
from tools.evaluate import evaluate_many

REPO = Path(__file__).parent.parent
TASK = REPO / "tasks" / "add_rmsnorm"
TRANSCRIPTS = REPO / "tests" / "fixtures" / "transcripts"
ROWS_SOURCE = (TRANSCRIPTS / "add_rmsnorm_rows.py").read_text()


def run_transcript(tmp_path: Path, name: str, rounds: int, candidates: int = 2) -> tuple[Run, tuple]:
    spec = f"scripted:{TRANSCRIPTS / name}"
    diagnoser, proposer, critic = agents = build_agents(spec, None, {})
    # The transcripts pin what the model wrote; the search's filling of a round is tested in test_graph.py.
    run = Run(tmp_path, proposer, critic, evaluate_many, diagnoser, search={"fill_llm_rounds": False},
              budget={"rounds": rounds, "candidates_per_round": candidates})  # fmt: skip
    run.inputs["task"] = str(TASK)
    run.inputs["model"] = spec
    return run.start(), agents


def prompts(role) -> list[str]:
    return ["\n".join(str(m.content) for m in prompt) for prompt in role.model.prompts]


def report(run: Run) -> dict:
    return json.loads((Path(run.inputs["run_dir"]) / "report.json").read_text())


@pytest.mark.slow
def test_a_model_written_multirow_variant_passes_the_real_evaluator(tmp_path):
    run, (diagnoser, proposer, critic) = run_transcript(tmp_path, "add_rmsnorm_rows.json", rounds=1)
    attempts = run.state["attempts"]
    written = [a for a in attempts if a["origin"].startswith("llm:")]
    assert [a["config"] for a in written] == [{"ROWS": 2, "num_warps": 16}, {"ROWS": 4, "num_warps": 16}]
    assert all(a["verdict"] == "pass" for a in written), [(a["error_type"], a["message"]) for a in written]
    run_dir = Path(run.inputs["run_dir"])
    assert all((run_dir / a["candidate"]).read_text() == ROWS_SOURCE for a in written)
    assert report(run)["status"] == "budget_exhausted"
    # the diagnoser read the derived profile of the baseline; the critic saw the new kernel
    assert "bottleneck:" in prompts(diagnoser)[0]
    assert "add_rmsnorm_rows_kernel" in prompts(critic)[0]
    assert "SECRET" not in "".join(prompts(critic)) and "keeps ROWS rows of loads" not in prompts(critic)[0]
    assert proposer.usage()["calls"] == 1 and critic.usage()["calls"] == 2


@pytest.mark.slow
def test_a_compile_error_comes_back_with_its_full_log_and_the_fix_passes(tmp_path):
    run, (_, proposer, _) = run_transcript(tmp_path, "add_rmsnorm_fix.json", rounds=2, candidates=1)
    attempts = run.state["attempts"]
    broken, fixed = attempts[1], attempts[2]
    assert (broken["verdict"], broken["error_type"]) == ("fail", "syntax_error")
    assert fixed["verdict"] == "pass" and fixed["rationale"].startswith("fix:")
    assert ("evaluate", "propose") in run.edges()
    fix_route = [r for r in run.routes if r["source"] == "evaluate"][0]
    assert fix_route["mode"] == "fix"

    log = json.loads((Path(run.inputs["run_dir"]) / broken["result"]).read_text())["log"]
    assert log and "never closed" in log
    first, second = prompts(proposer)
    assert "Mode: explore" in first and "Mode: fix" in second
    assert log in second  # the evaluator's log, verbatim and whole
    assert "tl.rsqrt(tl.sum(hf * hf, axis=1) / N + eps\n" in second  # its own failing source


@pytest.mark.slow
def test_the_critic_sends_an_out_of_space_config_back_and_the_revision_answers_it(tmp_path):
    run, (_, proposer, critic) = run_transcript(tmp_path, "add_rmsnorm_revise.json", rounds=1)
    attempts = run.state["attempts"]
    assert [a["config"] for a in attempts[1:]] == [{"ROWS": 4, "num_warps": 4}]
    revised = attempts[1]
    assert revised["verdict"] == "pass"
    assert revised["answers"] == ["accept: ROWS=3 is not in the space; ROWS=4 is the nearest allowed value"]
    assert revised["objections"][0] == "ROWS=3 is not an allowed value; pick one of 1, 2, 4, 8"
    entry = next(a for a in report(run)["attempts"] if a["n"] == revised["n"])
    assert entry["critique"]["answers"] == revised["answers"]

    first_review, _ = prompts(critic)
    assert "FAILED: ROWS=3 is outside the search space" in first_review and "SECRET-CHAIN" not in first_review
    revise_prompt = prompts(proposer)[1]
    assert "Mode: revise" in revise_prompt and "1. ROWS=3 is not an allowed value" in revise_prompt
    trail = (Path(run.inputs["run_dir"]) / "log.jsonl").read_text()
    assert "answers: accept: ROWS=3 is not in the space" in trail
