"""build_llm_role: the chat-model role for a SPEC (nodes.agents.build_agents calls it for every
SPEC other than "expert")."""

from __future__ import annotations

from typing import Any

from nodes.llm.models import (
    ModelSpecError,
    build_chat_model,
    default_structured_method,
    llm_settings,
    parse_spec,
)
from nodes.llm.roles import LLMCritic, LLMDiagnoser, LLMProposer, LLMRole
from nodes.llm.scripted import ScriptedChatModel

ROLES: dict[str, type[LLMRole]] = {"diagnoser": LLMDiagnoser, "proposer": LLMProposer, "critic": LLMCritic}


def build_llm_role(role: str, spec: str, settings: dict[str, Any] | None = None) -> LLMRole:
    """The Diagnoser, Proposer or Critic (``role``) answering through the model of ``spec``.

    Raises ModelSpecError (a ValueError) naming what is missing when the SPEC cannot be served:
    a malformed SPEC, a missing API key variable, a missing pip extra, a missing model file.
    """
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    parsed = parse_spec(spec)
    cfg = llm_settings(settings, parsed)
    model = build_chat_model(parsed, cfg)
    if isinstance(model, ScriptedChatModel):
        model = model.for_role(role)
    return ROLES[role](model, parsed, cfg, default_structured_method(parsed, cfg.structured))


__all__ = ["ModelSpecError", "build_llm_role"]
