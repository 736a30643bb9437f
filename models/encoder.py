"""Bidirectional GRU encoder (Bahdanau et al. 2014; CopyNet section 3.1 'Encoder')."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class BiGRUEncoder(nn.Module):
    """h_tau = [h_fwd_tau; h_bwd_tau], the short-term memory M of CopyNet."""

    def __init__(self, emb: int, hidden: int):
        super().__init__()
        self.rnn = nn.GRU(emb, hidden, batch_first=True, bidirectional=True)
        self.out_dim = 2 * hidden

    def forward(self, embedded: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """embedded (B, S, E), lengths (B,) -> memory (B, S, 2H), summary (B, 2H).

        summary = [last forward state; first backward state], the fixed-length code of Enc-Dec.
        """
        packed = pack_padded_sequence(embedded, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, h_n = self.rnn(packed)  # h_n: (2, B, H)
        memory, _ = pad_packed_sequence(out, batch_first=True, total_length=embedded.size(1))  # (B, S, 2H)
        summary = torch.cat([h_n[0], h_n[1]], dim=-1)  # (B, 2H)
        return memory, summary
