"""The three roles played by a chat model: LLMDiagnoser, LLMProposer, LLMCritic.

Each builds its prompt from the AgentContext (nodes/llm/context.py), asks for a pydantic answer
(nodes/llm/structured.py) and returns what the role interfaces of loop/roles.py promise. An answer
that stays unusable after the re-ask becomes a recorded failure (``settings.llm.on_failure="record"``,
the default) or raises ``AgentOutputError`` (``"raise"``):

- diagnoser: the profile's own label is kept, at low confidence, and the summary says so;
- proposer: no proposals, with the reason saying why (the graph routes that like any empty round);
- critic: each proposal is ruled on the fact checks alone, and its objections say so.

The critic sees each proposal (code, config, expected effect, risks, answers to objections) and the
evidence, never the proposer's rationale; facts it can check without a model (the search space, the
module, whether it was evaluated before) are checked first and override an approval.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from loop.roles import BOTTLENECKS, AgentContext, Critique, Diagnosis, Proposal, Proposed
from nodes.llm import context as C
from nodes.llm.accounting import Usage
from nodes.llm.models import LLMSettings, ModelSpec
from nodes.llm.structured import AgentOutputError, Method, ask_structured, grammar_of
from tools.candidate import candidate_identity

EXPANDABLE = ("history", "source", "modules", "log", "cases", "snapshot")


class ProposalBatch(BaseModel):
    """The next candidates to evaluate, most promising first."""

    proposals: list[Proposal] = Field(default_factory=list)
    expand: list[str] = Field(
        default_factory=list,
        description="only with no proposals: names of shortened sections to see in full first",
    )


class ConfigProposal(BaseModel):
    """One candidate in config-only mode: a task module and a config from its search space."""

    module: str
    config: dict[str, Any]
    rationale: str
    expected_effect: str = ""
    risks: str = ""
    answers: list[str] = Field(default_factory=list)
    revises: int | None = None

    def to_proposal(self) -> Proposal:
        return Proposal(**self.model_dump())


class ConfigProposalBatch(BaseModel):
    """The next configs to evaluate, most promising first."""

    proposals: list[ConfigProposal] = Field(default_factory=list)
    expand: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------------------------
# shared plumbing


class LLMRole:
    """A role backed by one chat model; ``usage()`` reports its accounting."""

    role = "role"

    def __init__(self, model: BaseChatModel, spec: ModelSpec, cfg: LLMSettings, method: Method):
        self.model, self.spec, self.cfg, self.method = model, spec, cfg, method
        self._usage = Usage(role=self.role, spec=spec.label)

    def usage(self) -> dict[str, Any]:
        return self._usage.as_dict()

    def _messages(self, system: str, sections: list[C.Section], grammar: dict, expanded=None):
        if self.method == "json":
            system += "\n\n" + C.load_prompt("json_answer", schema=json.dumps(grammar, separators=(",", ":")))
        budget = max(200, self.cfg.token_budget - C.estimate_tokens(system))
        prompt = C.fit(sections, budget, expanded)
        messages: list[BaseMessage] = [SystemMessage(content=system), HumanMessage(content=prompt.text)]
        return messages, prompt

    def _ask(self, messages, schema, grammar, check=None, coerce=None):
        return ask_structured(
            self.model,
            messages,
            schema,
            role=self.role,
            usage=self._usage,
            method=self.method,
            grammar=grammar,
            check=check,
            coerce=coerce,
            retries=self.cfg.retries,
        )

    def _failed(self, exc: AgentOutputError) -> None:
        if self.cfg.on_failure == "raise":
            raise exc


def _common_sections(ctx: AgentContext, rationale_in_history: bool) -> list[C.Section]:
    sections = [C.Section("task", "Task", [C.task_text(ctx)], 100)]
    best = C.best_text(ctx)
    if best:
        sections.append(C.Section("best", "Best so far", [best], 90))
    snap = C.snapshot_text(ctx)
    if snap:
        first = "\n".join(snap.splitlines()[:4])
        sections.append(C.Section("snapshot", "Profile of the best", [snap, first], 75, ["numbers left out"]))
    variants, losses = C.history_variants(ctx, rationale_in_history)
    if variants:
        sections.append(C.Section("history", "History (oldest first)", variants, 50, losses))
    variants, losses = C.cases_variants(ctx)
    if variants:
        sections.append(C.Section("cases", "Similar past cases", variants, 20, losses))
    return sections


# --------------------------------------------------------------------------------------------
# diagnoser


class LLMDiagnoser(LLMRole):
    role = "diagnoser"

    def diagnose(self, ctx: AgentContext) -> Diagnosis:
        sections = _common_sections(ctx, rationale_in_history=False)
        summary = ctx.source_summary or C.summary_of(C.best_source(ctx))
        sections.append(C.Section("source", "Source of the best (summary)", [summary, ""], 60, ["dropped"]))
        grammar = grammar_of(Diagnosis, min_items={"evidence": 1})
        messages, _ = self._messages(C.load_prompt("diagnoser"), sections, grammar)
        try:
            return self._ask(messages, Diagnosis, grammar, check=_check_diagnosis)
        except AgentOutputError as exc:
            self._failed(exc)
            return self._from_profile(ctx, exc)

    @staticmethod
    def _from_profile(ctx: AgentContext, exc: AgentOutputError) -> Diagnosis:
        snap = ctx.snapshot or {}
        label = snap.get("bottleneck") if snap.get("bottleneck") in BOTTLENECKS else "latency_bound"
        return Diagnosis(
            bottleneck=label,
            evidence=list(snap.get("evidence", []))[:5],
            confidence=min(float(snap.get("confidence", 0.0)), 0.3) if snap else 0.0,
            summary=f"diagnoser answer unusable ({exc.kind}: {exc.reason[:160]}); "
            + ("the profile's own label is kept" if snap else "no profile: no diagnosis"),
        )


def _check_diagnosis(d: Diagnosis) -> Diagnosis:
    if not d.evidence:
        raise ValueError("evidence is empty: give at least one line citing a metric and its value")
    if not d.summary:
        d.summary = f"{d.bottleneck}: {d.evidence[0]}"
    return d


# --------------------------------------------------------------------------------------------
# proposer


@dataclass
class _Answer:
    proposals: list[Proposal]
    expand: list[str] = field(default_factory=list)


class LLMProposer(LLMRole):
    role = "proposer"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._sources: dict[str, str] = {}  # identity -> the source this proposer wrote

    def propose(self, ctx: AgentContext) -> Proposed:
        expanded: set[str] = set()
        for _ in range(self.cfg.expand_rounds + 1):
            schema, grammar = self._schema(ctx, allow_expand=len(expanded) < len(EXPANDABLE))
            sections = self._sections(ctx)
            messages, prompt = self._messages(self._system(ctx), sections, grammar, expanded)
            try:
                answer = self._ask(
                    messages, schema, grammar, check=lambda b: self._check(b, ctx), coerce=_as_batch
                )
            except AgentOutputError as exc:
                self._failed(exc)
                return Proposed(reason=f"the model's answer was unusable ({exc.kind}): {exc.reason[:300]}")
            wanted = {k.split(":")[0].strip().lower() for k in answer.expand} & set(prompt.trimmed)
            if answer.proposals or not wanted or wanted <= expanded:
                break
            expanded |= wanted
            self._usage.note(f"proposer asked to expand: {', '.join(sorted(wanted))}")
        kept = self._keep(answer.proposals, ctx)
        if kept:
            return Proposed(proposals=kept)
        repeats = "the model proposed only candidates already evaluated"
        return Proposed(reason=repeats if answer.proposals else "the model proposed nothing")

    # -- prompt ---------------------------------------------------------------------------------
    def _system(self, ctx: AgentContext) -> str:
        rules = C.load_prompt("config_only" if self.cfg.config_only else "source_rules")
        return C.load_prompt(
            "proposer",
            n_candidates=ctx.n_candidates,
            source_rules=rules,
            mode_instructions=C.load_prompt(f"proposer_{ctx.mode}"),
        )

    def _sections(self, ctx: AgentContext) -> list[C.Section]:
        sections = _common_sections(ctx, rationale_in_history=True)
        if ctx.diagnosis is not None:
            sections.append(C.Section("diagnosis", "Diagnosis", [C.diagnosis_text(ctx)], 88))
        module = C.best_module(ctx)
        source, summary = C.best_source(ctx), ctx.source_summary or C.summary_of(C.best_source(ctx))
        if self.cfg.config_only:
            sections.append(
                C.Section("source", f"Source of {module} (summary)", [summary, ""], 55, ["dropped"])
            )
        else:
            sections.append(
                C.Section(
                    "source",
                    f"Source of {module} (the best)",
                    [f"```python\n{source}\n```\n{summary}", summary],
                    65,
                    ["only its summary"],
                )
            )
            others = [m for m in ctx.module_sources if m != module]
            if others:
                text = "\n\n".join(f"{m}:\n{C.summary_of(ctx.module_sources[m])}" for m in others)
                sections.append(
                    C.Section("modules", "Other modules", [text, ", ".join(others)], 30, ["names only"])
                )
        tried = C.evaluated_text(ctx)
        if tried:
            sections.append(
                C.Section("tried", "Already evaluated (never propose these again)", [tried, ""], 85)
            )
        left = C.untried_text(ctx)
        if left:
            sections.append(C.Section("untried", "Not evaluated yet", [left, ""], 84))
        full_log = ctx.mode == "fix"
        variants, losses = C.failure_variants(ctx, full_log, self.cfg.token_budget)
        if variants:
            sections.append(C.Section("log", "Last failure", variants, 97 if full_log else 45, losses))
        failing = self._failing_source(ctx)
        if failing and ctx.mode in {"fix", "reflect"} and not self.cfg.config_only:
            sections.append(C.Section("failing", "Your failing source", [f"```python\n{failing}\n```"], 96))
        if ctx.mode == "reflect":
            text = ctx.reflection or "(no notes)"
            sections.append(C.Section("reflection", "Recent failures against the baseline", [text], 93))
            if not self.cfg.config_only:
                base = f"```python\n{ctx.baseline_source}\n```"
                sections.append(
                    C.Section("baseline", f"Baseline {ctx.baseline_module} (known correct)", [base, ""], 80)
                )
        if ctx.mode == "revise" and ctx.revise:
            sections.append(C.Section("revise", "Sent back by the critic", [self._revise_text(ctx)], 98))
        elif ctx.objections:
            text = "\n".join(f"- {o}" for o in ctx.objections)
            sections.append(
                C.Section("objections", "The critic's objections to the last proposals", [text], 92)
            )
        return sections

    @staticmethod
    def _revise_text(ctx: AgentContext) -> str:
        blocks = []
        for i, item in enumerate(ctx.revise):
            p = Proposal.model_validate(item["proposal"])
            text = C.proposal_text(p, ctx.module_sources.get(p.module), with_rationale=True)
            objections = "\n".join(f"  {j + 1}. {o}" for j, o in enumerate(item.get("objections", [])))
            blocks.append(f"[{i}] {text}\nobjections:\n{objections}")
        return "\n\n".join(blocks)

    def _failing_source(self, ctx: AgentContext) -> str:
        f = ctx.last_failure or {}
        if f.get("source"):
            return str(f["source"])
        return self._sources.get(str(f.get("identity")), "")

    def _schema(self, ctx: AgentContext, allow_expand: bool) -> tuple[type[BaseModel], dict[str, Any]]:
        schema: type[BaseModel] = ConfigProposalBatch if self.cfg.config_only else ProposalBatch
        # Asking for more context is offered where the answer is not grammar-constrained (a
        # constrained answer must hold a candidate) and when something can still be expanded.
        expand = allow_expand and self.cfg.expand_rounds > 0 and self.method != "json"
        return schema, proposal_grammar(ctx, self.cfg.config_only, expand)

    # -- checking -------------------------------------------------------------------------------
    def _check(self, batch: BaseModel, ctx: AgentContext) -> _Answer:
        proposals = [p.to_proposal() if isinstance(p, ConfigProposal) else p for p in batch.proposals]
        problems = []
        modules = set(ctx.search_spaces) | set(ctx.module_sources)
        for i, p in enumerate(proposals):
            if p.module not in modules:
                problems.append(
                    f"proposals[{i}].module {p.module!r} is not a task module (use one of: {', '.join(sorted(modules))})"
                )
            if p.source is not None:
                p.source = _strip_fences(p.source)
            if ctx.mode == "revise" and p.revises is not None:
                if not 0 <= p.revises < len(ctx.revise):
                    problems.append(
                        f"proposals[{i}].revises={p.revises} is not one of the numbered proposals"
                    )
                    continue
                wanted = len(ctx.revise[p.revises].get("objections", []))
                if len(p.answers) < wanted:
                    problems.append(
                        f"proposals[{i}] revises [{p.revises}] but answers {len(p.answers)} of its {wanted} "
                        f"objection(s): give one 'accept: ...' or 'rebut: ...' per objection"
                    )
        if problems:
            raise ValueError("\n".join(problems))
        repeats = [p for p in proposals if self._identity(p, ctx) in ctx.evaluated]
        if proposals and len(repeats) == len(proposals) and ctx.mode != "revise":
            listed = "; ".join(f"{p.module} {C.config_text(p.config)}" for p in repeats)
            raise ValueError(
                f"every proposal was already evaluated ({listed}): propose configs not in the history"
            )
        return _Answer(proposals=proposals, expand=list(getattr(batch, "expand", [])))

    @staticmethod
    def _identity(p: Proposal, ctx: AgentContext) -> str:
        source = p.source if p.source is not None else ctx.module_sources.get(p.module, "")
        return candidate_identity(source, p.config)

    def _keep(self, proposals: list[Proposal], ctx: AgentContext) -> list[Proposal]:
        """Drop repeats of evaluated candidates (and of each other); remember sources written."""
        kept, seen = [], set(ctx.evaluated)
        for p in proposals:
            identity = self._identity(p, ctx)
            if identity in seen and ctx.mode != "revise":
                self._usage.note(f"dropped a repeat of an evaluated candidate: {p.module} {p.config}")
                continue
            seen.add(identity)
            if p.source is not None:
                self._sources[identity] = p.source
            kept.append(p)
        return kept[: ctx.n_candidates]


def _strip_fences(source: str) -> str:
    text = source.strip("\n")
    if text.lstrip().startswith("```"):
        lines = text.strip().splitlines()[1:]
        if lines and lines[-1].strip().startswith("```"):
            lines = lines[:-1]
        text = "\n".join(lines)
    return text + "\n"


def _as_batch(data: Any) -> Any:
    """Tolerate a bare list of proposals or a single proposal object."""
    if isinstance(data, list):
        return {"proposals": data}
    if isinstance(data, dict) and "proposals" not in data and {"module", "config"} <= set(data):
        return {"proposals": [data]}
    return data


def _json_type(values: list[Any]) -> dict[str, Any]:
    if all(isinstance(v, bool) for v in values):
        return {"type": "boolean"}
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return {"type": "integer"}
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return {"type": "number"}
    return {"type": "string"}


def proposal_grammar(ctx: AgentContext, config_only: bool, allow_expand: bool) -> dict[str, Any]:
    """The JSON schema a constrained decoder follows: modules and config keys are the task's, config
    VALUES only typed (a value outside the space stays possible, and the critic rules on it)."""
    keys: dict[str, list[Any]] = {}
    for space in ctx.search_spaces.values():
        for key, values in space.items():
            keys.setdefault(key, []).extend(values)
    common = [k for k in keys if all(k in s for s in ctx.search_spaces.values())]
    config = {
        "type": "object",
        "properties": {k: _json_type(v) for k, v in keys.items()},
        "required": common,
        "additionalProperties": False,
    }
    props: dict[str, Any] = {
        "module": {"type": "string", "enum": sorted(ctx.search_spaces)},
        "rationale": {"type": "string"},
        "config": config,
        "expected_effect": {"type": "string"},
        "risks": {"type": "string"},
    }
    required = ["module", "rationale", "config", "expected_effect"]
    if not config_only:
        props["source"] = {"anyOf": [{"type": "string"}, {"type": "null"}]}
    if ctx.mode == "revise":
        props["revises"] = {"type": "integer"}
        props["answers"] = {"type": "array", "items": {"type": "string"}}
        required += ["revises", "answers"]
    item = {"type": "object", "properties": props, "required": required}
    proposals: dict[str, Any] = {"type": "array", "items": item, "maxItems": max(1, ctx.n_candidates)}
    if not allow_expand and ctx.mode != "revise":
        # A constrained model answers at least one candidate (small ones otherwise settle for an
        # empty list); with nothing to gain, the critic and the evaluator say so. A revision may
        # withdraw everything, and asking for more context needs an empty list.
        proposals["minItems"] = 1
    batch: dict[str, Any] = {
        "type": "object",
        "properties": {"proposals": proposals},
        "required": ["proposals"],
    }
    if allow_expand:
        batch["properties"]["expand"] = {
            "type": "array",
            "items": {"type": "string", "enum": list(EXPANDABLE)},
        }
    return batch


# --------------------------------------------------------------------------------------------
# critic


def fact_checks(p: Proposal, ctx: AgentContext) -> list[tuple[str, str]]:
    """What can be checked without a model: the module, the search space, repeats.
    Each finding is (subject, sentence); the subject ("ROWS=3", "num_warps", ...) tells whether the
    model's own objections already raised it."""
    space = ctx.search_spaces.get(p.module)
    if space is None:
        known = ", ".join(sorted(ctx.search_spaces))
        return [(p.module, f"module {p.module!r} is not a task module (known: {known})")]
    problems = []
    for key, value in p.config.items():
        if key not in space:
            problems.append(
                (key, f"{key} is not a search-space key of {p.module} (allowed: {', '.join(space)})")
            )
        elif value not in space[key]:
            subject = f"{key}={json.dumps(value)}"
            problems.append((subject, f"{subject} is outside the search space: allowed values {space[key]}"))
    missing = [k for k in space if k not in p.config]
    if missing:
        problems.append((missing[0], f"the config gives no value for {', '.join(missing)}"))
    source = p.source if p.source is not None else ctx.module_sources.get(p.module)
    if source is not None and candidate_identity(source, p.config) in ctx.evaluated:
        problems.append(
            ("already evaluated", "this exact candidate (source and config) was already evaluated")
        )
    return problems


class LLMCritic(LLMRole):
    role = "critic"

    def critique(self, ctx: AgentContext, proposals: list[Proposal]) -> list[Critique]:
        return [self._one(ctx, p) for p in proposals]

    def _one(self, ctx: AgentContext, p: Proposal) -> Critique:
        facts = fact_checks(p, ctx)
        sections = _common_sections(ctx, rationale_in_history=False)
        if ctx.diagnosis is not None:
            sections.append(C.Section("diagnosis", "Diagnosis", [C.diagnosis_text(ctx)], 85))
        text = C.proposal_text(p, ctx.module_sources.get(p.module), with_rationale=False)
        sections.append(C.Section("proposal", "The proposal", [text], 99))
        checks = (
            "\n".join(f"- FAILED: {text}" for _, text in facts) or "- module, search space, repeats: all pass"
        )
        sections.append(C.Section("facts", "Fact checks", [checks], 99))
        grammar = grammar_of(Critique)
        messages, _ = self._messages(C.load_prompt("critic"), sections, grammar)
        try:
            ruling = self._ask(messages, Critique, grammar, check=_check_critique)
        except AgentOutputError as exc:
            self._failed(exc)
            note = f"critic answer unusable ({exc.kind}: {exc.reason[:160]}); ruled on the fact checks alone"
            verdict = "revise" if facts else "approve"
            return Critique(verdict=verdict, objections=[*(text for _, text in facts), note])
        return merge_facts(ruling, facts)


VERDICTS = ("approve", "revise", "reject")


def _check_critique(c: Critique) -> Critique:
    """An objection must be a reason, not a label: small models echo the verdict as its objection."""
    bad = [
        f"objection {i + 1} ({o!r})"
        for i, o in enumerate(c.objections)
        if o.strip(" .!:;'\"").lower() in VERDICTS or len(o.split()) < 3
    ]
    if bad:
        raise ValueError(
            f"{', '.join(bad)} is not a reason: write one sentence per objection saying what to change and why"
        )
    if c.verdict != "approve" and not c.objections:
        raise ValueError(f"verdict {c.verdict!r} needs at least one objection saying what to change or why")
    c.objections = list(dict.fromkeys(c.objections))
    return c


def merge_facts(ruling: Critique, facts: list[tuple[str, str]]) -> Critique:
    """Facts override an approval; a fact the model's objections already raise is not repeated."""
    if not facts:
        return ruling
    said = " ".join(ruling.objections).lower().replace(" ", "")
    extra = [text for subject, text in facts if subject.lower().replace(" ", "") not in said]
    verdict = "revise" if ruling.verdict == "approve" else ruling.verdict
    return Critique(verdict=verdict, objections=[*ruling.objections, *extra])
