"""The terminal progress lines a user reads while a run goes (graph/progress.py)."""

from __future__ import annotations

import io

from rich.console import Console

from graph.progress import ProgressView


def lines_after(*events: dict) -> list[str]:
    out = io.StringIO()
    view = ProgressView(Console(file=out, width=200, force_terminal=False))
    for event in events:
        view.handle("custom", event)
    return out.getvalue().splitlines()


BASELINE = {"event": "baseline", "status": "done", "geomean_us": 100.0, "device": "cuda", "budget": {}}


def test_a_round_line_shows_the_per_shape_table_when_it_beats_the_single_best():
    done = {"event": "round", "round": 1, "best_us": 100.0, "table_us": 40.0, "evaluated": 8, "passed": 8}
    line = lines_after(BASELINE, done)[-1]
    assert "best 100.00 us (1.00x the baseline), per-shape table 40.00 us (2.50x the baseline)" in line


def test_a_round_line_leaves_the_table_out_when_export_would_not_ship_it():
    # 1.6% faster than the best: below the 2% a table must win by (tools.dispatch.THRESHOLD)
    done = {"event": "round", "round": 1, "best_us": 50.0, "table_us": 49.2, "evaluated": 8, "passed": 8}
    line = lines_after(BASELINE, done)[-1]
    assert "best 50.00 us (2.00x the baseline)," in line and "table" not in line
