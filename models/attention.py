"""Attention over the encoder memory.

- ``BahdanauAttention``: additive (Bahdanau et al. 2014), CopyNet eq. 3; with ``coverage`` the
  score also sees the coverage vector (See et al. 2017, eq. 11).
- ``LuongAttention``: multiplicative 'general' score s_t^T W_a h_i (Luong et al. 2015), WEAN's
  decoder (Ma et al. 2018, section 2).
"""
from __future__ import annotations

import torch
from torch import nn

from pipeline.extended_vocab import NEG


def _attend(scores: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """scores (B, S), memory (B, S, D), mask (B, S) -> context (B, D), weights (B, S)."""
    weights = torch.softmax(scores.masked_fill(~mask, NEG), dim=-1)  # (B, S)
    context = torch.bmm(weights.unsqueeze(1), memory).squeeze(1)  # (B, D)
    return context, weights


class BahdanauAttention(nn.Module):
    """alpha_{t,tau} = softmax_tau(v^T tanh(W s + U h_tau [+ w_c cov_tau])); c_t = sum_tau alpha h_tau."""

    def __init__(self, query_dim: int, memory_dim: int, attn_dim: int, coverage: bool = False):
        super().__init__()
        self.query = nn.Linear(query_dim, attn_dim, bias=False)
        self.key = nn.Linear(memory_dim, attn_dim)
        self.v = nn.Linear(attn_dim, 1, bias=False)
        self.w_cov = nn.Linear(1, attn_dim, bias=False) if coverage else None  # See et al. eq. 11: w_c

    def keys(self, memory: torch.Tensor) -> torch.Tensor:
        """U h_tau, computed once per source: (B, S, 2H) -> (B, S, A)."""
        return self.key(memory)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor,
                coverage: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """query (B, H), keys (B, S, A), memory (B, S, 2H), mask (B, S), coverage (B, S) -> (B, 2H), (B, S)."""
        feats = keys + self.query(query).unsqueeze(1)  # (B, S, A)
        if self.w_cov is not None:
            feats = feats + self.w_cov(coverage.unsqueeze(-1))  # (B, S, A)
        return _attend(self.v(torch.tanh(feats)).squeeze(-1), memory, mask)


class LuongAttention(nn.Module):
    """'general' score: score(s_t, h_i) = s_t^T W_a h_i (Luong et al. 2015, eq. 8)."""

    def __init__(self, query_dim: int, memory_dim: int):
        super().__init__()
        self.w_a = nn.Linear(memory_dim, query_dim, bias=False)

    def keys(self, memory: torch.Tensor) -> torch.Tensor:
        """W_a h_i once per source: (B, S, 2H) -> (B, S, H)."""
        return self.w_a(memory)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, memory: torch.Tensor,
                mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """query (B, H), keys (B, S, H), memory (B, S, 2H), mask (B, S) -> (B, 2H), (B, S)."""
        return _attend(torch.bmm(keys, query.unsqueeze(2)).squeeze(2), memory, mask)
