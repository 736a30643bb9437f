"""Encoders. Every encoder maps embedded source tokens to a memory of size M = 2 * encoder_hidden per
position (``ModelConfig.memory``; encoder_hidden defaults to hidden) and a summary vector of the same
size, so any output layer works over any encoder and any decoder size.

- ``BiGRUEncoder``: bidirectional GRU (Bahdanau et al. 2014; CopyNet section 3.1 'Encoder').
- ``TransformerEncoder``: self-attention layers (Vaswani et al. 2017), beyond the seed papers.
- Read-Again's encoders live in models/read_again.py (they need the raw embeddings twice).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from models.bigru import bigru
from models.rnn import run_rnn


class BiGRUEncoder(nn.Module):
    """h_tau = [h_fwd_tau; h_bwd_tau], the short-term memory M of CopyNet."""

    def __init__(self, emb: int, hidden: int):
        super().__init__()
        self.rnn = nn.GRU(emb, hidden, batch_first=True, bidirectional=True)
        self.out_dim = 2 * hidden

    def forward(self, embedded: torch.Tensor, lengths: torch.Tensor, batch=None) -> tuple[torch.Tensor, torch.Tensor]:
        """embedded (B, S, E), lengths (B,) -> memory (B, S, 2H), summary (B, 2H).

        summary = [last forward state; first backward state], the fixed-length code of Enc-Dec.
        On the CPU ``models.bigru`` computes it (the same function and parameters, a faster backward
        pass); elsewhere ``nn.GRU`` over the packed batch (cuDNN on a GPU).
        """
        if embedded.device.type == "cpu":
            with torch.autocast("cpu", enabled=False):  # at least float32, as run_rnn keeps recurrent layers
                x = embedded.float() if embedded.dtype in (torch.bfloat16, torch.float16) else embedded
                memory, h_n = bigru(self.rnn, x, lengths)  # (B, S, 2H), (2, B, H)
        else:
            packed = pack_padded_sequence(embedded, lengths.cpu(), batch_first=True, enforce_sorted=False)
            out, h_n = run_rnn(self.rnn, packed)  # h_n: (2, B, H)
            memory, _ = pad_packed_sequence(out, batch_first=True, total_length=embedded.size(1))  # (B, S, 2H)
        summary = torch.cat([h_n[0], h_n[1]], dim=-1)  # (B, 2H)
        return memory, summary


def sinusoid_positions(length: int, dim: int, device=None) -> torch.Tensor:
    """Vaswani et al. 2017 sec. 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)."""
    pos = torch.arange(length, device=device, dtype=torch.float32).unsqueeze(1)  # (S, 1)
    rate = torch.exp(torch.arange(0, dim, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / dim))
    pe = torch.zeros(length, dim, device=device)
    pe[:, 0::2] = torch.sin(pos * rate)
    pe[:, 1::2] = torch.cos(pos * rate[: dim // 2])
    return pe  # (S, D)


class TransformerEncoder(nn.Module):
    """Pre-norm Transformer encoder with d_model = M = 2 * encoder_hidden (the memory size every output
    layer expects); the summary is the mean of the memory over real positions."""

    def __init__(self, emb: int, hidden: int, layers: int, heads: int, dropout: float):
        super().__init__()
        d_model = 2 * hidden
        if d_model % heads:
            raise ValueError(
                f"model.transformer_heads {heads} must divide the encoder's model size 2 * encoder_hidden = {d_model}"
            )
        self.proj = nn.Linear(emb, d_model)
        layer = nn.TransformerEncoderLayer(
            d_model, heads, dim_feedforward=4 * d_model, dropout=dropout, batch_first=True, norm_first=True
        )
        self.layers = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(d_model), enable_nested_tensor=False)
        self.out_dim = d_model

    def forward(self, embedded: torch.Tensor, lengths: torch.Tensor, batch=None) -> tuple[torch.Tensor, torch.Tensor]:
        """embedded (B, S, E), lengths (B,) -> memory (B, S, 2H), summary (B, 2H)."""
        steps = embedded.size(1)
        mask = torch.arange(steps, device=embedded.device).unsqueeze(0) < lengths.to(embedded.device).unsqueeze(
            1
        )  # (B, S)
        x = self.proj(embedded) + sinusoid_positions(steps, self.out_dim, embedded.device)  # (B, S, 2H)
        memory = self.layers(x, src_key_padding_mask=~mask)  # (B, S, 2H)
        memory = memory.masked_fill(~mask.unsqueeze(-1), 0.0)
        summary = memory.sum(dim=1) / mask.sum(dim=1, keepdim=True).clamp_min(1)  # (B, 2H)
        return memory, summary


def make_encoder(cfg) -> nn.Module:
    """The encoder named by ``cfg.encoder``."""
    if cfg.encoder == "bigru":
        return BiGRUEncoder(cfg.emb, cfg.memory // 2)
    if cfg.encoder == "transformer":
        return TransformerEncoder(cfg.emb, cfg.memory // 2, cfg.transformer_layers, cfg.transformer_heads, cfg.dropout)
    raise ValueError(f"unknown encoder {cfg.encoder!r}; known: bigru, transformer")
