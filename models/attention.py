"""Additive attention (Bahdanau et al. 2014), CopyNet eq. 3."""
from __future__ import annotations

import torch
from torch import nn

from pipeline.extended_vocab import NEG


class BahdanauAttention(nn.Module):
    """alpha_{t,tau} = softmax_tau(v^T tanh(W s_{t-1} + U h_tau)); c_t = sum_tau alpha_{t,tau} h_tau."""

    def __init__(self, query_dim: int, memory_dim: int, attn_dim: int):
        super().__init__()
        self.query = nn.Linear(query_dim, attn_dim, bias=False)
        self.key = nn.Linear(memory_dim, attn_dim)
        self.v = nn.Linear(attn_dim, 1, bias=False)

    def keys(self, memory: torch.Tensor) -> torch.Tensor:
        """U h_tau, computed once per source: (B, S, 2H) -> (B, S, A)."""
        return self.key(memory)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, memory: torch.Tensor,
                mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """query (B, H), keys (B, S, A), memory (B, S, 2H), mask (B, S) -> context (B, 2H), weights (B, S)."""
        scores = self.v(torch.tanh(keys + self.query(query).unsqueeze(1))).squeeze(-1)  # (B, S)
        weights = torch.softmax(scores.masked_fill(~mask, NEG), dim=-1)  # (B, S)
        context = torch.bmm(weights.unsqueeze(1), memory).squeeze(1)  # (B, 2H)
        return context, weights
