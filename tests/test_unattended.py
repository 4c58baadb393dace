"""--unattended: the policy (loop/unattended.py) answers every pause; the graph with scripted agents
shows each answer taken, and the report lists every pause with its answer."""

from __future__ import annotations

import json

from graph_support import Run, ScriptedCritic, ScriptedEvaluator, ScriptedProposer, key, passed, prop

from loop.records import Attempt, Pause
from loop.roles import Critique, Proposed
from loop.unattended import policy_answer
from tools.results import EvalResult


def held(us: float) -> EvalResult:
    result = passed(us, interpreted=False)
    result.verdict, result.stage, result.error_type = "fail", "timing", "suspicious_speedup"
    result.message, result.details = "20.0x faster than the baseline: held for human review", {"held": "speedup"}
    return result


def unattended(run: Run) -> Run:
    run.context.unattended = True
    return run


def test_the_policy_stops_when_the_proposer_has_converged_or_nothing_was_evaluated_since_its_last_answer():
    converged = Proposed(reason="every config of the search space has been evaluated", converged=True)
    answer = policy_answer([], 4, [], converged)
    assert answer.answer == "stop" and answer.stop.status == "converged" and "every config" in answer.stop.reason
    earlier = [Pause(round=2, why="stall", answer="continue", by="policy", evaluated=4)]
    stuck = policy_answer(earlier, 4, [], Proposed())
    assert stuck.answer == "stop" and "nothing was evaluated since the last unattended answer" in stuck.why
    assert policy_answer(earlier, 6, [], Proposed()).answer == "continue"
    # a human's earlier answer is not the policy's: it does not count as "nothing new since"
    human = [Pause(round=2, why="stall", answer="continue", by="human", evaluated=4)]
    assert policy_answer(human, 4, [], Proposed()).answer == "continue"
    one = Attempt(n=3, round=1, identity="h", module="baseline.py", held="speedup")
    assert "#3 held for review stay failures" in policy_answer([], 4, [one], Proposed()).why


def test_a_stall_is_answered_continue_and_the_run_goes_on_to_its_budget(tmp_path):
    # the policy asks the proposer too (has it converged?): every call gets a fresh config
    proposer = ScriptedProposer([[prop(64, w)] for w in (1, 2, 4, 8, 16)])
    run = unattended(Run(tmp_path, proposer, evaluator=ScriptedEvaluator(default=passed(150.0)),
                         budget={"candidates_per_round": 1, "rounds": 3}, routing={"stall_rounds": 1})).start()  # fmt: skip
    assert run.question is None and run.state["stop"]["status"] == "budget_exhausted"
    assert [(p["round"], p["by"]) for p in run.state["pauses"]] == [(1, "policy"), (2, "policy")]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert [p["answer"] for p in report["pauses"]] == [
        "continue (unattended: the search goes on inside the space, restarting on the plateau)"
    ] * 2
    assert "- after round 1: stall: no improvement" in (tmp_path / "run" / "report.md").read_text()


def test_held_candidates_stay_failures_and_do_not_ask_again(tmp_path):
    proposer = ScriptedProposer([[prop(256, 4)], [prop(64, 1)], [prop(64, 2)], [prop(64, 4)]])
    evaluator = ScriptedEvaluator({key({"BLOCK": 256, "num_warps": 4}): held(5.0)}, default=passed(100.0, False))
    run = unattended(Run(tmp_path, proposer, evaluator=evaluator, budget={"candidates_per_round": 1, "rounds": 3})).start()
    state = run.state
    assert state["best"]["n"] == 0 and not state.get("approved") and state["stop"]["status"] == "budget_exhausted"
    assert [p["answer"] for p in state["pauses"]] == ["continue (unattended: #1 held for review stay failures)"]


def test_a_critic_that_rejects_everything_twice_over_ends_the_run_instead_of_looping(tmp_path):
    no = [Critique(verdict="reject", objections=["never"])]
    critic = ScriptedCritic([no] * 12)
    proposer = ScriptedProposer([[prop(64, 1)]] * 12)
    run = unattended(Run(tmp_path, proposer, critic=critic, critic_rounds=0,
                         budget={"candidates_per_round": 1, "rounds": 3})).start()  # fmt: skip
    stop = run.state["stop"]
    assert stop["status"] == "converged" and "nothing was evaluated since the last unattended answer" in stop["reason"]
    assert [p["answer"].split(" ")[0] for p in run.state["pauses"]] == ["continue", "stop"]
