"""Decoder recurrences with their attention. Each returns, per step, the decoder state s_t (B, H),
the context c_t (B, M) the output layer reads, and the attention weights (B, S) (None: no attention).

- ``BahdanauDecoder`` (CopyNet section 3 / Bahdanau et al. 2014): attend with s_{t-1}, then
  s_t = GRU([x_t; c_t], s_{t-1}) (CopyNet eq. 2-3); without attention it is Enc-Dec's decoder
  reading one fixed code. (The pointer-generator's coverage decoder, which attends after the
  update, is in models/pointer_generator.py.)
- ``LuongDecoder`` (Luong et al. 2015; WEAN section 2 and 3.1.3): a stacked LSTM updates first,
  then attends with the new top state s_t ('general' score). Without input feeding, teacher forcing
  runs it over the whole target at once (``forward_sequence``).

State tensors are batch-first (beam search reorders dim 0): the LSTM's (L, B, H) states are kept
as (B, L, H). ``static_keys`` name the entries fixed per source.
"""

from __future__ import annotations

import torch
from torch import nn

from models.attention import BahdanauAttention, LuongAttention
from models.rnn import run_rnn

State = dict


class BahdanauDecoder(nn.Module):
    def __init__(self, in_dim: int, hidden: int, memory_dim: int, attention: bool = True):
        super().__init__()
        self.out_dim, self.context_dim = hidden, memory_dim
        self.bridge = nn.Linear(memory_dim, hidden)  # s_0 = tanh(W [h_fwd_last; h_bwd_first])
        self.attention = BahdanauAttention(hidden, memory_dim, hidden) if attention else None
        self.cell = nn.GRUCell(in_dim + memory_dim, hidden)
        self.static_keys = frozenset({"keys", "summary"})

    def init_state(self, memory: torch.Tensor, summary: torch.Tensor, mask: torch.Tensor) -> State:
        state = {"s": torch.tanh(self.bridge(summary))}  # (B, H)
        if self.attention is None:
            state["summary"] = summary  # (B, 2H): Enc-Dec reads one fixed vector
        else:
            state["keys"] = self.attention.keys(memory)  # (B, S, H)
        return state

    def forward(self, state: State, x: torch.Tensor):
        """x (B, In) -> s_t (B, H), c_t (B, M), weights (B, S) or None, state updates."""
        updates = {}
        if self.attention is None:
            context, weights = state["summary"], None
        else:
            context, weights = self.attention(state["s"], state["keys"], state["memory"], state["src_mask"])
        s_t = self.cell(torch.cat([x, context], dim=-1), state["s"])  # (B, H)
        updates["s"] = s_t
        return s_t, context, weights, updates


class LuongDecoder(nn.Module):
    def __init__(self, in_dim: int, hidden: int, memory_dim: int, layers: int = 2, dropout: float = 0.0):
        super().__init__()
        self.out_dim, self.context_dim, self.layers = hidden, memory_dim, layers
        self.bridge = nn.Linear(memory_dim, hidden)
        self.rnn = nn.LSTM(in_dim, hidden, num_layers=layers, batch_first=True, dropout=dropout if layers > 1 else 0.0)
        self.attention = LuongAttention(hidden, memory_dim)
        self.static_keys = frozenset({"keys"})

    def init_state(self, memory: torch.Tensor, summary: torch.Tensor, mask: torch.Tensor) -> State:
        h0 = torch.tanh(self.bridge(summary))  # (B, H), every layer starts from the source summary
        return {
            "h": h0.unsqueeze(1).repeat(1, self.layers, 1),  # (B, L, H)
            "c": torch.zeros_like(h0).unsqueeze(1).repeat(1, self.layers, 1),  # (B, L, H)
            "keys": self.attention.keys(memory),  # (B, S, H)
        }

    def forward(self, state: State, x: torch.Tensor):
        """x (B, In) -> s_t (B, H) top layer, c_t (B, M), weights (B, S), state updates."""
        hc = (state["h"].transpose(0, 1).contiguous(), state["c"].transpose(0, 1).contiguous())  # (L, B, H)
        out, (h, c) = run_rnn(self.rnn, x.unsqueeze(1), hc)  # out (B, 1, H)
        s_t = out.squeeze(1)  # (B, H)
        context, weights = self.attention(s_t, state["keys"], state["memory"], state["src_mask"])
        return s_t, context, weights, {"h": h.transpose(0, 1), "c": c.transpose(0, 1), "s": s_t}

    def forward_sequence(self, state: State, x: torch.Tensor):
        """Teacher forcing, every step at once (no input feeding: x_t is e(y_{t-1}) only):
        x (B, T, In) -> s (B, T, H) top layer, c (B, T, M), weights (B, T, S)."""
        hc = (state["h"].transpose(0, 1).contiguous(), state["c"].transpose(0, 1).contiguous())  # (L, B, H)
        s, _ = run_rnn(self.rnn, x, hc)  # (B, T, H): one cuDNN / oneDNN call for the whole target
        context, weights = self.attention.attend_all(s, state["keys"], state["memory"], state["src_mask"])
        return s, context, weights
