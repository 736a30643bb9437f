"""OutputLayer.project without gradients reads a transposed copy of the output weight kept between
calls (models/seq2seq.py): it must equal the product with the current weights after anything that
changes them: a fused optimizer's step (which does not move the version counter), an in-place
write, load_state_dict, and in training mode it is not used at all."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch.nn import functional as F

from models.config import ModelConfig
from models.registry import build_model
from tests.helpers import REPO


def _expected(layer, x):
    linear = layer.w_o
    bias = layer.unemittable_bias(linear.out_features, linear.weight)
    return F.linear(x, linear.weight, bias)


def _same(a, b):
    """Equal to float32 rounding (the two products may sum in another order); a stale copy of the
    weights is off by far more (the changes below halve or double them, or take an Adam step of 0.1)."""
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [1, 3, 40], ids=["one-row", "packed", "transposed"])
def test_the_inference_copy_follows_every_change_of_the_weights(rows):
    torch.manual_seed(0)
    model = build_model("copynet", ModelConfig(src_vocab=20, tgt_vocab=30, emb=8, hidden=12))
    layer = model.output
    x = torch.randn(rows, 12)
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


def test_packed_copy_is_made_once_per_row_count_and_matches_the_product():
    """A beam of one sentence (10 rows) at a real output layer's size reads MKL's packed weight: made
    once, kept while the row count stays, remade for another; its values are the product's."""
    from models import seq2seq

    if not seq2seq.packed_product_usable(torch.zeros(2, 2), torch.zeros(2, 2)):
        pytest.skip("this PyTorch has no MKL packed product")
    torch.manual_seed(0)
    model = build_model("pointer_generator", ModelConfig(src_vocab=50, tgt_vocab=3000, emb=16, hidden=64))
    model.eval()
    layer = model.output
    linear = layer.vocab  # V' of See et al. eq. 4: (3000, 64)
    with torch.no_grad():
        x = torch.randn(10, linear.in_features)
        _same(layer.project(x, linear), _expected_for(layer, linear, x))
        packed = layer._inference_copies[id(linear)][4]
        assert packed[0] == 10
        layer.project(torch.randn(10, linear.in_features), linear)
        assert layer._inference_copies[id(linear)][4] is packed  # kept for the same row count
        y = torch.randn(4, linear.in_features)
        _same(layer.project(y, linear), _expected_for(layer, linear, y))
        assert layer._inference_copies[id(linear)][4][0] == 4


def _expected_for(layer, linear, x):
    bias = layer.unemittable_bias(linear.out_features, linear.weight)
    return F.linear(x, linear.weight, bias if linear.bias is None else linear.bias + bias)


def test_importing_the_models_registers_no_optimizer_hook_and_the_first_copy_registers_one():
    """The step counter the copies read (``models.seq2seq.count_optimizer_steps``) is a process-wide
    torch.optim hook: importing every mechanism registers none; the first inference copy registers it,
    once however often it is asked, and it counts each step once."""
    script = """
import torch
from torch.optim import optimizer as torch_optimizer
from models import seq2seq
from models.config import ModelConfig
from models.registry import build_model
hooks = torch_optimizer._global_optimizer_post_hooks
assert not hooks, hooks
model = build_model("copynet", ModelConfig(src_vocab=20, tgt_vocab=30, emb=8, hidden=12))
assert not hooks, hooks
opt = torch.optim.SGD(model.parameters(), lr=0.1)
opt.step()  # before any copy: nothing counts it, nothing needs to
assert seq2seq._optimizer_steps[0] == 0
with torch.no_grad():
    model.output.project(torch.randn(1, 12), model.output.w_o)
assert len(hooks) == 1
seq2seq.count_optimizer_steps()
seq2seq.count_optimizer_steps()
assert len(hooks) == 1
before = seq2seq._optimizer_steps[0]
opt.step()
assert seq2seq._optimizer_steps[0] == before + 1
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
