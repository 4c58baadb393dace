import math

import torch
import torch.nn as nn


class Model(nn.Module):
    """Multi-head attention core without projections: softmax(q k^T / sqrt(d)) v.

    q, k, v are [batch, heads, seq, head_dim]; no mask, no dropout.
    """

    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        weights = torch.softmax(scores, dim=-1)
        return torch.matmul(weights, v)


batch_size = 8
heads = 16
seq_len = 1024
head_dim = 64


def get_inputs():
    q = torch.randn(batch_size, heads, seq_len, head_dim)
    k = torch.randn(batch_size, heads, seq_len, head_dim)
    v = torch.randn(batch_size, heads, seq_len, head_dim)
    return [q, k, v]


def get_init_inputs():
    return []
