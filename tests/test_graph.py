"""The graph end to end with scripted agents: every edge of loop/routes.py, and what the next node got.

A scripted evaluator answers from a table (tests/graph_support.py) so each route is reached in a
second; the real evaluator runs in tests/test_graph_cli.py, tests/test_resume.py and tests/test_studio.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from graph_support import (
    AXPY,
    BASELINE_CONFIG,
    COMPILE_LOG,
    Run,
    ScriptedCritic,
    ScriptedEvaluator,
    ScriptedProposer,
    failed,
    key,
    passed,
    prop,
)

from loop.records import Attempt
from loop.roles import Critique
from loop.state import RunState
from nodes.expert import ExpertCritic
from nodes.runtime import run_task
from tools.results import EvalResult
from tools.task import load_task


def cfg(block: int, warps: int) -> str:
    return key({"BLOCK": block, "num_warps": warps})


def axpy_with(tmp_path: Path, **changes) -> Path:
    """A copy of the axpy fixture task with task.json fields replaced."""
    folder = tmp_path / "axpy"
    folder.mkdir()
    for f in AXPY.iterdir():
        if f.is_file():
            (folder / f.name).write_text(f.read_text())
    spec = json.loads((AXPY / "task.json").read_text())
    spec.update(changes)
    (folder / "task.json").write_text(json.dumps(spec))
    return folder


def one_per_round(**budget) -> dict:
    return {"budget": {"candidates_per_round": 1, **budget}}


def test_compile_failure_goes_back_to_propose_in_fix_mode_with_the_full_log(tmp_path):
    proposer = ScriptedProposer([[prop(64, 1)], [prop(256, 4)]])
    evaluator = ScriptedEvaluator({cfg(64, 1): failed("compile_error", log=COMPILE_LOG)})
    run = Run(tmp_path, proposer, evaluator=evaluator, **one_per_round(rounds=2)).start()
    assert run.nodes == [
        "setup",
        "diagnose",
        "propose",
        "critic",
        "evaluate",
        "propose",
        "critic",
        "evaluate",
        "report",
    ]
    assert ("evaluate", "propose") in run.edges()
    fix = proposer.calls[1]
    assert fix.mode == "fix"
    assert fix.last_failure["log"] == COMPILE_LOG  # verbatim, every line
    assert fix.last_failure["error_type"] == "compile_error"
    assert run.state["stop"]["status"] == "budget_exhausted"


def test_critic_revise_loops_back_with_the_objections_and_the_answers_are_kept(tmp_path):
    objections = ["resources: too many registers", "rationale: say why"]
    critic = ScriptedCritic([[Critique(verdict="revise", objections=objections)]])
    revised = prop(128, 1, answers=["BLOCK 256->128", "fewer registers per thread"], revises=0)
    proposer = ScriptedProposer([[prop(256, 1)], [revised]])
    evaluator = ScriptedEvaluator()
    run = Run(tmp_path, proposer, critic, evaluator, **one_per_round(rounds=1)).start()
    assert run.nodes == ["setup", "diagnose", "propose", "critic", "propose", "critic", "evaluate", "report"]
    again = proposer.calls[1]
    assert again.mode == "revise"
    assert again.objections == objections
    assert again.revise[0]["proposal"]["config"] == {"BLOCK": 256, "num_warps": 1}
    assert evaluator.evaluated[-1] == {"BLOCK": 128, "num_warps": 1}
    last = run.state["attempts"][-1]
    assert last["objections"] == objections and last["answers"] == revised.answers


def test_a_revision_that_leaves_an_objection_unanswered_is_dropped(tmp_path):
    critic = ScriptedCritic([[Critique(verdict="revise", objections=["resources: a", "rationale: b"])]])
    proposer = ScriptedProposer(
        [[prop(256, 1)], [prop(128, 1, answers=["only one"], revises=0)], [prop(64, 4)]]
    )
    evaluator = ScriptedEvaluator()
    run = Run(tmp_path, proposer, critic, evaluator, **one_per_round(rounds=1)).start()
    assert {"BLOCK": 128, "num_warps": 1} not in evaluator.evaluated
    dropped = run.state["rejected"][0]
    assert dropped["proposal"]["config"] == {"BLOCK": 128, "num_warps": 1}
    assert "unanswered" in dropped["objections"][-1]


def test_three_compile_failures_in_a_row_reflect_before_proposing_again(tmp_path):
    proposer = ScriptedProposer([[prop(64, 1)], [prop(64, 2)], [prop(256, 1)], [prop(256, 2)]])
    evaluator = ScriptedEvaluator({
        cfg(64, 1): failed("syntax_error", "static"),
        cfg(64, 2): failed("compile_error"),
        cfg(256, 1): failed("resource_limit"),
    })  # fmt: skip
    run = Run(tmp_path, proposer, evaluator=evaluator, **one_per_round(rounds=4)).start()
    assert run.edges().count(("evaluate", "propose")) == 2
    assert ("evaluate", "reflect") in run.edges() and ("reflect", "propose") in run.edges()
    reflecting = proposer.calls[3]
    assert reflecting.mode == "reflect"
    for error in ("syntax_error", "compile_error", "resource_limit"):
        assert error in reflecting.reflection
    assert "log of resource_limit" in reflecting.reflection  # the failure's own log is re-read
    assert run.state["reflection"] == ""  # consumed by that proposal


def test_the_same_error_twice_reflects_and_three_times_asks_the_human_who_stops(tmp_path):
    proposer = ScriptedProposer([[prop(64, 1)], [prop(64, 2)], [prop(64, 4)]])
    mismatch = failed("mismatch", "correctness")
    evaluator = ScriptedEvaluator(default=mismatch)
    run = Run(tmp_path, proposer, evaluator=evaluator, **one_per_round(rounds=6)).start()
    assert [e for e in run.edges() if e[0] == "evaluate"] == [
        ("evaluate", "diagnose"),
        ("evaluate", "reflect"),
        ("evaluate", "human"),
    ]
    q = run.question
    assert "mismatch 3 rounds in a row" in q["summary"]["why"]
    assert [e["error_type"] for e in q["summary"]["last_errors"]] == ["mismatch"] * 3
    assert json.loads((tmp_path / "run" / "report.json").read_text())["status"] == "awaiting_human"
    run.answer("stop")
    assert run.nodes[-2:] == ["human", "report"]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["status"] == "stopped_by_human"


def test_three_failed_validations_of_different_kinds_ask_the_human(tmp_path):
    proposer = ScriptedProposer([[prop(64, 1)], [prop(64, 2)], [prop(64, 4)]])
    evaluator = ScriptedEvaluator({
        cfg(64, 1): failed("mismatch", "correctness"),
        cfg(64, 2): failed("nan", "correctness"),
        cfg(64, 4): failed("input_modified", "correctness"),
    })  # fmt: skip
    run = Run(tmp_path, proposer, evaluator=evaluator, **one_per_round(rounds=6)).start()
    assert run.edges()[-1] == ("evaluate", "human")
    assert "3 failed validations in a row" in run.question["summary"]["why"]


def test_a_stall_asks_the_human_and_continue_resumes_the_search(tmp_path):
    proposer = ScriptedProposer([[prop(64, 1)], [prop(64, 2)], [prop(64, 4)], [prop(256, 1)]])
    evaluator = ScriptedEvaluator(default=passed(150.0))  # slower than the 100 us baseline
    run = Run(tmp_path, proposer, evaluator=evaluator, **one_per_round(rounds=4)).start()
    assert run.edges()[-1] == ("evaluate", "human") and "stall" in run.question["summary"]["why"]
    run.answer("continue")
    assert run.nodes.index("human") < len(run.nodes) - 1 and ("human", "diagnose") in run.edges()
    assert run.state["streaks"]["no_improvement"] == 1  # reset by the human, one more round since
    assert run.state["stop"]["status"] == "budget_exhausted"
    assert evaluator.evaluated[-1] == {"BLOCK": 256, "num_warps": 1}


def test_no_stall_while_the_per_shape_table_improves_though_the_single_best_does_not(tmp_path):
    """Each candidate wins one shape and loses the other (geomean never below the baseline's): the
    single best stays the baseline, but the table of each shape's fastest config gets faster every
    round, so the run is not stalled and spends its budget instead of asking the human."""
    shapes = [{"M": 1, "N": 300}, {"M": 4, "N": 300}]
    task = axpy_with(tmp_path, shapes=shapes)

    def two_shapes(us_m1: float, us_m4: float) -> EvalResult:
        result = passed(us_m4)
        row = result.metrics.per_shape[0]
        result.metrics.per_shape = [row.model_copy(update={"shape": shapes[0], "median_us": us_m1}), row]
        result.metrics.geomean_us = (us_m1 * us_m4) ** 0.5
        return result

    proposer = ScriptedProposer([[prop(64, 1)], [prop(64, 2)], [prop(64, 4)], [prop(256, 1)]])
    evaluator = ScriptedEvaluator({
        key(BASELINE_CONFIG): two_shapes(100.0, 100.0),
        cfg(64, 1): two_shapes(50.0, 200.0), cfg(64, 2): two_shapes(200.0, 50.0),
        cfg(64, 4): two_shapes(40.0, 250.0), cfg(256, 1): two_shapes(250.0, 40.0),
    })  # fmt: skip
    run = Run(tmp_path, proposer, evaluator=evaluator, **one_per_round(rounds=4))
    run.inputs["task"] = str(task)
    run.start()
    assert "human" not in run.nodes
    assert run.state["best"]["origin"] == "baseline"  # no single config beat it
    assert run.state["stop"]["status"] == "budget_exhausted"
    assert run.state["streaks"]["no_improvement"] == 0
    assert [round(p["table_us"], 1) for p in run.state["progress"]] == [100.0, 70.7, 50.0, 44.7, 40.0]


def test_target_met_ends_the_run(tmp_path):
    task = axpy_with(tmp_path, target={"speedup": 1.5})
    proposer = ScriptedProposer([[prop(256, 4)]])
    evaluator = ScriptedEvaluator(
        {cfg(256, 4): passed(50.0, interpreted=False)}, default=passed(100.0, False)
    )
    run = Run(tmp_path, proposer, evaluator=evaluator, **one_per_round(rounds=5))
    run.inputs["task"] = str(task)
    run.start()
    assert run.nodes[-2:] == ["evaluate", "report"]
    assert run.state["stop"]["status"] == "target_met"
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["status"] == "target_met" and report["speedup"] == 2.0


def test_a_roofline_target_is_judged_at_min_dims_and_the_report_says_where(tmp_path):
    shapes = [{"M": 1, "N": 300}, {"M": 4, "N": 300}]
    task = axpy_with(tmp_path, shapes=shapes, target={"roofline_pct": 90, "min_dims": {"M": 4}})

    def gpu_result(us: float, pct_m4: float) -> EvalResult:
        result = passed(us, interpreted=False, roofline_pct=pct_m4)
        small = result.metrics.per_shape[0].model_copy(update={"shape": shapes[0], "roofline_pct": 5.0})
        result.metrics.per_shape = [small, result.metrics.per_shape[0]]
        return result

    proposer = ScriptedProposer([[prop(256, 4)], [prop(64, 1)]])
    evaluator = ScriptedEvaluator(
        {cfg(256, 4): gpu_result(80.0, 88.0), cfg(64, 1): gpu_result(60.0, 93.0)},
        default=passed(100.0, False),
    )
    run = Run(tmp_path, proposer, evaluator=evaluator, **one_per_round(rounds=5))
    run.inputs["task"] = str(task)
    run.start()
    # 88% at M=4 is not the target; 93% is, although M=1 (not judged) sits at 5%
    assert [a["roofline_pct"] for a in run.state["attempts"][1:]] == [88.0, 93.0]
    assert run.state["stop"] == {
        "status": "target_met",
        "reason": "93.0% of the copy bandwidth at the lowest judged shape (M >= 4) >= target 90%",
    }
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["target"]["judged_at"] == "M >= 4"
    assert (
        "- target: 90% of the same-size ceiling at every judged shape, judged at M >= 4 (M=4 N=300; the lowest counts)"
        in (tmp_path / "run" / "report.md").read_text()
    )


def test_a_task_without_min_dims_meets_its_roofline_target_at_each_sizes_ceiling(tmp_path):
    """M=1 reads a few % of the copy bandwidth, as does a copy of its bytes: at its own ceiling it is
    judged done; report.md shows both figures for every shape."""
    shapes = [{"M": 1, "N": 300}, {"M": 4, "N": 300}]
    task = axpy_with(tmp_path, shapes=shapes, target={"roofline_pct": 90})

    def gpu_result(us: float, ceiling_small: float) -> EvalResult:
        result = passed(us, interpreted=False, roofline_pct=95.0)
        large = result.metrics.per_shape[0].model_copy(update={"ceiling_pct": 97.0})
        small = large.model_copy(update={"shape": shapes[0], "roofline_pct": 3.0, "ceiling_pct": ceiling_small})  # fmt: skip
        result.metrics.per_shape = [small, large]
        return result

    proposer = ScriptedProposer([[prop(256, 4)], [prop(64, 1)]])
    evaluator = ScriptedEvaluator(
        {cfg(256, 4): gpu_result(80.0, 70.0), cfg(64, 1): gpu_result(60.0, 92.5)},
        default=passed(100.0, False),
    )
    run = Run(tmp_path, proposer, evaluator=evaluator, **one_per_round(rounds=5))
    run.inputs["task"] = str(task)
    run.start()
    assert [a["roofline_pct"] for a in run.state["attempts"][1:]] == [70.0, 92.5]
    assert run.state["stop"] == {
        "status": "target_met",
        "reason": "92.5% of the same-size ceiling at the lowest judged shape (all shapes) >= target 90%",
    }
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    pcts = [(r["best_roofline_pct"], r["best_ceiling_pct"]) for r in report["per_shape"]]
    assert pcts == [(3.0, 92.5), (95.0, 97.0)]
    md = (tmp_path / "run" / "report.md").read_text()
    assert "| best % of copy bandwidth | best % of same-size ceiling |" in md
    assert "| M=1 N=300 | float32 | - | 60.00 | - | 3800 | 3.0 | 92.5 |" in md


def test_a_converged_proposer_ends_the_run_and_an_empty_one_asks_the_human(tmp_path):
    converged = ScriptedProposer([[]])
    converged.converged, converged.last_reason = True, "memory_bound at the roofline"
    run = Run(tmp_path / "a", converged).start()
    assert run.nodes == ["setup", "diagnose", "propose", "report"]
    assert run.state["stop"] == {"status": "converged", "reason": "memory_bound at the roofline"}

    empty = ScriptedProposer([[]])
    empty.last_reason = "every config was evaluated"
    run = Run(tmp_path / "b", empty).start()
    assert run.nodes == ["setup", "diagnose", "propose"] and run.edges()[-1] == ("propose", "human")
    assert "every config was evaluated" in run.question["summary"]["why"]


def test_when_the_critic_rejects_everything_the_human_is_asked(tmp_path):
    reject = [Critique(verdict="reject", objections=["space: no"])]
    critic = ScriptedCritic([reject, reject])
    proposer = ScriptedProposer([[prop(64, 1)], [prop(64, 2)]])
    run = Run(tmp_path, proposer, critic, critic_rounds=1).start()
    assert run.nodes == ["setup", "diagnose", "propose", "critic", "propose", "critic"]
    assert run.edges()[-1] == ("critic", "human") and run.question is not None
    assert proposer.calls[1].objections == ["space: no"]  # the rejection reasons travel along
    assert len(run.state["rejected"]) == 2


def paused(tmp_path: Path, **kw) -> Run:
    """A run paused at the human: the proposer has nothing to propose."""
    empty = ScriptedProposer([[]])
    empty.last_reason = "nothing left"
    return Run(tmp_path, empty, **kw).start()


def test_human_widen_and_constrain_change_what_the_evaluator_accepts(tmp_path):
    run = paused(tmp_path)
    run.proposer.script = [[]]
    run.answer("widen num_warps=8,16")
    assert ("human", "diagnose") in run.edges()
    state = run.state
    assert state["search_spaces"]["baseline.py"]["num_warps"] == [1, 2, 4, 8, 16]
    assert run_task(RunState.model_validate(state)).config_problems({"BLOCK": 128, "num_warps": 16}) == []
    assert run.proposer.calls[-1].search_spaces["baseline.py"]["num_warps"][-1] == 16

    run.proposer.script = [[]]
    run.answer("constrain forbid=tl.sum BLOCK=64,128")
    state = run.state
    assert state["search_spaces"]["baseline.py"]["BLOCK"] == [64, 128]
    task = run_task(RunState.model_validate(state))
    assert "tl.sum" in task.spec.constraints.forbid
    assert task.config_problems({"BLOCK": 256, "num_warps": 4})


def test_a_bad_answer_is_asked_again_with_the_reason(tmp_path):
    run = paused(tmp_path)
    run.answer("widen nosuchkey=3")
    assert "unknown search-space key" in run.question["error"]
    run.answer("stop")
    assert run.state["stop"]["status"] == "stopped_by_human"


def test_a_human_candidate_goes_through_the_critic_and_the_evaluator(tmp_path):
    good = tmp_path / "mine.py"
    good.write_text((AXPY / "baseline.py").read_text().replace("a * x + y", "y + a * x"))
    evaluator = ScriptedEvaluator({cfg(256, 2): passed(40.0)})
    run = paused(tmp_path, evaluator=evaluator)
    run.critic = ExpertCritic()
    run.context.agents = (run.diagnoser, run.proposer, run.critic)
    run.proposer.script = [[]]
    run.answer(f'candidate {good} {{"BLOCK": 256, "num_warps": 2}}')
    assert ("human", "critic") in run.edges() and ("critic", "evaluate") in run.edges()
    mine = run.state["attempts"][-1]
    assert mine["origin"] == "human" and mine["verdict"] == "pass"
    assert evaluator.calls[-1][0].source == good.read_text()
    assert run.state["best"]["identity"] == mine["identity"]

    # A construct the human forbade is caught by the critic before anything runs.
    run.proposer.script = [[]]
    run.answer("constrain forbid=tl.atomic_add")
    bad = tmp_path / "bad.py"
    bad.write_text(good.read_text().replace("tl.store(", "tl.atomic_add("))
    evaluated = len(evaluator.evaluated)
    run.answer(f"candidate {bad}")
    assert run.edges()[-1] == ("critic", "human") and len(evaluator.evaluated) == evaluated
    assert (
        "forbidden: " in run.question["summary"]["why"] and "tl.atomic_add" in run.question["summary"]["why"]
    )


def test_the_drawn_graph_shows_every_edge_of_the_router_table():
    from graph.builder import graph

    mermaid = graph.get_graph().draw_mermaid()
    conditional = [
        ("evaluate", "report"), ("evaluate", "propose"), ("evaluate", "reflect"), ("evaluate", "human"),
        ("evaluate", "diagnose"), ("critic", "propose"), ("critic", "evaluate"), ("critic", "human"),
        ("propose", "critic"), ("propose", "human"), ("propose", "report"), ("human", "diagnose"),
        ("human", "critic"), ("human", "report"),
    ]  # fmt: skip
    fixed = [("setup", "diagnose"), ("diagnose", "propose"), ("reflect", "propose"), ("report", "__end__")]
    for a, b in conditional:
        assert f"{a} -.-> {b};" in mermaid
    for a, b in fixed:
        assert f"{a} --> {b};" in mermaid


def test_a_model_that_proposes_less_than_a_round_gets_the_search_to_fill_it(tmp_path):
    """A model proposing one idea per explore round still explores: the search strategy fills the rest
    of the round (origin "search"), never duplicating the model's candidate; the expert policy's own
    rounds and a model's fix rounds are left alone."""
    proposer = ScriptedProposer([[prop(64, 1)], [prop(256, 4)]])
    run = Run(tmp_path, proposer, budget={"rounds": 2, "candidates_per_round": 3})
    run.inputs["model"] = "scripted:one-idea-per-round"
    run.start()
    attempts = [a for a in run.state["attempts"] if a["origin"] != "baseline"]
    assert [len([a for a in attempts if a["round"] == r]) for r in (1, 2)] == [3, 3]
    by_origin = {r: sorted(a["origin"].split(":")[0] for a in attempts if a["round"] == r) for r in (1, 2)}
    assert by_origin == {1: ["llm", "search", "search"], 2: ["llm", "search", "search"]}
    assert len({a["identity"] for a in attempts}) == len(attempts)

    expert_run = Run(
        tmp_path / "expert",
        ScriptedProposer([[prop(64, 1)]]),
        budget={"rounds": 1, "candidates_per_round": 3},
    )
    expert_run.start()
    assert len([a for a in expert_run.state["attempts"] if a["origin"] != "baseline"]) == 1


def _held(us: float, held: str = "speedup") -> EvalResult:
    """What the evaluator returns for a candidate > 10x the baseline (or beyond the roofline): timed,
    correct, and held for review."""
    result = passed(us, interpreted=False)
    result.verdict, result.stage, result.error_type = "fail", "timing", "suspicious_speedup"
    result.message = f"{100.0 / us:.1f}x faster than the baseline: held for human review"
    result.details = {"held": held}
    return result


def test_a_held_speedup_asks_the_human_and_counts_only_once_approved(tmp_path):
    proposer = ScriptedProposer([[prop(256, 4)], [prop(64, 1)], [prop(64, 2)]])
    evaluator = ScriptedEvaluator(
        {cfg(256, 4): _held(5.0), cfg(64, 1): passed(80.0, False)}, default=passed(100.0, False)
    )
    run = Run(tmp_path, proposer, evaluator=evaluator, **one_per_round(rounds=3)).start()
    assert run.edges()[-1] == ("evaluate", "human")
    question = run.question
    assert "held for review: #1 (20.0x the baseline)" in question["summary"]["why"]
    assert [h["n"] for h in question["summary"]["held"]] == [1]
    assert run.state["best"]["n"] == 0  # held: not a result until approved

    run.answer("approve 0")  # the baseline was never held
    assert "was not held for review" in run.question["error"]
    run.answer("approve #1")
    best = run.state["best"]
    assert best["n"] == 1 and best["approved_by"] == "human" and best["verdict"] == "pass"
    assert run.state["approved"] == [1] and ("human", "diagnose") in run.edges()
    # the run went on; the approved candidate stayed the best and did not ask again
    assert run.state["stop"]["status"] == "budget_exhausted"
    assert run.nodes.count("human") == 1
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["speedup"] == 20.0 and report["best"]["approved_by"] == "human"
    assert "approved by a human" in (tmp_path / "run" / "report.md").read_text()
    # the take-home kernel is the approved one, and its result file says who approved it
    assert 'CONFIG = {"BLOCK": 256, "num_warps": 4}' in (tmp_path / "run" / "kernel.py").read_text()
    stored = json.loads((tmp_path / "run" / best["result"]).read_text())
    assert stored["verdict"] == "pass" and stored["details"]["approved_by"] == "human"


def test_the_hold_threshold_reaches_the_evaluator_from_the_settings(tmp_path):
    """configs/default.yaml says 10x; a task or the command line (--set evaluator.suspicious_speedup=N)
    may raise it for a naive baseline, and every evaluator call of the run gets it."""

    def run(name: str, evaluator_settings: dict[str, Any] | None) -> Run:
        r = Run(tmp_path / name, ScriptedProposer([[prop(64, 1)]]), **one_per_round(rounds=1))
        if evaluator_settings is not None:
            r.inputs["overrides"]["evaluator"] = evaluator_settings
        return r

    default = run("default", None).start()
    assert {s.suspicious_speedup for s in default.evaluator.settings} == {10.0}
    raised = run("raised", {"suspicious_speedup": 60}).start()
    assert {s.suspicious_speedup for s in raised.evaluator.settings} == {60.0}
    with pytest.raises(Exception, match="evaluator.suspicious_speedup"):
        run("wrong", {"suspicious_speedup": 0}).start()


def test_the_evaluator_is_told_when_the_runs_minutes_end(tmp_path):
    """The minutes budget is a promise: a round's candidates are checked only until the run's minutes
    run out (the judge cuts a longer check there), not for the whole check timeout each."""
    started = time.time()
    run = Run(tmp_path, ScriptedProposer([[prop(64, 1)]]), **one_per_round(rounds=1, minutes=2)).start()
    ended = time.time()
    deadlines = [s.run_deadline_unix for s in run.evaluator.settings if s is not None and s.run_deadline_unix]
    assert deadlines, "no round's evaluator call carried the run's deadline"
    assert all(started < d <= ended + 120 for d in deadlines), (started, deadlines)
    assert all(d > started + 60 for d in deadlines)  # a 2-minute run that spent seconds: most of it is left


def test_an_approved_candidate_faces_the_watchdog_before_it_becomes_the_best(tmp_path, monkeypatch):
    """On a GPU the watchdog re-times an approved candidate against the best in one process; one that
    regresses at a shape stays approved but does not become the best (the CPU verdict accepts, so the
    GPU verdict is scripted here)."""
    from tools.watchdog import WatchdogVerdict

    seen: list[tuple[str, str]] = []  # (new, previous) identities

    def regresses(task, device, new, previous, max_regression, settings=None, launch_bound_below_pct=None):
        seen.append((new.identity, previous.identity))
        return WatchdogVerdict(accepted=False, compared=True, same_process=True, interpreted=False,
                               max_regression=max_regression, reason="#1 is 8% slower at N=1200")  # fmt: skip

    monkeypatch.setattr("nodes.watch.recheck_new_best", regresses)
    proposer = ScriptedProposer([[prop(256, 4)], [prop(64, 1)], [prop(64, 2)]])
    evaluator = ScriptedEvaluator({cfg(256, 4): _held(5.0)}, default=passed(100.0, False))
    run = Run(tmp_path, proposer, evaluator=evaluator, **one_per_round(rounds=3)).start()
    run.answer("approve 1")
    number = {a["identity"]: a["n"] for a in run.state["attempts"]}
    seen = [(number[new], number[previous]) for new, previous in seen]
    assert seen == [(1, 0)]  # the approved candidate against the best it would replace
    assert run.state["approved"] == [1] and run.state["best"]["n"] == 0
    trail = [
        json.loads(line)["message"] for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()
    ]
    assert "watchdog: #1 is 8% slower at N=1200" in trail
    assert "approved #1 stays out of the best: the watchdog kept #0" in trail


def test_a_candidate_beyond_the_roofline_cannot_be_approved(tmp_path):
    proposer = ScriptedProposer([[prop(256, 4)], [prop(64, 1)]])
    evaluator = ScriptedEvaluator({cfg(256, 4): _held(5.0, held="roofline")}, default=passed(100.0, False))
    run = Run(tmp_path, proposer, evaluator=evaluator, **one_per_round(rounds=2)).start()
    # beyond the roofline is a wrong measurement, not a result to review: the run does not stop for it
    assert ("evaluate", "human") not in run.edges()
    assert run.state["best"]["n"] == 0


def test_approve_names_what_cannot_be_approved(tmp_path):
    from nodes.answers import AnswerError, parse_answer

    spaces: dict = {}
    attempts = [
        Attempt(n=0, round=0, identity="a0", module="baseline.py", verdict="pass", held=None),
        Attempt(n=1, round=1, identity="a1", module="baseline.py", verdict="fail", held="roofline"),
        Attempt(n=2, round=1, identity="a2", module="baseline.py", verdict="fail", held="speedup"),
    ]
    task = load_task(AXPY)
    assert parse_answer("approve #2", spaces, attempts, task) == {"action": "approve", "attempts": [2]}
    for answer, why in [
        ("approve 1", "faster than the copy bandwidth"),
        ("approve 0", "was not held for review"),
        ("approve 7", "no evaluated candidate #7"),
        ("approve", "needs the number"),
    ]:
        try:
            parse_answer(answer, spaces, attempts, task)
        except AnswerError as exc:
            assert why in str(exc), (answer, str(exc))
        else:
            raise AssertionError(f"{answer!r} was accepted")


def test_a_run_folder_moved_while_paused_resumes_where_it_is_now(tmp_path):
    """Paths the state keeps are relative to the run folder (candidates, results, a human's module):
    a paused run whose folder was moved resumes from the new place, and the report is written there."""
    mine = tmp_path / "mine.py"
    mine.write_text((AXPY / "baseline.py").read_text().replace("a * x + y", "y + a * x"))
    run = paused(tmp_path, evaluator=ScriptedEvaluator({cfg(256, 2): passed(40.0)}))
    run.proposer.script = [[]]
    run.answer(f'candidate {mine} {{"BLOCK": 256, "num_warps": 2}}')  # a new-source module joins the search
    old, moved = tmp_path / "run", tmp_path / "moved"

    def strings(value: Any) -> list[str]:
        if isinstance(value, dict):
            return [s for v in value.values() for s in strings(v)]
        if isinstance(value, list):
            return [s for v in value for s in strings(v)]
        return [value] if isinstance(value, str) else []

    state = run.state
    assert [e["passed"] for e in state["extra_modules"].values()] == [True]
    inside = [s for s in strings(state) if s.startswith(f"{old}/")]
    assert inside == []  # nothing in the checkpointed state points into the folder by an absolute path

    old.rename(moved)
    run.context.run_dir = str(moved)
    run.proposer.script = [[]]
    run.answer("continue")  # diagnose and propose read the sources from the moved folder
    sources = run.proposer.calls[-1].module_sources
    assert sources[next(iter(state["extra_modules"]))] == mine.read_text() and run.question is not None
    run.answer("stop")
    report = json.loads((moved / "report.json").read_text())
    assert report["status"] == "stopped_by_human" and report["run_dir"] == str(moved)
    assert (moved / "kernel.py").is_file() and not old.exists()


def test_the_checkpointed_state_holds_plain_json_and_each_node_its_active_seconds(tmp_path):
    """Nodes receive typed records but hand back plain JSON, so a checkpoint reloads in any process
    without pydantic objects in it; every node's update adds the seconds it took to ``active_s``."""
    updates: list[dict[str, Any]] = []
    run = Run(tmp_path, ScriptedProposer([[prop(64, 1)]]), **one_per_round(rounds=1))
    for chunk in run.app.stream(run.inputs, run.config, context=run.context, stream_mode="updates"):
        updates += [u for node, u in chunk.items() if node != "__interrupt__"]

    def plain(value: Any) -> bool:
        if isinstance(value, dict):
            return all(isinstance(k, str) and plain(v) for k, v in value.items())
        if isinstance(value, list):
            return all(plain(v) for v in value)
        return value is None or isinstance(value, str | int | float | bool)

    state = run.state
    assert plain(state) and json.loads(json.dumps(state)) == state
    assert all(u["active_s"] > 0 for u in updates) and len(updates) == 6
    assert state["active_s"] == pytest.approx(sum(u["active_s"] for u in updates))
