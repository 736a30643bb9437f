"""A bidirectional GRU over padded batches for the CPU: the same function as ``nn.GRU(...,
bidirectional=True)`` over a packed batch, and the same parameters, computed in fewer, larger
operations.

Why by hand: on the CPU, PyTorch runs a packed GRU one time step at a time through generic
autograd, and its backward pass then (1) computes the recurrent weights' gradient as one small
matrix product per step and direction, accumulated one by one, and (2) for every step's slice of
the packed input projection builds a zero tensor the size of the whole projection and adds the
slice's gradient into it (measured: about half of a Gigaword-shaped encoder's backward time).
Here both directions advance together (one batched product per step), padded positions keep the
state (so no packing is needed), and the backward pass keeps each step's gate gradients, from
which the recurrent weights' gradient is one matrix product per direction at the end. The input
projection of every position and direction is one product before the loop, as in PyTorch.

The equations are PyTorch's ``nn.GRU`` (Cho et al. 2014, with the reset gate applied after the
recurrent product):

  r_t = sigmoid(W_ir x_t + b_ir + W_hr h_{t-1} + b_hr)
  z_t = sigmoid(W_iz x_t + b_iz + W_hz h_{t-1} + b_hz)
  n_t = tanh(W_in x_t + b_in + r_t * (W_hn h_{t-1} + b_hn))
  h_t = (1 - z_t) * n_t + z_t * h_{t-1}

The backward direction reads each row's own positions in reverse (len-1 .. 0), as a packed batch
does; positions past a row's length leave its state unchanged and give zero outputs.
``tests/models/test_bigru.py`` checks outputs, final states and every gradient against ``nn.GRU`` on
packed batches in float64.
"""

from __future__ import annotations

import torch
from torch import nn


class _GRUSteps(torch.autograd.Function):
    """The recurrence of both directions at once, given the input projections.

    gi (2, S, B, 3H): W_i x_t + b_i per direction and (direction-local) step; valid (S, B) bool:
    step t is inside the row; whh (2, 3H, H), bhh (2, 3H). Returns the state after every step
    (2, S, B, H) (a row's state stays fixed past its length) and the final states (2, B, H).
    """

    @staticmethod
    def forward(ctx, gi, whh, bhh, valid):
        _, steps, batch, three_h = gi.shape
        hidden = three_h // 3
        h = gi.new_zeros(2, batch, hidden)  # h_0 = 0, as nn.GRU without hx
        whh_t = whh.transpose(1, 2)  # (2, H, 3H)
        bias = bhh.unsqueeze(1)  # (2, 1, 3H)
        states, saved = [], []
        for t in range(steps):
            gh = torch.baddbmm(bias, h, whh_t)  # (2, B, 3H): W_h h_{t-1} + b_h
            gi_t = gi[:, t]
            rz = torch.sigmoid(gi_t[..., : 2 * hidden] + gh[..., : 2 * hidden])  # (2, B, 2H)
            r, z = rz[..., :hidden], rz[..., hidden:]
            gh_n = gh[..., 2 * hidden :]
            n = torch.tanh(torch.addcmul(gi_t[..., 2 * hidden :], r, gh_n))  # (2, B, H)
            h_new = torch.addcmul(n, z, h - n)  # (1 - z) n + z h
            h_new = torch.where(valid[t].view(1, batch, 1), h_new, h)
            saved.append((h, rz, n, gh_n))
            states.append(h_new)
            h = h_new
        ctx.saved = saved
        ctx.save_for_backward(whh, valid)
        return torch.stack(states, dim=1), h  # (2, S, B, H), (2, B, H)

    @staticmethod
    def backward(ctx, grad_states, grad_last):
        whh, valid = ctx.saved_tensors
        saved = ctx.saved
        hidden = whh.size(2)
        grad_h = grad_last.clone()  # dL/dh_t, (2, B, H)
        grad_gi, grad_gh = [None] * len(saved), [None] * len(saved)
        for t in range(len(saved) - 1, -1, -1):
            h, rz, n, gh_n = saved[t]
            r, z = rz[..., :hidden], rz[..., hidden:]
            d = grad_h + grad_states[:, t]  # (2, B, H)
            d_in = d * valid[t].view(1, -1, 1)  # rows past their length: all of d passes to h_{t-1}
            d_n_pre = d_in * (1 - z) * (1 - n * n)  # through n = tanh(.)
            d_rz_pre = torch.cat([d_n_pre * gh_n, d_in * (h - n)], dim=-1) * rz * (1 - rz)  # (2, B, 2H)
            grad_gi[t] = torch.cat([d_rz_pre, d_n_pre], dim=-1)  # (2, B, 3H)
            grad_gh[t] = torch.cat([d_rz_pre, d_n_pre * r], dim=-1)  # (2, B, 3H)
            carried = torch.addcmul(d - d_in, d_in, z)  # z h_{t-1} term, and the rows past their length
            grad_h = torch.baddbmm(carried, grad_gh[t], whh)  # (2, B, H)
        grad_gh_all = torch.stack(grad_gh, dim=1).flatten(1, 2)  # (2, S*B, 3H)
        h_prev = torch.stack([s[0] for s in saved], dim=1).flatten(1, 2)  # (2, S*B, H)
        grad_whh = torch.bmm(grad_gh_all.transpose(1, 2), h_prev)  # (2, 3H, H): one product per direction
        return torch.stack(grad_gi, dim=1), grad_whh, grad_gh_all.sum(dim=1), None


def reverse_index(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """(B, S) position read at backward-direction step t: len-1-t inside the row, t past it (a
    permutation of 0..S-1 per row, its own inverse)."""
    t = torch.arange(steps, device=lengths.device).unsqueeze(0)  # (1, S)
    n = lengths.unsqueeze(1)  # (B, 1)
    return torch.where(t < n, n - 1 - t, t)


def bigru(gru: nn.GRU, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``gru`` (one layer, bidirectional, batch_first) over x (B, S, E) with row lengths (B,) ->
    outputs (B, S, 2H) (zero past a row's length) and final states (2, B, H), as ``nn.GRU`` over
    the packed batch gives them (``pad_packed_sequence`` of its output, and its ``h_n``)."""
    batch, steps, _ = x.shape
    hidden = gru.hidden_size
    lengths = lengths.to(x.device)
    w_ih = torch.cat([gru.weight_ih_l0, gru.weight_ih_l0_reverse])  # (6H, E)
    b_ih = torch.cat([gru.bias_ih_l0, gru.bias_ih_l0_reverse])  # (6H,)
    gi = torch.nn.functional.linear(x.transpose(0, 1), w_ih, b_ih)  # (S, B, 6H): every step, both directions
    rev = reverse_index(lengths, steps).t()  # (S, B)
    gi_fwd = gi[..., : 3 * hidden]
    gi_bwd = gi[..., 3 * hidden :].gather(0, rev.unsqueeze(-1).expand(-1, -1, 3 * hidden))  # own reverse order
    valid = torch.arange(steps, device=x.device).unsqueeze(1) < lengths.unsqueeze(0)  # (S, B)
    whh = torch.stack([gru.weight_hh_l0, gru.weight_hh_l0_reverse])  # (2, 3H, H)
    bhh = torch.stack([gru.bias_hh_l0, gru.bias_hh_l0_reverse])  # (2, 3H)
    states, last = _GRUSteps.apply(torch.stack([gi_fwd, gi_bwd]), whh, bhh, valid)  # (2, S, B, H), (2, B, H)
    fwd = states[0]  # (S, B, H)
    bwd = states[1].gather(0, rev.unsqueeze(-1).expand(-1, -1, hidden))  # back to source order
    out = torch.cat([fwd, bwd], dim=-1) * valid.unsqueeze(-1)  # (S, B, 2H), zero past the length
    return out.transpose(0, 1), last
