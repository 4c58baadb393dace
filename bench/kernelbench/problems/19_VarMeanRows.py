import torch
import torch.nn as nn


class Model(nn.Module):
    """Per-row variance and mean of a 2-D tensor, returned as two tensors.

    `correction` (passed to forward) is the variance's degrees-of-freedom correction: 0 for the
    population variance, 1 for the sample variance.
    """

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, correction: int) -> tuple[torch.Tensor, torch.Tensor]:
        var, mean = torch.var_mean(x, dim=1, correction=correction)
        return var, mean


batch_size = 8192
dim = 8192
correction = 1


def get_inputs():
    x = 3.0 * torch.randn(batch_size, dim) + 1.0
    return [x, correction]


def get_init_inputs():
    return []
