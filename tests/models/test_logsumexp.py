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


def test_logsumexp_value_is_torch_logsumexp_bit_for_bit():
    """The search's logsumexp (exp's argument floored at EXP_FLOOR, out of the CPU's slow path for
    underflow) equals torch.logsumexp bit for bit in float32: masked rows, mostly-NEG rows, rows of
    -inf, wide ranges, entries just under the floor."""
    from models.extended import EXP_FLOOR, logsumexp_value

    torch.manual_seed(1)
    for trial in range(200):
        shape = (int(torch.randint(1, 6, ())), int(torch.randint(1, 9, ())), int(torch.randint(1, 40, ())))
        x = torch.randn(shape) * float(torch.rand(())) * 300
        x[torch.rand(shape) < float(torch.rand(()))] = NEG
        if trial % 5 == 0:
            x[0] = NEG  # a row of NEG only: NEG + log n
        if trial % 7 == 0:
            x[torch.rand(shape) < 0.2] = float("-inf")
        if trial % 3 == 0:  # entries near the floor below each row's max
            x[..., :2] = x.amax(-1, keepdim=True) + EXP_FLOOR - torch.rand(*shape[:-1], 2) * 30
        assert torch.equal(logsumexp_value(x), torch.logsumexp(x, -1)), trial
    x = torch.full((2, 3), float("-inf"))
    assert torch.equal(logsumexp_value(x), torch.logsumexp(x, -1))  # -inf rows stay -inf
