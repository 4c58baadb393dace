"""The records the loop keeps in its state: attempts, reviews, routes, the end, progress.

Each is a pydantic model; the graph's checkpoints hold them as plain JSON (``loop.state.plain``), and a
node receives them typed. Paths in a record are relative to the run folder (tools.run_folder), so a
folder can be moved and still resumed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from loop.roles import Proposal, ProposeMode

Node = Literal["setup", "diagnose", "propose", "critic", "evaluate", "reflect", "human", "report"]
StopStatus = Literal["target_met", "budget_exhausted", "stopped_by_human", "converged"]
ReviewStatus = Literal["pending", "approved", "revise", "rejected"]


class ShapeRow(BaseModel):
    """One shape's timing as an attempt keeps it (the full row stays in results/<identity>.json)."""

    shape: dict[str, int]
    dtype: str | None = None
    median_us: float | None = None
    min_us: float | None = None
    spread: float | None = Field(default=None, description="median/min over the repeats: the noise seen")
    gbps: float | None = None
    roofline_pct: float | None = Field(default=None, description="% of the device's copy bandwidth (1 GiB)")
    ceiling_pct: float | None = Field(
        default=None, description="% of this size's ceiling: a copy of the same bytes over the median (GPU)"
    )
    method: str | None = None


class Attempt(BaseModel):
    """One evaluated candidate: what was tried, why, and the evaluator's verdict (the full log stays in
    ``result``, the source in ``candidate``, both relative to the run folder)."""

    n: int = Field(description="attempt number; the baseline is #0")
    round: int = Field(description="the round it was evaluated in; the baseline's is 0")
    identity: str = Field(description="tools.candidate.candidate_identity of its source and config")
    module: str = Field(description="the module it runs: a task module or a new-source module's name")
    space_module: str | None = Field(default=None, description="the task module whose search space it is in")
    config: dict[str, Any] = {}
    origin: str = Field(default="", description="baseline | expert | llm:<SPEC> | search | human")
    parent: str | None = Field(default=None, description="identity of the best it started from")
    rationale: str = ""
    expected_effect: str = ""
    objections: list[str] = Field(default=[], description="the critic's objections it went through")
    answers: list[str] = Field(default=[], description="the proposer's answers to them")
    verdict: Literal["pass", "fail"] = "fail"
    stage: str = ""
    error_type: str | None = None
    message: str = ""
    held: Literal["speedup", "roofline"] | None = Field(
        default=None, description="held for human review as a suspicious speedup (or beyond the roofline)"
    )
    geomean_us: float | None = None
    per_shape: list[ShapeRow] = []
    roofline_pct: float | None = Field(
        default=None,
        description="the lowest % of the ceiling at the shapes a roofline target judges (loop.scoring.judged_pct)",
    )
    resources: dict[str, Any] = {}
    interpreted: bool = Field(default=True, description="Triton-interpreter wall times: a ranking only")
    device_name: str | None = None
    seconds: float | None = None
    candidate: str = Field(default="", description="candidates/<identity>.py")
    result: str = Field(default="", description="results/<identity>.json")
    cached: bool | None = Field(default=None, description="served by the validation cache (None: baseline)")
    approved_by: str | None = Field(default=None, description="'human' once a held candidate was approved")
    worker: str = Field(default="", description="the evaluation worker (and GPU) that judged it")

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def approved(self) -> Attempt:
        """This held candidate as the result a human's approval makes it."""
        return self.model_copy(
            update={
                "verdict": "pass",
                "stage": "done",
                "error_type": None,
                "approved_by": "human",
                "message": f"held for review ({self.message}); approved by a human",
            }
        )


class Failure(Attempt):
    """A failed attempt with what the proposer reads in fix mode: the evaluator's log and the source."""

    log: str = ""
    details: dict[str, Any] = {}
    source: str = ""


class ExtraModule(BaseModel):
    """A module with new source (a human's or a model's): once it passes, its configs join the search."""

    path: str = Field(description="its source, relative to the run folder (candidates/<identity>.py)")
    space_of: str = Field(description="the task module whose search space its configs live in")
    passed: bool = False


class Review(BaseModel):
    """A proposal under review: the critic's status, its objections and the proposer's answers."""

    proposal: Proposal
    origin: str
    status: ReviewStatus = "pending"
    objections: list[str] = []
    answers: list[str] = []
    identity: str | None = Field(default=None, description="the candidate it makes; None: unknown module")
    critic_round: int = 0


class Stop(BaseModel):
    """Why the run ends."""

    status: StopStatus
    reason: str


class Pause(BaseModel):
    """A question the run asked and the answer it got, from the human or the unattended policy."""

    round: int = Field(description="rounds done when it paused")
    why: str
    answer: str
    by: Literal["human", "policy"]
    evaluated: int = Field(description="candidates evaluated (after the baseline) when it paused")


class Decision(BaseModel):
    """A route: which node comes next and why; ``mode`` tells propose how it is entered."""

    source: Node
    to: Node
    mode: ProposeMode = "explore"
    reason: str
    stop: Stop | None = Field(default=None, description="why the run ends, when ``to`` is report")


class ProgressEntry(BaseModel):
    """One evaluated round (round 0: the baseline), as progress.png draws it."""

    round: int
    best_us: float | None = None
    round_best_us: float | None = None
    table_us: float | None = Field(default=None, description="geomean of each shape's fastest time so far")
    evaluated: int = 0
    passed: int = 0
    active_s: float | None = Field(
        default=None, description="setup's entry only: the run's active seconds once the baseline was timed"
    )
