import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """KL divergence KL(q || p) between two row distributions given as unnormalized scores.

    p is turned into log-probabilities and q into probabilities, both over the last dimension; the sum
    is divided by the number of rows (reduction "batchmean").
    """

    def __init__(self):
        super().__init__()

    def forward(self, p_scores: torch.Tensor, q_scores: torch.Tensor) -> torch.Tensor:
        log_p = torch.log_softmax(p_scores, dim=-1)
        q = torch.softmax(q_scores, dim=-1)
        return F.kl_div(log_p, q, reduction="batchmean")


batch_size = 8192
dim = 8192


def get_inputs():
    p_scores = torch.randn(batch_size, dim)
    q_scores = torch.randn(batch_size, dim)
    return [p_scores, q_scores]


def get_init_inputs():
    return []
