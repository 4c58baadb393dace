"""Scripted agents and a scripted evaluator for driving the graph through chosen routes quickly.

The scripted evaluator stands in for tools.evaluate only where a test is about routing: it answers
each candidate from a table (config -> outcome) the way the real evaluator reports (EvalResult),
including the full log of a compile failure. The real evaluator runs in the CLI, resume and Studio tests.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from graph.builder import builder
from loop.records import Attempt
from loop.roles import AgentContext, Critique, Diagnosis, Proposal, Proposed
from loop.settings import default_settings
from loop.state import RunState
from nodes.runtime import RunContext
from tools.candidate import Candidate
from tools.results import DeviceInfo, EvalResult, Metrics, ShapeTiming

AXPY = Path(__file__).parent / "fixtures" / "tasks" / "axpy"
BASELINE_CONFIG = {"BLOCK": 128, "num_warps": 4}
COMPILE_LOG = "\n".join(f"line {i}: triton.compiler.errors.CompilationError: detail {i}" for i in range(60))


def passed(us: float, interpreted: bool = True, roofline_pct: float | None = None) -> EvalResult:
    row = ShapeTiming(shape={"M": 4, "N": 300}, dtype="float32", median_us=us, min_us=us, spread=1.0,
                      roofline_pct=roofline_pct, gbps=None if roofline_pct is None else roofline_pct * 40)  # fmt: skip
    return EvalResult(
        verdict="pass",
        stage="done",
        metrics=Metrics(per_shape=[row], geomean_us=us, runs=3),
        device=DeviceInfo(name="cpu" if interpreted else "NVIDIA H200", interpreted=interpreted),
        resources={"n_regs": 32, "n_spills": 0},
    )


def failed(error_type: str, stage: str = "compile", log: str = "") -> EvalResult:
    return EvalResult.failure(
        stage, error_type, f"{error_type} in the candidate", log or f"log of {error_type}"
    )


def key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


class ScriptedEvaluator:
    """Answers candidates from ``table`` (config json -> EvalResult); ``default`` for the rest."""

    def __init__(self, table: dict[str, EvalResult] | None = None, default: EvalResult | None = None):
        self.table = dict(table or {})
        self.default = default or passed(100.0)
        # The axpy baseline passes at 100 us (on the same kind of device) unless the table says otherwise.
        self.table.setdefault(key(BASELINE_CONFIG), passed(100.0, self.default.device.interpreted))
        self.calls: list[list[Candidate]] = []
        self.settings: list[Any] = []  # the EvalSettings each call got

    def __call__(
        self, task, candidates, *, device="auto", baseline=None, on_result=None, settings=None
    ) -> list[EvalResult]:
        self.calls.append(list(candidates))
        self.settings.append(settings)
        out = []
        for i, cand in enumerate(candidates):
            result = self.table.get(key(cand.config), self.default).model_copy(deep=True)
            result.identity = cand.identity
            if on_result:
                on_result(i, result)
            out.append(result)
        return out

    @property
    def evaluated(self) -> list[dict[str, Any]]:
        return [c.config for batch in self.calls for c in batch]


Script = list[Any] | Callable[[AgentContext], Any]


class ScriptedProposer:
    """Returns the next scripted batch (a list of Proposal, or a callable of the context), with
    ``last_reason`` and ``converged`` as the reason it gives when a batch is empty."""

    def __init__(self, script: list[Any]):
        self.script = list(script)
        self.calls: list[AgentContext] = []
        self.last_reason = ""
        self.converged = False

    def propose(self, ctx: AgentContext) -> Proposed:
        self.calls.append(ctx.model_copy(deep=True))
        step = self.script.pop(0) if self.script else []
        batch = step(ctx) if callable(step) else step
        if isinstance(batch, Proposed):
            return batch
        return Proposed(proposals=batch, reason=self.last_reason, converged=self.converged)


class ScriptedCritic:
    """Approves everything unless the script holds a batch of verdicts for this call."""

    def __init__(self, script: list[list[Critique]] | None = None):
        self.script = list(script or [])
        self.calls: list[tuple[AgentContext, list[Proposal]]] = []

    def critique(self, ctx: AgentContext, proposals: list[Proposal]) -> list[Critique]:
        self.calls.append((ctx.model_copy(deep=True), proposals))
        if self.script:
            return self.script.pop(0)
        return [Critique(verdict="approve") for _ in proposals]


class FixedDiagnoser:
    def __init__(self, bottleneck: str = "memory_bound"):
        self.bottleneck = bottleneck
        self.calls: list[AgentContext] = []

    def diagnose(self, ctx: AgentContext) -> Diagnosis:
        self.calls.append(ctx.model_copy(deep=True))
        return Diagnosis(bottleneck=self.bottleneck, confidence=0.5, summary=f"{self.bottleneck} (scripted)")


# A state as setup leaves it, with nothing in it: the rules' tests fill in what each case is about.
BLANK = {"task": str(AXPY), "task_name": "axpy", "started_at": 0.0, "search_spaces": {}, "forbid": [],
         "round": 1, "rounds_done": 0, "snapshot": None, "snapshot_of": "", "diagnosis": None,
         "proposals": [], "critic_round": 0, "reflection": "", "last_failure": None, "human": None,
         "stop": None, "route": {"source": "setup", "to": "diagnose", "reason": "start"},
         "retrieved_cases": [], "memory": {}}  # fmt: skip


def record(a: dict[str, Any]) -> Attempt:
    """An attempt record from the fields a case names (the rest as for a baseline)."""
    return Attempt.model_validate({"n": 0, "round": 0, "identity": "x", "module": "baseline.py", **a})


def typed_state(state: dict[str, Any]) -> RunState:
    """A plain state dict, as a checkpoint holds it, typed; what it leaves out is BLANK's."""
    fields = {**BLANK, "streaks": {}, **state}
    if "settings" not in fields:
        fields["settings"] = default_settings() | {"budget": {"rounds": 6, "candidates_per_round": 2,
                                                              "minutes": 60, "candidates": 12}}  # fmt: skip
    for key in ("baseline", "best"):
        fields[key] = record(fields[key])
    fields["attempts"] = [record(a) for a in fields.get("attempts", [])]
    return RunState.model_validate(fields)


def prop(block: int, warps: int, **extra: Any) -> Proposal:
    return Proposal(module="baseline.py", config={"BLOCK": block, "num_warps": warps},
                    rationale=extra.pop("rationale", f"try BLOCK={block}, num_warps={warps}"), **extra)  # fmt: skip


class Run:
    """One graph run in memory: compile with an InMemorySaver, stream, record the node order."""

    def __init__(
        self, tmp_path: Path, proposer, critic=None, evaluator=None, diagnoser=None, **overrides: Any
    ):
        self.proposer, self.critic = proposer, critic or ScriptedCritic()
        self.diagnoser = diagnoser or FixedDiagnoser()
        self.evaluator = evaluator or ScriptedEvaluator()
        self.app = builder.compile(checkpointer=InMemorySaver())
        self.config = {"configurable": {"thread_id": "t"}}
        self.context = RunContext(
            agents=(self.diagnoser, self.proposer, self.critic), evaluator=self.evaluator
        )
        budget = {"rounds": 6, "candidates_per_round": 2, "minutes": 60}
        budget.update(overrides.pop("budget", {}))
        self.inputs = {
            "task": str(AXPY),
            "device": "cpu",
            "run_dir": str(tmp_path / "run"),
            "overrides": {"budget": budget, **overrides},
        }
        self.nodes: list[str] = []
        self.routes: list[dict[str, Any]] = []

    def _stream(self, payload: Any) -> None:
        for update in self.app.stream(payload, self.config, context=self.context, stream_mode="updates"):
            for node, value in update.items():
                if node == "__interrupt__":
                    continue
                self.nodes.append(node)
                if isinstance(value, dict) and value.get("route"):
                    self.routes.append(value["route"])

    def start(self) -> Run:
        self._stream(self.inputs)
        return self

    def answer(self, text: str) -> Run:
        self._stream(Command(resume=text))
        return self

    @property
    def state(self) -> dict[str, Any]:
        return self.app.get_state(self.config).values

    @property
    def question(self) -> dict[str, Any] | None:
        interrupts = self.app.get_state(self.config).interrupts
        return interrupts[0].value if interrupts else None

    def edges(self) -> list[tuple[str, str]]:
        return [(r["source"], r["to"]) for r in self.routes]
