"""Attention over the encoder memory.

- ``BahdanauAttention``: additive (Bahdanau et al. 2014), CopyNet eq. 3; with ``coverage`` the
  score also sees the coverage vector (See et al. 2017, eq. 11).
- ``LuongAttention``: multiplicative 'general' score s_t^T W_a h_i (Luong et al. 2015), WEAN's
  decoder (Ma et al. 2018, section 2).
"""

from __future__ import annotations

import torch
from torch import nn

from models.extended import NEG


def _attend(scores: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """scores (B, T, S), memory (B, S, D), mask (B, S) -> context (B, T, D), weights (B, T, S)."""
    weights = torch.softmax(scores.masked_fill(~mask.unsqueeze(1), NEG), dim=-1)  # (B, T, S)
    return torch.bmm(weights, memory), weights  # (B, T, D), (B, T, S)


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

    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        memory: torch.Tensor,
        mask: torch.Tensor,
        coverage: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """query (B, H), keys (B, S, A), memory (B, S, 2H), mask (B, S), coverage (B, S) -> (B, 2H), (B, S)."""
        feats = keys + self.query(query).unsqueeze(1)  # (B, S, A)
        if self.w_cov is not None:
            feats = feats + self.w_cov(coverage.unsqueeze(-1))  # (B, S, A)
        context, weights = _attend(self.v(torch.tanh(feats)).transpose(1, 2), memory, mask)  # (B, 1, .)
        return context.squeeze(1), weights.squeeze(1)


class LuongAttention(nn.Module):
    """'general' score: score(s_t, h_i) = s_t^T W_a h_i (Luong et al. 2015, eq. 8)."""

    def __init__(self, query_dim: int, memory_dim: int):
        super().__init__()
        self.w_a = nn.Linear(memory_dim, query_dim, bias=False)

    def keys(self, memory: torch.Tensor) -> torch.Tensor:
        """W_a h_i once per source: (B, S, 2H) -> (B, S, H)."""
        return self.w_a(memory)

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """query (B, H), keys (B, S, H), memory (B, S, 2H), mask (B, S) -> (B, 2H), (B, S)."""
        context, weights = self.attend_all(query.unsqueeze(1), keys, memory, mask)
        return context.squeeze(1), weights.squeeze(1)

    def attend_all(
        self, queries: torch.Tensor, keys: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every step at once: queries (B, T, H) -> context (B, T, 2H), weights (B, T, S)."""
        return _attend(torch.bmm(queries, keys.transpose(1, 2)), memory, mask)  # scores (B, T, S)
