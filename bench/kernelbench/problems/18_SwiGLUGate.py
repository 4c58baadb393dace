import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """The gated unit of a SwiGLU feed-forward layer: silu(gate) * up, from two projections' outputs."""

    def __init__(self):
        super().__init__()

    def forward(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return F.silu(gate) * up


tokens = 8192
ffn_dim = 8192


def get_inputs():
    gate = torch.randn(tokens, ffn_dim)
    up = torch.randn(tokens, ffn_dim)
    return [gate, up]


def get_init_inputs():
    return []
