import torch
import torch.nn as nn


class Model(nn.Module):
    """SiLU followed by a per-feature affine map: y = silu(x) * scale + shift.

    scale is a learned parameter and shift a fixed buffer, both of length `features`.
    """

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(1.0 + 0.1 * torch.randn(features))
        self.register_buffer("shift", torch.linspace(-1.0, 1.0, features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(x) * self.scale + self.shift


batch_size = 8192
features = 8192


def get_inputs():
    x = torch.randn(batch_size, features)
    return [x]


def get_init_inputs():
    return [features]
