"""The expert critic: rejects what cannot be right, sends back what can be fixed, approves the rest.

Objections start with a tag the proposer can act on: ``module:``, ``space:``, ``duplicate:``,
``forbidden:`` (reject), ``resources:``, ``rationale:`` (revise). An approval may carry ``warning:``
lines: a resource estimate over the limit that compiled kernels of the module have not validated yet
(nodes/expert/resources.py); the candidate is evaluated and the compiler decides.
"""

from __future__ import annotations

from typing import Any

from loop.roles import AgentContext, Critique, Proposal
from nodes.expert.resources import resource_findings
from tools.candidate import candidate_identity
from tools.static_check import check_source
from tools.task import config_problems


class ExpertCritic:
    def critique(self, ctx: AgentContext, proposals: list[Proposal]) -> list[Critique]:
        by_identity = {h["identity"]: h for h in ctx.history if h.get("identity")}
        approved_now = set(ctx.evaluated) - set(by_identity)
        in_batch: dict[str, int] = {}
        verdicts = []
        for i, prop in enumerate(proposals):
            rejections = self._rejections(ctx, prop, i, by_identity, approved_now, in_batch)
            if rejections:
                verdicts.append(Critique(verdict="reject", objections=rejections))
                continue
            source = prop.source if prop.source is not None else ctx.module_sources.get(prop.module)
            found = resource_findings(prop.module, prop.config, ctx.device_limits, ctx.history, source)
            revisions = [f"resources: {p}" for p in found.objections]
            if not prop.rationale.strip():
                revisions.append(
                    "rationale: no rationale; say why this should be faster, tied to the diagnosis"
                )
            if revisions:
                verdicts.append(Critique(verdict="revise", objections=revisions))
            else:
                warnings = [f"warning: resources: {w}" for w in found.warnings]
                verdicts.append(Critique(verdict="approve", objections=warnings))
        return verdicts

    @staticmethod
    def _rejections(
        ctx: AgentContext,
        prop: Proposal,
        index: int,
        by_identity: dict[str, dict[str, Any]],
        approved_now: set[str],
        in_batch: dict[str, int],
    ) -> list[str]:
        space = ctx.search_spaces.get(prop.module)
        if space is None:
            return [f"module: unknown module {prop.module!r} (known: {', '.join(ctx.search_spaces)})"]
        problems = [f"space: {p}" for p in config_problems(space, prop.config)]
        source = prop.source if prop.source is not None else ctx.module_sources.get(prop.module)
        if source is not None:
            identity = candidate_identity(source, prop.config)
            if identity in by_identity:
                past = by_identity[identity]
                outcome = ", ".join(str(x) for x in (past.get("verdict"), past.get("error_type")) if x)
                problems.append(
                    f"duplicate: this source and config was evaluated as #{past.get('n')} ({outcome})"
                )
            elif identity in approved_now:
                problems.append("duplicate: the same source and config is already approved this round")
            elif identity in in_batch:
                problems.append(f"duplicate: same as proposal {in_batch[identity] + 1} of this batch")
            else:
                in_batch[identity] = index
        if prop.source is not None:
            report = check_source(prop.source, ctx.constraints.get("forbid", []))
            if not report.ok and report.error_type == "forbidden_construct":
                problems.append(f"forbidden: {report.message}")
        return problems
