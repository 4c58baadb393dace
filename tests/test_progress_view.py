"""The terminal progress lines a user reads while a run goes (graph/progress.py), and that they number
and count candidates as the trail and the report do."""

from __future__ import annotations

import io
import json
import re

from rich.console import Console

from graph.progress import ProgressView
from tests.graph_support import Run, ScriptedProposer, prop


def lines_after(*events: dict) -> list[str]:
    out = io.StringIO()
    view = ProgressView(Console(file=out, width=200, force_terminal=False))
    for event in events:
        view.handle("custom", event)
    return out.getvalue().splitlines()


BASELINE = {"event": "baseline", "status": "done", "geomean_us": 100.0, "device": "cuda", "budget": {}}


def round_event(**fields) -> dict:
    return {"event": "round", "round": 1, "best_us": 100.0, "table_us": None, "evaluated": 8, "passed": 8,
            "baseline_us": 100.0, "interpreted": False, "evaluated_total": 8, "budget_candidates": 16,
            "cache_hits": 0, "eta_s": 30.0, **fields}  # fmt: skip


def test_a_round_line_shows_the_per_shape_table_when_it_beats_the_single_best():
    line = lines_after(BASELINE, round_event(table_us=40.0))[-1]
    assert "best 100.00 us (1.00x the baseline), per-shape table 40.00 us (2.50x the baseline)" in line


def test_a_round_line_leaves_the_table_out_when_export_would_not_ship_it():
    # 1.6% faster than the best: below the 2% a table must win by (tools.dispatch.THRESHOLD)
    line = lines_after(BASELINE, round_event(best_us=50.0, table_us=49.2))[-1]
    assert "best 50.00 us (2.00x the baseline)," in line and "table" not in line


def test_a_resumed_run_keeps_its_totals_eta_and_interpreted_tag_without_a_baseline_event():
    """A resumed process never sees setup's baseline event: the round event carries what the line says."""
    line = lines_after(round_event(round=3, interpreted=True, evaluated_total=12, eta_s=75.0, cache_hits=2))[-1]
    assert "(interpreted timings: ranks only)" in line
    assert "12 of 16 candidates evaluated (2 from the validation cache), ETA 1m15s" in line


def test_no_eta_once_the_run_ends():
    line = lines_after(BASELINE, round_event(round=2, evaluated_total=16, eta_s=None))[-1]
    assert line.endswith("16 of 16 candidates evaluated")


def test_a_candidate_line_says_its_attempt_number_and_where_its_result_came_from():
    event = {"event": "candidate", "round": 1, "n": 4, "module": "baseline.py", "config": {"BLOCK": 64},
             "done": 1, "total": 2, "verdict": "pass", "error_type": None, "geomean_us": 12.5, "source": "cache"}  # fmt: skip
    assert lines_after(event) == ["  #4 baseline.py {'BLOCK': 64}: pass 12.50 us (validation cache) [1/2]"]


def test_the_console_numbers_and_counts_candidates_as_the_trail_and_the_report(tmp_path):
    run = Run(tmp_path, ScriptedProposer([[prop(64, 1), prop(64, 2)], [prop(256, 4), prop(512, 4)]]),
              budget={"rounds": 2})  # fmt: skip
    out = io.StringIO()
    view = ProgressView(Console(file=out, width=300, force_terminal=False))
    for mode, chunk in run.app.stream(run.inputs, run.config, context=run.context, stream_mode=["updates", "custom"]):
        view.handle(mode, chunk)
    console = out.getvalue()
    trail = [json.loads(line)["message"] for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    numbered = re.findall(r"^  #(\d+) (\S+) (\{.*?\}): pass", console, re.M)
    logged = [m for m in trail if re.match(r"#\d+ \S+ \{", m)]
    assert [f"#{n} {module} {config}: pass" for n, module, config in numbered] == [
        m.split(" 100.00 us")[0] for m in logged
    ]
    assert [int(n) for n, _, _ in numbered] == [a["n"] for a in run.state["attempts"][1:]] == [1, 2, 3, 4]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    first, last = (next(x for x in console.splitlines() if x.startswith(f"round {r} done")) for r in (1, 2))
    assert f"{report['candidates_evaluated']} of 4 candidates evaluated" in last and "ETA" not in last
    assert "2 of 4 candidates evaluated, ETA" in first
