"""OutputLayer.project without gradients reads a transposed copy of the output weight kept between
calls (models/seq2seq.py): it must equal the product with the current weights after anything that
changes them: a fused optimizer's step (which does not move the version counter), an in-place
write, load_state_dict, and in training mode it is not used at all."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from models.config import ModelConfig
from models.registry import build_model


def _expected(layer, x):
    linear = layer.w_o
    bias = layer.unemittable_bias(linear.out_features, linear.weight)
    return F.linear(x, linear.weight, bias)


def _same(a, b):
    """Equal to float32 rounding (the two products may sum in another order); a stale copy of the
    weights is off by far more (the changes below halve or double them, or take an Adam step of 0.1)."""
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_the_inference_copy_follows_every_change_of_the_weights():
    torch.manual_seed(0)
    model = build_model("copynet", ModelConfig(src_vocab=20, tgt_vocab=30, emb=8, hidden=12))
    layer = model.output
    x = torch.randn(3, 12)
    with torch.no_grad():
        _same(layer.project(x, layer.w_o), _expected(layer, x))
        held = layer._inference_copies[id(layer.w_o)][2]
        _same(layer.project(x, layer.w_o), _expected(layer, x))
        assert layer._inference_copies[id(layer.w_o)][2] is held  # kept between calls
    opt = torch.optim.Adam(model.parameters(), lr=0.1, fused=True)
    (layer.w_o.weight**2).sum().backward()
    version = layer.w_o.weight._version
    opt.step()  # fused: the weights change, their version counter does not
    assert layer.w_o.weight._version == version
    with torch.no_grad():
        _same(layer.project(x, layer.w_o), _expected(layer, x))
        layer.w_o.weight.mul_(0.5)  # an in-place write
        _same(layer.project(x, layer.w_o), _expected(layer, x))
    state = {k: v * 2 for k, v in model.state_dict().items()}
    model.load_state_dict(state)
    with torch.no_grad():
        _same(layer.project(x, layer.w_o), _expected(layer, x))
    model.train()
    assert not layer._inference_copies  # training mode drops the copy
