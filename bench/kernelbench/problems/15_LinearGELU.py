import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A dense layer (x @ W^T + b) followed by exact GELU."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.proj(x))


tokens = 8192
in_features = 4096
out_features = 4096


def get_inputs():
    x = torch.randn(tokens, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features]
