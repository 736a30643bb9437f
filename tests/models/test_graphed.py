"""CUDA graphs of the recurrent teacher forcing (models/graphed.py, ``train.cuda_graphs``).

On every device: padding a batch up to the graph buckets (``Batch.padded``) changes no real row's
log-likelihood, training objective or gradient, for every mechanism and option set. On CUDA
(``pytest --device cuda -m device``): the graphed recurrence computes what the eager one does, a
second batch of the same shape replays the graph on its own values, and a new shape gets its own
graph. Marked ``device``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from models.graphed import BATCH_STEP, SRC_STEP, TGT_STEP, bucket_shape
from models.specials import PAD
from pipeline.runtime.device import autocast
from tests.helpers import (
    TRANSFORMER_DECODER,
    contract_batch,
    contract_cases,
    contract_model,
    gold_and_grads,
    relative_error,
)

pytestmark = pytest.mark.device

CASES = contract_cases()
IDS = [f"{name}-{i}" for name, i, _ in CASES]
# Mechanisms whose teacher forcing steps through the recurrence (the graphed path): every decoder with
# input feeding or a fed-back output layer; the Luong decoder (WEAN, Seq2seq) runs in one pass.
STEPPING = ["copynet", "encdec", "pointer_generator", "pointer_softmax", "read_again", "rnnsearch"]
# CopyNet's selective read steps through the Transformer decoder's cache too.
STEPPING_VARIANTS = [(name, {}) for name in STEPPING] + [("copynet", TRANSFORMER_DECODER)]


def test_bucket_shape_rounds_up() -> None:
    batch = contract_batch(False, "cpu")
    b, s, t = batch.src.size(0), batch.src.size(1), batch.tgt_in.size(1)
    assert bucket_shape(batch) == (BATCH_STEP, SRC_STEP * -(-s // SRC_STEP), TGT_STEP * -(-t // TGT_STEP))
    assert b < BATCH_STEP
    with pytest.raises(ValueError, match="cannot pad"):
        batch.padded(b - 1, s, t)


@pytest.mark.parametrize("objective", [False, True], ids=["log_likelihood", "objective"])
@pytest.mark.parametrize("name,i,variant", CASES, ids=IDS)
def test_padding_to_the_buckets_changes_no_row(name, i, variant, objective, device) -> None:
    """float64, eval mode: the padded batch's (B', T') objective is the batch's own in its top-left
    corner and 0 elsewhere, and every parameter gets the same gradient."""
    model = contract_model(name, variant, device)
    batch = contract_batch(model.output.reads_pointers, device)
    b, t = batch.tgt_out.shape
    padded = batch.padded(b + 3, batch.src.size(1) + 5, t + 4)
    gold, grads = gold_and_grads(model, batch, objective, stepwise=False)
    gold_padded, grads_padded = gold_and_grads(model, padded, objective, stepwise=False)
    assert gold_padded.shape == (b + 3, t + 4)
    assert (gold[batch.tgt_out != PAD] < 0).all()
    assert torch.allclose(gold_padded[:b, :t], gold, rtol=0, atol=1e-10), (gold_padded[:b, :t] - gold).abs().max()
    assert (gold_padded[b:] == 0).all() and (gold_padded[:, t:] == 0).all()
    assert grads.keys() == grads_padded.keys() and len(grads) > 0
    for key, grad in grads.items():
        assert torch.allclose(grads_padded[key], grad, rtol=0, atol=1e-9), key


def _no_dropout(model: nn.Module) -> nn.Module:
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    return model


def _graphed_and_eager(name: str, device, variant: dict | None = None, dtype=torch.float32):
    eager = _no_dropout(contract_model(name, variant or {}, device, dtype=dtype).train())
    graphed = _no_dropout(contract_model(name, variant or {}, device, dtype=dtype).train()).graph_recurrence()
    return graphed, eager


def _seeded(model, batch, amp: str = "off"):
    torch.manual_seed(7)  # Pointer Softmax's noisy switch draws noise in training mode: the same for both
    with autocast(batch.src.device, amp, cache=False):
        return gold_and_grads(model, batch, objective=True, stepwise=False)


@pytest.mark.parametrize(
    "name,variant", STEPPING_VARIANTS, ids=[f"{n}-{'tf' if v else 'rnn'}" for n, v in STEPPING_VARIANTS]
)
def test_graphed_recurrence_computes_what_the_eager_one_does(name: str, variant: dict, device) -> None:
    if device.type != "cuda":
        pytest.skip("CUDA graphs need a CUDA device (pytest --device cuda -m device)")
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    graphed, eager = _graphed_and_eager(name, device, variant)
    batch = contract_batch(graphed.output.reads_pointers, device)
    batch = batch.padded(*bucket_shape(batch))
    for trial in range(2):  # the capture, then a replay on other values of the same shape
        if trial:
            batch.tgt_in[:, 1:] = batch.tgt_in[:, 1:].roll(1, dims=0)  # other gold prefixes
        gold, grads = _seeded(graphed, batch)
        gold_ref, grads_ref = _seeded(eager, batch)
        assert relative_error(gold, gold_ref) < 1e-5, (trial, relative_error(gold, gold_ref))
        assert grads.keys() == grads_ref.keys()
        for key, grad in grads.items():
            assert relative_error(grad, grads_ref[key]) < 1e-4, (trial, key)
    graphs = graphed.__dict__["_graphed"].graphs
    assert len(graphs) == 1
    longer = batch.padded(batch.src.size(0), batch.src.size(1) + SRC_STEP, batch.tgt_in.size(1))
    gold, _ = _seeded(graphed, longer)
    gold_ref, _ = _seeded(eager, longer)
    assert relative_error(gold, gold_ref) < 1e-5
    assert len(graphs) == 2  # a new shape, a new graph
    eager.eval()
    graphed.eval()  # eval mode (validation) runs eagerly
    assert torch.equal(graphed(batch).detach(), eager(batch).detach())


@pytest.mark.parametrize("name", ["copynet", "pointer_generator"])
def test_graphed_recurrence_under_bf16_autocast(name: str, device) -> None:
    """bf16 autocast (its weight cache off, as CUDA graphs need): graphed within bf16's rounding of
    eager under the same autocast."""
    if device.type != "cuda":
        pytest.skip("CUDA graphs need a CUDA device (pytest --device cuda -m device)")
    graphed, eager = _graphed_and_eager(name, device)
    batch = contract_batch(False, device)
    batch = batch.padded(*bucket_shape(batch))
    gold, grads = _seeded(graphed, batch, amp="bf16")
    gold_ref, grads_ref = _seeded(eager, batch, amp="bf16")
    assert torch.isfinite(gold).all()
    assert relative_error(gold, gold_ref) < 1e-2
    for key, grad in grads.items():
        assert relative_error(grad, grads_ref[key]) < 5e-2, key
