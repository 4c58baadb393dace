"""The judge running out of device memory is the judge's fault, not the candidate's: the candidate is
checked again after the judge empties its cache, and only a judge that still cannot hold it says so."""

import threading

import torch

from tools.judge import JUDGE_OOM_RETRIES, Judge, _internal
from tools.judge_settings import Verdict


class FlakyMemoryJudge:
    """Judge.evaluate_one's collaborators: the first ``ooms`` checks end in the judge's own OOM."""

    def __init__(self, ooms: int, verdict: dict | None = None) -> None:
        self.ooms, self.calls = ooms, 0
        self.verdict = verdict or {"verdict": "pass", "stage": "correctness"}
        self._retry_lock = threading.Lock()

    def _evaluate_once(self, job: dict, time_it: bool):
        self.calls += 1
        if self.calls <= self.ooms:
            return _internal(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB")), None
        return dict(self.verdict), None


def test_a_candidate_is_checked_again_when_the_judge_ran_out_of_memory():
    judge = FlakyMemoryJudge(ooms=1)
    result, _ = Judge.evaluate_one(judge, {"key": 0}, True)
    assert result["verdict"] == "pass"
    assert judge.calls == 2


def test_a_judge_that_never_has_the_memory_says_it_failed_not_the_candidate():
    judge = FlakyMemoryJudge(ooms=99)
    result, _ = Judge.evaluate_one(judge, {"key": 0}, True)
    assert judge.calls == 1 + JUDGE_OOM_RETRIES
    assert result["message"].startswith("the judge failed on this candidate: OutOfMemoryError")
    assert result["details"]["judge_out_of_memory"]


def test_the_candidates_own_failure_is_not_checked_again():
    mismatch = Verdict("correctness", "mismatch", "3 of 4096 elements differ").fields
    judge = FlakyMemoryJudge(ooms=0, verdict=mismatch)
    result, _ = Judge.evaluate_one(judge, {"key": 0}, True)
    assert result["error_type"] == "mismatch"
    assert judge.calls == 1
