"""The built-in expert policy: rules over the profile snapshot and the history, no language model."""

from nodes.expert.critic import ExpertCritic
from nodes.expert.diagnoser import ExpertDiagnoser
from nodes.expert.proposer import ExpertProposer

__all__ = ["ExpertCritic", "ExpertDiagnoser", "ExpertProposer"]
