import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Smooth L1 (Huber-like) loss between predictions and targets, averaged; `beta` is passed to forward."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor, beta: float) -> torch.Tensor:
        return F.smooth_l1_loss(predictions, targets, beta=beta)


batch_size = 16384
dim = 4096
beta = 0.5


def get_inputs():
    predictions = torch.randn(batch_size, dim)
    targets = torch.randn(batch_size, dim)
    return [predictions, targets, beta]


def get_init_inputs():
    return []
