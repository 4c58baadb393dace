"""The re-measure's rules, on numbers: a win that runs faster on repeated inputs than on changing ones,
or whose events disagree with the judge's own wall clock, is not a win."""

from __future__ import annotations

from tools.judge_settings import JudgeSettings
from tools.timed import confirm_problem

SHAPE = {"M": 4096, "N": 4096}


def test_honest_numbers_pass():
    assert confirm_problem(SHAPE, 40.0, 40.6, 41.2, JudgeSettings()) is None
    assert confirm_problem(SHAPE, 2.0, 2.4, 4.5, JudgeSettings()) is None  # within the absolute band


def test_faster_on_repeated_inputs_is_a_cache():
    found = confirm_problem(SHAPE, 40.0, 120.0, 40.0, JudgeSettings())
    assert found is not None and found.fields["error_type"] == "stale_output"
    assert "cache by content" in found.fields["message"]


def test_events_that_disagree_with_the_wall_clock_are_held_either_way():
    faked = confirm_problem(SHAPE, 20.0, 20.0, 60.0, JudgeSettings())  # reported 3x faster than it ran
    skipped = confirm_problem(SHAPE, 60.0, 60.0, 20.0, JudgeSettings())  # replays skipped in the clocked run
    for found in (faked, skipped):
        assert found is not None and found.fields["error_type"] == "suspicious_speedup"
        assert found.fields["details"]["held"] == "roofline"


def test_the_wall_clock_may_include_writing_back_the_outputs_but_no_more():
    """The events leave out the write-back of the kernel's dirty outputs during the next flush; the wall
    clock pays it, up to what the outputs can take at half the copy rate."""
    assert confirm_problem(SHAPE, 34.0, 34.0, 41.5, JudgeSettings(), writeback_us=24.0) is None
    found = confirm_problem(SHAPE, 34.0, 34.0, 80.0, JudgeSettings(), writeback_us=24.0)
    assert found is not None and found.fields["error_type"] == "suspicious_speedup"
