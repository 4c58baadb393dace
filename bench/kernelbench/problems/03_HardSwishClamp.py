import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Hard-swish, then the result clamped to [-limit, limit]; `limit` is a plain float passed to forward."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, limit: float) -> torch.Tensor:
        return torch.clamp(F.hardswish(x), min=-limit, max=limit)


batch_size = 4096
dim = 16384
limit = 2.5


def get_inputs():
    x = 3.0 * torch.randn(batch_size, dim)
    return [x, limit]


def get_init_inputs():
    return []
