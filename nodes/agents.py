"""Which policy stands behind each role: the built-in expert, or a chat model by SPEC.

The loop only sees the role interfaces of loop/roles.py (a proposer answers with ``Proposed``: its
proposals, or why there are none and whether that ends the run).
"""

from __future__ import annotations

import importlib
from typing import Any

from loop.roles import Critic, Diagnoser, Proposer
from nodes.expert import ExpertCritic, ExpertDiagnoser, ExpertProposer

EXPERT = "expert"


class AgentSpecError(ValueError):
    """A model SPEC cannot be served; the message names the SPEC."""


def build_agents(
    model_spec: str = EXPERT, critic_spec: str | None = None, settings: dict[str, Any] | None = None
) -> tuple[Diagnoser, Proposer, Critic]:
    """(Diagnoser, Proposer, Critic) for the SPECs; ``critic_spec`` None means ``model_spec``."""
    settings = settings or {}
    critic_spec = critic_spec or model_spec
    diagnoser = ExpertDiagnoser() if model_spec == EXPERT else _llm_role("diagnoser", model_spec, settings)
    proposer = (
        ExpertProposer(settings["search"])
        if model_spec == EXPERT
        else _llm_role("proposer", model_spec, settings)
    )
    critic = ExpertCritic() if critic_spec == EXPERT else _llm_role("critic", critic_spec, settings)
    return diagnoser, proposer, critic


def _llm_role(role: str, spec: str, settings: dict[str, Any]) -> Any:
    try:
        factory = importlib.import_module("nodes.llm.factory")
    except ModuleNotFoundError as exc:
        if exc.name and not exc.name.startswith("nodes.llm"):
            raise
        raise AgentSpecError(
            f"model SPEC {spec!r} needs the chat-model roles (nodes/llm/factory.py), not installed here; "
            f"use --model {EXPERT}"
        ) from None
    return factory.build_llm_role(role, spec, settings)
