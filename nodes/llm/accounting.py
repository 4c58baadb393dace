"""Per-role accounting of model calls: tokens in/out, latency, cost where the provider reports it.

Token counts come from the provider's usage report (``AIMessage.usage_metadata``); a model that
reports none (a scripted one, some servers) is counted as chars/4 and the totals say so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from nodes.llm.context import estimate_tokens

# How much of a failed answer the accounting keeps (the audit needs the gist, not megabytes).
MAX_RAW_CHARS = 4000
MAX_FAILURES_KEPT = 20


def _cost(message: AIMessage) -> float | None:
    """Cost in USD when the provider put one in its response (OpenRouter and some gateways do)."""
    meta = message.response_metadata or {}
    for holder in (meta, meta.get("token_usage") or {}, meta.get("usage") or {}):
        for key in ("cost", "total_cost", "cost_usd"):
            value = holder.get(key) if isinstance(holder, dict) else None
            if isinstance(value, int | float):
                return float(value)
    return None


@dataclass
class Usage:
    """Totals for one role (one model SPEC)."""

    role: str
    spec: str
    calls: int = 0
    retries: int = 0
    failures: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    estimated_calls: int = 0
    latency_s: float = 0.0
    cost_usd: float | None = None
    failure_log: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def record_call(self, prompt: list[BaseMessage], answer: AIMessage | None, started: float) -> None:
        self.calls += 1
        self.latency_s += time.monotonic() - started
        usage = answer.usage_metadata if answer is not None else None
        if usage and (usage.get("input_tokens") or usage.get("output_tokens")):
            self.tokens_in += int(usage.get("input_tokens") or 0)
            self.tokens_out += int(usage.get("output_tokens") or 0)
        else:
            self.estimated_calls += 1
            self.tokens_in += sum(estimate_tokens(str(m.content)) for m in prompt)
            if answer is not None:
                self.tokens_out += estimate_tokens(str(answer.content) + str(answer.tool_calls or ""))
        cost = _cost(answer) if answer is not None else None
        if cost is not None:
            self.cost_usd = (self.cost_usd or 0.0) + cost

    def record_failure(self, kind: str, message: str, raw: str = "") -> None:
        self.failures += 1
        entry = {"kind": kind, "message": message[:MAX_RAW_CHARS], "raw": raw[:MAX_RAW_CHARS]}
        self.failure_log = [*self.failure_log, entry][-MAX_FAILURES_KEPT:]

    def note(self, text: str) -> None:
        self.notes = [*self.notes, text][-MAX_FAILURES_KEPT:]

    def as_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "spec": self.spec,
            "calls": self.calls,
            "retries": self.retries,
            "failures": self.failures,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "tokens_estimated": self.estimated_calls > 0,
            "latency_s": round(self.latency_s, 3),
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6),
            "failure_log": list(self.failure_log),
            "notes": list(self.notes),
        }


def collect(agents: Any) -> dict[str, Any]:
    """report.json["accounting"]: each role's usage (roles without ``usage()`` are skipped) and totals."""
    roles = {}
    for agent in agents:
        usage = getattr(agent, "usage", None)
        if callable(usage):
            data = usage()
            roles[data.get("role", type(agent).__name__)] = data
    total: dict[str, Any] = {
        key: sum(r.get(key) or 0 for r in roles.values())
        for key in ("calls", "retries", "failures", "tokens_in", "tokens_out")
    }
    total["latency_s"] = round(sum(r.get("latency_s") or 0.0 for r in roles.values()), 3)
    costs = [r["cost_usd"] for r in roles.values() if r.get("cost_usd") is not None]
    total["cost_usd"] = round(sum(costs), 6) if costs else None
    return {"roles": roles, "total": total} if roles else {}
