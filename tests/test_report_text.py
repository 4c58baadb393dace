"""report.md says what happened in words a user can act on (nodes/report.py)."""

from __future__ import annotations

import json

from graph_support import AXPY, Run, ScriptedEvaluator, ScriptedProposer, key, passed, prop

from nodes.report import device_line, target_line


def test_the_device_is_named_once():
    assert device_line({"kind": "cpu", "name": "cpu (Triton interpreter)"}) == "cpu (Triton interpreter)"
    assert device_line({"kind": "cuda", "name": "NVIDIA H200"}) == "cuda (NVIDIA H200)"


def test_a_roofline_target_names_the_tasks_judged_shapes_and_says_a_cpu_run_cannot_meet_it():
    target = {"roofline_pct": 92, "min_dims": {"M": 4096}, "judged_shapes": ["M=4096 N=4096", "M=16384 N=8192"]}
    cpu = target_line(target, interpreted=True)
    assert cpu == ("92% of the same-size ceiling at every judged shape, judged at M >= 4096 (M=4096 N=4096, M=16384 N=8192; "
                   "the lowest counts); not judged here: interpreted timings never meet a target")  # fmt: skip
    assert "no shape of this run" not in cpu and "not judged" not in target_line(target, interpreted=False)


def test_what_won_says_by_how_much_where_and_what_the_diagnosis_expected_and_the_trail_counts_rounds(tmp_path):
    proposer = ScriptedProposer(
        [[prop(64, 1, expected_effect="fewer, fuller programs")], [prop(256, 1)]]
    )
    evaluator = ScriptedEvaluator({key({"BLOCK": 64, "num_warps": 1}): passed(40.0)}, default=passed(90.0))
    Run(tmp_path, proposer, evaluator=evaluator, budget={"rounds": 2, "candidates_per_round": 1}).start()
    markdown = (tmp_path / "run" / "report.md").read_text()
    won = markdown.split("## What won\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert won[0] == ("#1 baseline.py {'BLOCK': 64, 'num_warps': 1} (expert, round 1): 2.500x the baseline's "
                      "geomean (interpreted: a ranking, not a speed claim).")  # fmt: skip
    assert won[1] == "- faster at M=4 N=300 float32 2.50x"
    assert won[2] == ("- the diagnosis of round 1: #0: memory_bound (scripted); it was expected to give: "
                      "fewer, fuller programs")  # fmt: skip
    assert won[3].startswith("- proposed as: try BLOCK=64")
    reported = [line.split(":")[0] for line in markdown.splitlines() if line.startswith("- r") and line.split(":")[0].endswith(" report")]
    assert reported and set(reported) == {"- r2 report"}  # a 2-round run ends after round 2, not in a round 3
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["rounds"] == 2 and report["task"] == str(AXPY)
