"""The check of every timed replay's log (tools.timed.Timing.check_log), run on the CPU: the values a replay
wrote at the sampled positions are judged by the same rule as a full comparison."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tools import staging
from tools.judge_settings import Verdict
from tools.references import Entry
from tools.task import load_task
from tools.timed import Timing

REPO = Path(__file__).resolve().parent.parent
INF = float("inf")


def judged(expected: torch.Tensor, flat: list[int], logged: list[float]) -> None:
    """Two timed replays that each logged ``logged`` at ``flat`` (and no poison left) judged against
    ``expected``."""
    row = [0.0, *logged]  # the poison count, then the sampled values
    log = torch.tensor(row * 2, dtype=torch.float64)
    buffer = torch.zeros(log.numel() * 8, dtype=torch.uint8)
    buffer.view(torch.float64).copy_(log)
    task = load_task(REPO / "tests" / "fixtures" / "tasks" / "axpy")
    session = SimpleNamespace(judge=SimpleNamespace(task=task), job={"identity": "0" * 16},
                              arena=SimpleNamespace(buffer=buffer))  # fmt: skip
    reply = {"log": staging.Spec(0, (log.numel(),), (1,), "float64").to_json(), "width": len(row), "runs": [2]}
    entry = Entry(inputs=(), expected=(expected,), dtype="float32", image=torch.empty(0, dtype=torch.uint8))
    Timing(session).check_log(reply, [torch.tensor(flat)], [entry, entry], {"N": expected.numel()})


def test_a_timed_replay_with_a_finite_value_where_the_reference_is_infinite_is_wrong():
    expected = torch.ones(64)
    expected[5] = INF
    judged(expected, [5, 7], [INF, 1.0])  # right: the same infinity
    for wrong in (3.0, -INF, 1e30):
        with pytest.raises(Verdict) as verdict:
            judged(expected, [5, 7], [wrong, 1.0])
        assert verdict.value.fields["error_type"] == "mismatch"


def test_a_timed_replay_within_the_tolerance_passes_and_one_outside_it_fails():
    expected = torch.linspace(1, 2, 64)
    judged(expected, [3, 40], [float(expected[3]) * (1 + 1e-6), float(expected[40])])
    with pytest.raises(Verdict):
        judged(expected, [3, 40], [float(expected[3]) + 1.0, float(expected[40])])
