"""Two-phase teacher forcing (recurrence first, then the output layer on all B x T positions at once)
equals the stepwise computation through ``Seq2Seq.step``, for every mechanism and option set:
per-token log-likelihoods and training objectives, and the gradients of every parameter, in float64
(and in float32, the training precision, at float32's tolerance). Marked ``device``: the models and
batches live on ``--device`` (``pytest --device cuda -m device`` runs them on a GPU).
"""

from __future__ import annotations

import pytest
import torch

from pipeline.vocab.batching import collate
from pipeline.vocab.vocabulary import SPECIALS, Vocab
from tests.conftest import toy_model

pytestmark = pytest.mark.device

SRC_WORDS = ["a", "b", "c", "d", "e", "f", "g", "."]
TGT_WORDS = ["a", "b", "c", "d", "e", "."]  # f, g and z* are decoder OOVs
SRC_VOCAB = Vocab(list(SPECIALS) + SRC_WORDS, [0] * 4 + [1] * len(SRC_WORDS))
TGT_VOCAB = Vocab(list(SPECIALS) + TGT_WORDS, [0] * 4 + [1] * len(TGT_WORDS))
# Several sentences (Read-Again opt1/opt2), repeated words, OOVs copied, an OOV found nowhere (-> <unk>).
SRCS = [["a", "b", ".", "c"], ["c", "f", "a", "f", ".", "d", "e"], ["g", "zz", "b", ".", "a", "zz", "c", ".", "e"]]
TGTS = [["b", "a", "c", "e", "e"], ["f", "f", "c", "q"], ["zz", "g", "b", "d", "zz", "b", "."]]
# Pointer Softmax 5.2-style annotations: the source position of each target token (-1: none).
POINTERS = [[1, 0, 3, -1, -1], [1, 3, 0, -1], [1, 0, 2, -1, 5, -1, 3]]
SWITCHES = [[False, True, True, False, False], [True, True, False, True], [True, True, False, False, True, True, False]]

OPTION_SETS = [
    ("encdec", {}),
    ("rnnsearch", {}),
    ("rnnsearch", {"encoder": "transformer", "transformer_heads": 2}),
    ("copynet", {}),
    ("copynet", {"encoder": "transformer", "transformer_heads": 2}),
    ("luong", {}),
    ("luong", {"luong": {"candidates": 7, "layers": 1}}),
    ("wean", {"wean": {"score": "dot"}}),
    ("wean", {"wean": {"score": "general", "candidates": 8}}),
    ("wean", {"wean": {"score": "concat", "layers": 1}}),
    ("pointer_softmax", {}),
    ("pointer_softmax", {"pointer_softmax": {"shortlist": 7, "temperature": 2.0}}),
    ("pointer_softmax", {"pointer_softmax": {"switch": "noisy_residual", "unknown_pointer": "switch"}}),
    ("pointer_softmax", {"pointer_softmax": {"batch_vocab": 6, "batch_vocab_scope": "example", "decode": "max"}}),
    ("pointer_softmax", {"pointer_softmax": {"batch_vocab": 6, "shortlist": 8}}),
    ("read_again", {}),
    ("read_again", {"read_again": {"cell": "gru", "sentences": "opt1", "decoder": "gru"}}),
    ("read_again", {"read_again": {"cell": "lstm", "sentences": "opt2", "decoder_vocab": 7}}),
    ("pointer_generator", {}),
    ("pointer_generator", {"pointer_generator": {"coverage": False}}),
    ("pointer_generator", {"pointer_generator": {"coverage_loss_weight": 0.3}}),
]


def _model(name: str, options: dict, device: torch.device, dtype: torch.dtype = torch.float64):
    """``options`` as params.yaml's model slice: shared settings and the mechanism's own section."""
    shared = {k: v for k, v in options.items() if k != name}
    model = toy_model(name, SRC_VOCAB, TGT_VOCAB, seed=3, scale=1.5, config=shared, **options.get(name, {}))
    return model.to(device=device, dtype=dtype)


def _batch(annotated: bool, device: torch.device):
    if annotated:
        return collate(SRCS, TGTS, SRC_VOCAB, TGT_VOCAB, pointers=POINTERS, switches=SWITCHES).to(device)
    return collate(SRCS, TGTS, SRC_VOCAB, TGT_VOCAB).to(device)


def _gold_and_grads(model, batch, objective: bool, stepwise: bool):
    model.zero_grad(set_to_none=True)
    # cuDNN's RNN backward runs in training mode only: an eval-mode model on a GPU (the float64
    # maths checks) runs PyTorch's own CUDA RNN kernels instead.
    with torch.backends.cudnn.flags(enabled=model.training):
        gold = model(batch, objective=objective, stepwise=stepwise)  # (B, T)
        gold.sum().backward()
    return gold.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


# Pointer Softmax also with the pointer annotations (the only mechanism that reads them).
CASES = [(n, o, False) for n, o in OPTION_SETS] + [(n, o, True) for n, o in OPTION_SETS if n == "pointer_softmax"]


@pytest.mark.parametrize("objective", [False, True], ids=["log_likelihood", "objective"])
@pytest.mark.parametrize(
    "name,options,annotated", CASES, ids=[f"{n}-{i}{'-annotated' if a else ''}" for i, (n, _, a) in enumerate(CASES)]
)
def test_two_phase_equals_stepwise(name: str, options: dict, annotated: bool, objective: bool, device) -> None:
    model = _model(name, options, device)  # eval mode: deterministic (no dropout, no switch noise)
    batch = _batch(annotated, device)
    two_phase, grads = _gold_and_grads(model, batch, objective, stepwise=False)
    stepwise, grads_ref = _gold_and_grads(model, batch, objective, stepwise=True)
    real = batch.tgt_out != 0
    assert (two_phase[real] < 0).all() and (two_phase[~real] == 0).all()
    assert torch.allclose(two_phase, stepwise, rtol=0, atol=1e-9), (two_phase - stepwise).abs().max()
    assert grads.keys() == grads_ref.keys() and len(grads) > 0
    for key, grad in grads.items():
        assert torch.allclose(grad, grads_ref[key], rtol=0, atol=1e-9), (key, (grad - grads_ref[key]).abs().max())


@pytest.mark.parametrize("name", ["copynet", "pointer_generator", "luong"])
def test_two_phase_equals_stepwise_in_training_mode_without_dropout(name: str, device) -> None:
    """Training mode (the objective, train-time code paths) with dropout 0: still identical."""
    model = _model(name, {}, device).train()
    batch = _batch(False, device)
    two_phase, grads = _gold_and_grads(model, batch, None, stepwise=False)
    stepwise, grads_ref = _gold_and_grads(model, batch, None, stepwise=True)
    assert torch.allclose(two_phase, stepwise, rtol=0, atol=1e-9)
    for key, grad in grads.items():
        assert torch.allclose(grad, grads_ref[key], rtol=0, atol=1e-9), key


def _relative_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x - ref).norm() / ref.norm().clamp_min(1e-30))


# Training mode has no randomness with dropout 0, except Pointer Softmax's noisy switch.
NOISELESS = [(n, o) for n, o in OPTION_SETS if "noisy" not in str(o)]


@pytest.mark.parametrize("name,options", NOISELESS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(NOISELESS)])
def test_two_phase_equals_stepwise_in_float32(name: str, options: dict, device) -> None:
    """The training precision and mode: float32 in training mode on the device (cuDNN / cuBLAS
    kernels on a GPU, TF32 off: tests/conftest.py). The two computations sum in other orders, so they
    agree to float32's rounding, not to the bit: relative error of the log-likelihoods and of every
    gradient under 1e-4 (float32 rounding is ~1e-7 per operation; a wrong term is off by far more)."""
    model = _model(name, options, device, dtype=torch.float32).train()
    batch = _batch(name == "pointer_softmax", device)
    two_phase, grads = _gold_and_grads(model, batch, True, stepwise=False)
    stepwise, grads_ref = _gold_and_grads(model, batch, True, stepwise=True)
    assert two_phase.dtype == torch.float32
    assert _relative_error(two_phase, stepwise) < 1e-4
    assert grads.keys() == grads_ref.keys() and len(grads) > 0
    for key, grad in grads.items():
        assert _relative_error(grad, grads_ref[key]) < 1e-4, key
