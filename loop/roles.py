"""The three agent roles and the structured messages they exchange.

The loop talks to a Diagnoser, a Proposer and a Critic through these interfaces only; whether the
built-in expert policy or a chat model stands behind one is decided by ``nodes.agents.build_agents``.
Every message is a pydantic model, so it can be logged and checkpointed as JSON.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from profiles.classify import LABELS, Label

# A diagnosis names one of the profile snapshot's bottleneck labels.
Bottleneck = Label
BOTTLENECKS = LABELS

ProposeMode = Literal["explore", "fix", "reflect", "revise"]


class Diagnosis(BaseModel):
    """What limits the current best kernel, and how sure we are."""

    bottleneck: Bottleneck
    evidence: list[str] = Field(default_factory=list, description="metric-grounded reasons, one per line")
    confidence: float = Field(ge=0.0, le=1.0)
    summary: str = Field(default="", description="one line for the audit trail")


class Proposal(BaseModel):
    """One candidate to try: a config in the task's search space, optionally with new source."""

    module: str = Field(description="task module (baseline or variant file) whose search space applies")
    config: dict[str, Any]
    source: str | None = Field(default=None, description="new Triton source; None keeps the module's")
    rationale: str = Field(description="why, tied to the diagnosis")
    expected_effect: str = ""
    risks: str = ""
    answers: list[str] = Field(default_factory=list, description="one reply per critic objection")
    revises: int | None = Field(
        default=None,
        description="in revise mode: index into AgentContext.revise of the proposal this replaces",
    )


class Proposed(BaseModel):
    """A proposer's answer: this round's proposals and, when there are none, why."""

    proposals: list[Proposal] = []
    reason: str = Field(default="", description="why there are no proposals")
    converged: bool = Field(
        default=False, description="the reason means tuning has nothing left to gain: the run ends"
    )


class Critique(BaseModel):
    """The critic's ruling on one proposal."""

    verdict: Literal["approve", "revise", "reject"]
    objections: list[str] = Field(default_factory=list)


class AgentContext(BaseModel):
    """Everything a role may read. Built by the graph from its state; roles never see the state."""

    task_name: str
    description: str
    constraints: dict[str, Any] = Field(default_factory=dict)
    search_spaces: dict[str, dict[str, list]] = Field(default_factory=dict, description="module -> space")
    baseline_module: str = "baseline.py"
    baseline_source: str = ""
    best: dict[str, Any] | None = Field(default=None, description="best attempt so far (module, config, us)")
    snapshot: dict[str, Any] | None = Field(default=None, description="profile snapshot of the best")
    snapshot_text: str = ""
    source_summary: str = ""
    diagnosis: Diagnosis | None = None
    history: list[dict[str, Any]] = Field(default_factory=list, description="attempts, oldest first")
    evaluated: list[str] = Field(default_factory=list, description="identities already evaluated")
    mode: ProposeMode = "explore"
    last_failure: dict[str, Any] | None = Field(default=None, description="attempt with full log")
    objections: list[str] = Field(default_factory=list)
    retrieved_cases: list[dict[str, Any]] = Field(default_factory=list)
    n_candidates: int = 6
    round: int = 0
    seed: int = 0
    device_limits: dict[str, Any] = Field(default_factory=dict)
    module_sources: dict[str, str] = Field(
        default_factory=dict, description="module -> source; a config-only proposal's identity uses it"
    )
    revise: list[dict[str, Any]] = Field(
        default_factory=list, description="revise mode: [{proposal, objections}] sent back by the critic"
    )
    reflection: str = Field(default="", description="reflect mode: recent failures against the baseline")
    shapes: list[dict[str, int]] = Field(default_factory=list, description="the timed workload shapes")
    target: dict[str, Any] = Field(
        default_factory=dict, description="the task's target: speedup, roofline_pct, min_dims (judged shapes)"
    )
    standings: list[dict[str, Any]] = Field(
        default_factory=list,
        description="each timed shape of the best against its ceiling (loop.headroom.ShapeStanding)",
    )


@runtime_checkable
class Diagnoser(Protocol):
    def diagnose(self, ctx: AgentContext) -> Diagnosis: ...


@runtime_checkable
class Proposer(Protocol):
    def propose(self, ctx: AgentContext) -> Proposed: ...


@runtime_checkable
class Critic(Protocol):
    def critique(self, ctx: AgentContext, proposals: list[Proposal]) -> list[Critique]: ...
