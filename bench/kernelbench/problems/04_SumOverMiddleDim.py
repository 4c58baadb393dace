import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum of a 3-D tensor over one dimension (the middle one here), the reduced dimension dropped."""

    def __init__(self, reduce_dim: int):
        super().__init__()
        self.reduce_dim = reduce_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.reduce_dim)


batch_size = 64
rows = 1024
cols = 1024
reduce_dim = 1


def get_inputs():
    x = torch.randn(batch_size, rows, cols)
    return [x]


def get_init_inputs():
    return [reduce_dim]
