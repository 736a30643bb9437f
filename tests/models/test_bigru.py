"""models.bigru: the bidirectional GRU over padded batches computes what ``nn.GRU`` computes over
the packed batch: outputs, final states and the gradients of the input and of every parameter,
in float64 (to rounding), for rows of every length from 1 to the longest."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from models.bigru import bigru, reverse_index


def _reference(gru: nn.GRU, x: torch.Tensor, lengths: torch.Tensor):
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, h_n = gru(packed)
    return pad_packed_sequence(out, batch_first=True, total_length=x.size(1))[0], h_n


def _run(fn, gru, x, lengths, weights):
    x = x.detach().clone().requires_grad_(True)
    gru.zero_grad()
    out, h_n = fn(gru, x, lengths)
    ((out * weights[0]).sum() + (h_n * weights[1]).sum()).backward()
    return out.detach(), h_n.detach(), x.grad, {n: p.grad.clone() for n, p in gru.named_parameters()}


def test_reverse_index_reads_each_row_backwards_and_is_its_own_inverse():
    rev = reverse_index(torch.tensor([3, 1, 4]), 4)
    assert rev.tolist() == [[2, 1, 0, 3], [0, 1, 2, 3], [3, 2, 1, 0]]
    assert torch.equal(rev.gather(1, rev), torch.arange(4).expand(3, 4))


def test_bigru_equals_nn_gru_on_the_packed_batch_with_gradients():
    torch.manual_seed(0)
    gru = nn.GRU(5, 7, batch_first=True, bidirectional=True).double()
    lengths = torch.tensor([6, 1, 4, 6, 2, 5])  # every row its own length, 1 and the longest included
    x = torch.randn(6, 6, 5, dtype=torch.float64)
    x[torch.arange(6).unsqueeze(0) >= lengths.unsqueeze(1)] = 0.0  # padding, as an embedding of <pad> would be
    weights = (torch.randn(6, 6, 14, dtype=torch.float64), torch.randn(2, 6, 7, dtype=torch.float64))
    ref = _run(_reference, gru, x, lengths, weights)
    got = _run(bigru, gru, x, lengths, weights)
    torch.testing.assert_close(got[0], ref[0], rtol=0, atol=1e-12)  # outputs, zero past each length
    torch.testing.assert_close(got[1], ref[1], rtol=0, atol=1e-12)  # final states of both directions
    torch.testing.assert_close(got[2], ref[2], rtol=0, atol=1e-12)  # input gradient
    for name, grad in ref[3].items():
        torch.testing.assert_close(got[3][name], grad, rtol=0, atol=1e-11, msg=name)
    past = torch.arange(6).unsqueeze(0) >= lengths.unsqueeze(1)  # (B, S)
    assert got[0][past].abs().max() == 0 and got[2][past].abs().max() == 0  # nothing flows from padding


def test_bigru_gradients_pass_gradcheck():
    torch.manual_seed(1)
    gru = nn.GRU(3, 2, batch_first=True, bidirectional=True).double()
    x = torch.randn(3, 4, 3, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([4, 2, 1])
    assert torch.autograd.gradcheck(lambda x: bigru(gru, x, lengths), (x,))
