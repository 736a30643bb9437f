"""models.extended.logsumexp: the value and the gradient of torch.logsumexp, with the one-product
backward pass; rows of NEG (the project's finite minus infinity) and of -inf stay finite."""

from __future__ import annotations

import torch

from models.extended import NEG, logsumexp


def test_value_and_gradient_equal_torch_logsumexp():
    torch.manual_seed(0)
    x = (torch.randn(3, 4, 50, dtype=torch.float64) * 5).requires_grad_(True)
    x.data[0, 1, 7:] = NEG  # masked entries, as an output layer's unemittable words
    g = torch.randn(3, 4, 1, dtype=torch.float64)
    ours = logsumexp(x)
    (ours * g).sum().backward()
    ours_grad, x.grad = x.grad, None
    ref = torch.logsumexp(x, -1, keepdim=True)
    (ref * g).sum().backward()
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(ours_grad, x.grad, rtol=0, atol=1e-12)
    assert torch.autograd.gradcheck(logsumexp, (x.detach()[:1, :2, :9].clone().requires_grad_(True),))


def test_rows_of_neg_and_of_minus_infinity():
    x = torch.tensor([[NEG, NEG], [float("-inf"), float("-inf")], [0.0, float("-inf")]], requires_grad=True)
    out = logsumexp(x)
    assert torch.equal(out[0], torch.logsumexp(x[0].detach(), -1, keepdim=True))  # NEG + log 2, finite
    assert out[1].item() == float("-inf") and out[2].item() == 0.0
    out[[0, 2]].sum().backward()
    assert torch.equal(x.grad[0], torch.tensor([0.5, 0.5])) and torch.equal(x.grad[2], torch.tensor([1.0, 0.0]))
